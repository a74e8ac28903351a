// The agent-owned folder that holds a job's in-memory training snapshots on
// this node (tier 1 of DESIGN.md's "where training state lives"): workers
// write `<folder>/rank<N>.slot0/1` (worker/snapshot_area.h) and a restarted
// worker reads them back, so the folder must outlive every worker and belong
// to the launcher (`elastrun run`) or the node daemon (elastrund), which
// removes it when the job ends here.
//
// Layout: <base>/elastrun-<uid>/<name>/, both levels mode 0700 and owned by
// this user. The base is usually /dev/shm, a world-writable sticky folder,
// so every level is created with mkdir and opened with O_NOFOLLOW: a symlink,
// a non-folder, a folder of another user or one others may write to is
// refused, never followed or written through.
//
// Thread-compatible: plain functions on the file system.
#ifndef ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_
#define ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::launcher {

// Overrides the base folder (tests point it into their temp folder).
inline constexpr char kSnapshotBaseEnv[] = "ELASTRUN_SNAPSHOT_BASE";

// Where snapshot folders go: $ELASTRUN_SNAPSHOT_BASE when set and not empty;
// else /dev/shm when `writable_tmpfs("/dev/shm")`; else $XDG_RUNTIME_DIR;
// else $TMPDIR; else /tmp. `env` returns a variable's value, nullopt when
// unset.
std::string SnapshotBase(
    const std::function<std::optional<std::string>(const std::string&)>& env,
    const std::function<bool(const std::string&)>& writable_tmpfs);
// The same from the process environment and the real /dev/shm.
std::string DefaultSnapshotBase();
// Whether `dir` is a tmpfs (memory, not disk) this process may create in.
bool IsWritableTmpfs(const std::string& dir);

// A folder name made from a job or run id: characters other than
// [A-Za-z0-9._-] become '_', and a name that changed (or was shortened to
// 100 characters, or is made of dots only) gets "-" and a hash of the id, so
// that distinct ids get distinct names. Never empty, never contains '/',
// never "." or "..".
std::string SnapshotFolderName(absl::string_view id);

// <base>/elastrun-<uid>: the folder of this user's snapshot folders.
std::string SnapshotUserRoot(const std::string& base);
// The same for user `uid`.
std::string SnapshotUserRoot(const std::string& base, uid_t uid);

// Creates (or adopts, when it is already a real folder of ours with mode
// 0700) <base>/elastrun-<uid>/<name> and returns its path. `name` must be a
// single path component (see SnapshotFolderName). Errors name the path:
// InvalidArgument for a bad `name`; FailedPrecondition when a level is a
// symlink, not a folder, owned by another user, or open to group/others;
// the errno's status (e.g. NotFound for a missing base) when mkdir or open
// fails.
absl::StatusOr<std::string> CreateSnapshotDir(const std::string& base,
                                              const std::string& name);
// The same for another user (a root elastrund running the job of `uid`):
// <base>/elastrun-<uid>/<name>, both levels owned by uid:gid (chowned when
// made here), mode 0700; a level owned by anyone but `uid` is refused.
absl::StatusOr<std::string> CreateSnapshotDir(const std::string& base,
                                              const std::string& name, uid_t uid,
                                              gid_t gid);

// Takes an exclusive lock (flock) on the folder `path` for as long as the
// returned descriptor stays open (close it to release; it is close-on-exec,
// so workers never hold it), so that two launchers never share a folder:
// FailedPrecondition naming the path when another open descriptor holds the
// lock (another process, or an earlier call); the errno's status when the
// folder cannot be opened (a symlink is not followed).
absl::StatusOr<int> LockSnapshotDir(const std::string& path);

// Removes the folder `path` (as returned by CreateSnapshotDir) and
// everything in it, without following symlinks (a symlink inside is
// removed, not its target). OK when it does not exist. Errors name the
// path; a symlink or non-folder at `path` itself is refused
// (FailedPrecondition) and left in place.
absl::Status RemoveSnapshotDir(const std::string& path);

// Removes the folders directly under SnapshotUserRoot(base) whose name
// `is_leftover` accepts, and that are real folders owned by this user;
// anything else (files, symlinks, other users' folders) is left alone.
// Returns the paths removed; OK and empty when the root does not exist.
// An error (the root is unsafe, or a removal failed) names the path.
absl::StatusOr<std::vector<std::string>> RemoveLeftoverSnapshotDirs(
    const std::string& base, const std::function<bool(absl::string_view name)>& is_leftover);
// The same under SnapshotUserRoot(base, uid), for the folders of user
// `uid` (a root elastrund cleans up after the jobs it ran as their owners):
// only a root and folders owned by `uid`.
absl::StatusOr<std::vector<std::string>> RemoveLeftoverSnapshotDirs(
    const std::string& base, uid_t uid,
    const std::function<bool(absl::string_view name)>& is_leftover);

// The users with a snapshot root under `base`: each N of a real folder
// <base>/elastrun-N owned by uid N. Empty when `base` cannot be listed.
std::vector<uid_t> SnapshotUsers(const std::string& base);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_
