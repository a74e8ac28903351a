// The `elastrun` command line: `run` (run_options.h), `evolve`
// (evolve/evolve_flags.h) and the job commands
// (submit, status, list, nodes, cancel, wait, logs, events), `help [COMMAND]` and
// --version, parsed with CLI11 (common/flags.h). The job commands talk to
// the service through a JobsClient and print; each returns the process exit
// code. Everything the commands touch outside (environment, client, clock,
// sleep, streams, the launcher of `run`) comes in through CliContext, so
// tests run them in-process against fakes.
#ifndef ELASTRUN_LAUNCHER_CLI_CLI_H_
#define ELASTRUN_LAUNCHER_CLI_CLI_H_

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "evolve/evolve_run.h"
#include "launcher/cli/client.h"
#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// Exit codes of every job command; a script may rely on them.
enum ExitCode : int {
  kExitOk = 0,           // done; for `wait`: the job SUCCEEDED
  kExitFailed = 1,       // the job FAILED or was CANCELLED (`wait`), or the
                         // command failed (e.g. refused by the service)
  kExitUsage = 2,        // bad flags or arguments, or a job spec refused
  kExitUnreachable = 3,  // the service could not be reached or did not answer
  kExitNotFound = 4,     // no such job
  kExitTimeout = 5,      // `wait --timeout` passed before the job ended
};

// The exit code for an error from the service or a local check:
// InvalidArgument -> 2, Unavailable/DeadlineExceeded -> 3, NotFound -> 4,
// anything else -> 1.
int ExitCodeFor(const absl::Status& status);

// The world outside the commands.
struct CliContext {
  // Environment lookup (ELASTRUN_RENDEZVOUS, ELASTRUN_TOKEN).
  std::function<std::optional<std::string>(const std::string&)> env;
  // The whole environment ("NAME=value"), for `submit --export`; empty:
  // none.
  std::function<std::vector<std::string>()> environment;
  // The current folder, `submit`'s default working folder; empty function
  // or result: none (the node daemon's).
  std::function<std::string()> cwd;
  // Opens a client for the resolved options.
  std::function<std::unique_ptr<JobsClient>(const ServiceOptions&)> connect;
  // `wait` polls with these: time, and a pause between two polls.
  const Clock* clock = &RealClock();
  std::function<void(absl::Duration)> sleep;
  std::ostream* out = nullptr;  // results (job id, status, tables, JSON), help
  std::ostream* err = nullptr;  // errors and notes
  // Runs `elastrun run` with parsed options; returns its exit code.
  std::function<int(const RunOptions&)> run;
  // Runs `elastrun evolve` with parsed options; returns its exit code.
  std::function<int(const evolve::EvolveOptions&)> evolve;
  // --rdzv-endpoint of `run`: is this host this node?
  HostCheck is_this_host = IsThisHost;
};

// The real world: getenv, gRPC, the real clock, absl::SleepFor, stdout/stderr,
// RunStandalone, RunEvolve.
CliContext RealCliContext();

// Runs `elastrun ARGS...` (args: the words after the binary's name).
// Usage errors print "elastrun[ COMMAND]: what, naming the flag" and "Run
// 'elastrun[ COMMAND] --help' for usage." and return kExitUsage; --help,
// `help [COMMAND]` and --version print to ctx.out and return 0.
int RunCli(const std::vector<std::string>& args, const CliContext& ctx);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_CLI_H_
