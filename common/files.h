// Small file-system helpers shared by the launcher, the daemon and the
// trainer.
#ifndef ELASTRUN_COMMON_FILES_H_
#define ELASTRUN_COMMON_FILES_H_

#include <string>

#include "absl/status/status.h"

namespace elastrun {

// Makes `dir` and its missing parents (mode 0755). OK if it exists.
// FailedPrecondition naming the folder that could not be made, and why.
absl::Status MakeDirs(const std::string& dir);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_FILES_H_
