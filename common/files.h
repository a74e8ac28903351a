// Small file-system helpers shared by the launcher, the daemon and the
// trainer.
#ifndef ELASTRUN_COMMON_FILES_H_
#define ELASTRUN_COMMON_FILES_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace elastrun {

// Makes `dir` and its missing parents (mode 0755). OK if it exists.
// FailedPrecondition naming the folder that could not be made, and why.
absl::Status MakeDirs(const std::string& dir);

// Makes the folder `dir` with exactly `mode` (whatever the umask); its
// parent must exist. When it exists already and `must_be_new` is false, it
// is accepted only when it is safe to keep private files in: a real folder
// (a symlink is never followed), owned by this process's effective uid,
// writable by no one else; its mode is then set to `mode`. Errors
// (FailedPrecondition) name the folder and what is wrong with it: "exists"
// when `must_be_new`, "is a symlink", "belongs to uid N", "has mode 0777".
absl::Status MakePrivateDir(const std::string& dir, mode_t mode, bool must_be_new);

// Whether the folders above `dir` keep other users from replacing it: each
// (after resolving links) must belong to root or this process's effective
// uid, and be writable by no one else unless it is sticky (as /tmp).
// Otherwise another user could rename `dir` away and put their own in its
// place between two uses (as OpenSSH's StrictModes checks a home folder).
// FailedPrecondition naming the folder above and what is wrong with it.
absl::Status CheckParentsSafe(const std::string& dir);

// Creates the file `path` for writing (mode `mode`, close-on-exec) and
// returns its descriptor. Never opens an existing file or follows a link
// (O_EXCL|O_NOFOLLOW): something already there is FailedPrecondition
// naming the path; other failures carry the errno's message.
absl::StatusOr<int> CreateNewFile(const std::string& path, mode_t mode);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_FILES_H_
