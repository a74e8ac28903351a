// Names of the temporary files a writer makes beside the file it replaces
// atomically (a checkpoint, metrics.csv, a hard link put in place by
// rename), and the removal of those a dead writer left behind.
//
// A temporary is "<file>.<kind>.<host>-<pid>-<random>": kind is "tmp" or
// "link"; host is this host's name (characters outside [A-Za-z0-9_-] made
// '_', at most 32) and "~" and 8 hex digits of a hash of the boot id and
// the pid namespace, so that two machines, or two containers with one
// host name, never share it; pid is the writer's; random is 16 hex digits.
// Nodes that share an output folder therefore never collide, and a node
// can tell its own dead writers' files from another node's.
//
// Thread-safe; plain functions on the file system.
#ifndef ELASTRUN_TRAINER_TEMP_FILES_H_
#define ELASTRUN_TRAINER_TEMP_FILES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace elastrun::trainer {

// This host's part of a temporary's name (see above).
const std::string& HostToken();

// A fresh temporary name for `path`: "<path>.<kind>.<HostToken>-<pid>-<random>".
std::string TemporaryName(const std::string& path, absl::string_view kind);

// Removes the temporaries in `dir` (not below it) whose writer is gone:
// this host's whose process no longer exists at once; any other (another
// host's, or an older build's "<file>.tmp.<pid>.<n>") once it is older than
// `max_age`, since its writer cannot be asked. Returns the removed paths
// with their sizes, as "PATH (N bytes)". A missing folder is nothing to do.
std::vector<std::string> RemoveStaleTemporaries(const std::string& dir,
                                                absl::Duration max_age = absl::Hours(1));

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_TEMP_FILES_H_
