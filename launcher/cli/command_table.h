// The job commands of `elastrun` as tables: each command's flags and help
// text, the service flags every job command takes, and the texts of
// `elastrun --help`. cli.cc makes CLI11 commands of them; commands.cc runs
// them.
#ifndef ELASTRUN_LAUNCHER_CLI_COMMAND_TABLE_H_
#define ELASTRUN_LAUNCHER_CLI_COMMAND_TABLE_H_

#include <cstddef>

#include "absl/types/span.h"

namespace elastrun::launcher::internal {

// A flag of a job command: CLI11 names, the value's name ("" for none), help.
struct FlagInfo {
  const char* names;
  const char* value;
  const char* help;
  bool repeatable = false;
};

// The flags of one command: a view of a constant array.
class FlagList {
 public:
  // Implicit, so that a table entry names its array.
  template <size_t N>
  constexpr FlagList(const FlagInfo (&flags)[N]) : begin_(flags), end_(flags + N) {}
  const FlagInfo* begin() const { return begin_; }
  const FlagInfo* end() const { return end_; }

 private:
  const FlagInfo* begin_;
  const FlagInfo* end_;
};

// A job command: its line in `elastrun --help` (summary) and its own help.
struct CommandInfo {
  const char* name;
  const char* summary;
  FlagList flags;     // beyond the service flags
  bool takes_words;   // JOB, a job file, KEY=VALUE...
  const char* intro;  // usage and description
};

// Exit codes, the intro, the service note and the pointer to per-command
// help: the parts of `elastrun --help`.
extern const char kExitCodesHelp[];
extern const char kIntro[];
extern const char kServiceNote[];
extern const char kMoreHelp[];

// The service flags (every job command takes them).
absl::Span<const FlagInfo> ServiceFlags();
// The job commands, in the order `elastrun --help` lists them (after run).
absl::Span<const CommandInfo> JobCommands();

}  // namespace elastrun::launcher::internal

#endif  // ELASTRUN_LAUNCHER_CLI_COMMAND_TABLE_H_
