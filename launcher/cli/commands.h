// Internal to the CLI (cli.cc parses, commands.cc runs): a command's
// words after flag parsing, and one function per command.
#ifndef ELASTRUN_LAUNCHER_CLI_COMMANDS_H_
#define ELASTRUN_LAUNCHER_CLI_COMMANDS_H_

#include <map>
#include <string>
#include <vector>

#include "launcher/cli/cli.h"
#include "launcher/cli/client.h"

namespace elastrun::launcher::internal {

struct ParsedArgs {
  std::string command;
  // --rendezvous / --token / --token-file / --rpc-timeout, with the
  // environment's fallbacks applied.
  ServiceOptions service;
  // --output json
  bool json = false;
  // The command's flags by their first long name ("--nnodes", "--follow"),
  // every value in order; a flag without a value holds "true".
  std::map<std::string, std::vector<std::string>> flags;
  std::vector<std::string> positional;
  // The words after "--" (submit's program).
  std::vector<std::string> program;

  bool Has(const std::string& flag) const { return flags.count(flag) > 0; }
  // The last value of `flag`, or "" when absent.
  std::string Last(const std::string& flag) const;
};

// Each returns the exit code; errors go to ctx.err prefixed "elastrun CMD: ".
int Submit(const ParsedArgs& a, const CliContext& ctx);
int Status(const ParsedArgs& a, const CliContext& ctx);
int List(const ParsedArgs& a, const CliContext& ctx);
int Nodes(const ParsedArgs& a, const CliContext& ctx);
int Cancel(const ParsedArgs& a, const CliContext& ctx);
int Wait(const ParsedArgs& a, const CliContext& ctx);
int Logs(const ParsedArgs& a, const CliContext& ctx);
int Events(const ParsedArgs& a, const CliContext& ctx);

}  // namespace elastrun::launcher::internal

#endif  // ELASTRUN_LAUNCHER_CLI_COMMANDS_H_
