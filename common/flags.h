// What every elastrun binary shares about its command line, on top of CLI11:
// the help layout (usage and description first, one line per flag with its
// names but the underscored aliases, a footer), --help and --version, the
// last of a repeated flag wins (as with argparse), and one error style:
//
//   BINARY: <what was wrong, naming the flag>
//   Run 'BINARY --help' for usage.
//
// with exit code 2 (kExitUsage). Flags are parsed only in main files and in
// the parse functions they call; the values are checked afterwards by the
// caller with common/strings.h, whose errors name the flag.
#ifndef ELASTRUN_COMMON_FLAGS_H_
#define ELASTRUN_COMMON_FLAGS_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::flags {

// The exit code of a usage error, in every binary.
inline constexpr int kExitUsage = 2;

// A new command line for BINARY ("elastrund", or "elastrun run" for a
// subcommand parsed alone). `intro` is printed first by --help and starts
// with the usage line(s); then the flags; `footer` last. Adds -h/--help, and
// --version ("BINARY 0.2.0 (commit abc1234)") unless `version` is false.
std::unique_ptr<CLI::App> NewApp(const std::string& binary, const std::string& intro,
                                 const std::string& footer = "", bool version = true);

// A subcommand with the same layout and rules: `summary` is its line in the
// parent's command list; `intro` and `footer` frame its own --help.
CLI::App* AddCommand(CLI::App* parent, const std::string& name, const std::string& summary,
                     const std::string& intro, const std::string& footer = "");

// Gives `app` the help layout and rules of NewApp.
void Configure(CLI::App* app, const std::string& intro, const std::string& footer,
               bool version);

// "--nproc-per-node" -> "--nproc-per-node,--nproc_per_node": torchrun takes
// both spellings; help shows the first.
std::string WithUnderscores(const std::string& names);

// "BINARY: MESSAGE\nRun 'BINARY --help' for usage.\n"
std::string UsageError(const std::string& binary, const std::string& message);

// CLI11's message for a parse error, reworded where it is unclear
// ("--x: 1 required TEXT missing" -> "--x needs a value"). Parse() names an
// unexpected word itself: "unknown flag --x" or "unexpected argument x".
std::string ErrorMessage(const CLI::ParseError& error);

// How parsing went, for callers that print (or return) errors themselves.
struct Outcome {
  enum Kind { kOk, kHelp, kVersion, kError } kind = kOk;
  // kError: what was wrong, naming the flag (no binary prefix).
  // kVersion: the version line.
  std::string message;
  // kError: the (sub)command that failed ("elastrun run").
  std::string where;
};
Outcome TryParse(CLI::App& app, std::vector<std::string> args);

// Parses `args` (without argv[0]) into `app`. Returns an exit code when the
// program should exit now: 0 after printing --help or --version to `out`,
// kExitUsage after printing the error to `err` in the style above (naming
// the subcommand that failed, e.g. "elastrun run: ..."). std::nullopt when
// parsing succeeded and the program goes on.
std::optional<int> Parse(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                         std::ostream& err);

// The same for main's argc/argv.
std::optional<int> Parse(CLI::App& app, int argc, char** argv);

// The token in FILE (--token-file), surrounding whitespace stripped.
// InvalidArgument naming `flag` and FILE when it cannot be read or is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path,
                                          const std::string& flag = "--token-file");

// The binary and subcommand names of `app` ("elastrun run").
std::string FullName(const CLI::App& app);

// --config FILE for a binary's flags, as systemd units and Kubernetes
// manifests pass them: one `name = value` per line, the names those of the
// long flags without "--" (`token-file = /etc/elastrun/token`), a flag
// without a value (--standby) set with `true` or `false`. Blank lines and
// lines starting with '#' or ';' are skipped; a value in double quotes keeps
// its spaces (and may be empty). Precedence: the command line, then the
// file, then the caller's own fallbacks (environment, defaults); a flag on
// the command line also wins over a file key it excludes (--token over
// `token-file`). Not thread-safe; one per app.
class ConfigFile {
 public:
  // Adds --config FILE to `app`, which must outlive this object.
  explicit ConfigFile(CLI::App* app);

  // Call after Parse() succeeded: reads the file named by --config (none
  // given: nothing to do) and sets each of its flags that the command line
  // did not. InvalidArgument, starting "FILE:LINE: " and naming the key: a
  // line that is not `name = value`, an unknown key (the known ones are
  // listed), a key given twice, a bad value, two keys that exclude each
  // other; starting "--config FILE: " when the file cannot be read or is
  // over 1 MiB.
  absl::Status Apply();

  // For an error found after Apply() that names a flag ("--lease-timeout:
  // ..."): the message prefixed with "FILE:LINE: " when that flag's value
  // came from the file, else unchanged.
  std::string Locate(const std::string& message) const;

 private:
  struct Line {
    int number = 0;
    std::string key, value;
    CLI::Option* option = nullptr;
  };
  absl::StatusOr<std::vector<Line>> Read() const;

  CLI::App* app_;
  std::string path_;      // --config
  std::vector<Line> set_;  // the lines whose values were used
};

}  // namespace elastrun::flags

#endif  // ELASTRUN_COMMON_FLAGS_H_
