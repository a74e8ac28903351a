// Test helper of the `elastrun evolve` end-to-end tests: a wrapper named
// elastrun-train (so that evolve passes config overrides) around the real
// one, recording each training start.
#ifndef ELASTRUN_EVOLVE_EVOLVE_TEST_UTIL_H_
#define ELASTRUN_EVOLVE_EVOLVE_TEST_UTIL_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace elastrun::evolve {

// A /bin/sh script that passes --print-config straight to `real`, else
// appends the individual's folder (train.output_dir=DIR) as a line to
// `starts`, runs `before_exec` (shell lines; "$d" is that folder), then
// execs `real` with its arguments.
inline std::string RecordingTrainWrapper(const std::string& real, const std::string& starts,
                                         const std::string& before_exec) {
  return absl::StrCat(
      "#!/bin/sh\n"
      "case \" $* \" in *\" --print-config \"*) exec ", real, " \"$@\";; esac\n",
      "for a in \"$@\"; do case \"$a\" in train.output_dir=*) "
      "d=\"${a#train.output_dir=}\";; esac; done\n"
      "echo \"$d\" >> ", starts, "\n", before_exec, "exec ", real, " \"$@\"\n");
}

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_TEST_UTIL_H_
