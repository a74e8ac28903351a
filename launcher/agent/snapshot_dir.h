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
// Whoever uses a folder holds an exclusive lock (flock) on it for as long as
// it does (HeldSnapshotDir): the lock keeps two launchers out of one folder,
// and tells the living from the dead. The kernel drops the lock when its
// holder dies, however it dies (SIGKILL, a lost machine), so a folder that
// nobody holds is a dead owner's and RemoveLeftoverSnapshotDirs may take it:
// under the lock, it is renamed to a hidden trash name (".dead-<inode>") in
// one step and then removed. A holder checks after locking that the path
// still names the folder it locked, and starts again when a cleaner moved it
// away in between; a trash folder whose remover was killed midway is free
// again, and the next cleaner removes it.
//
// Thread-compatible: plain functions on the file system, and a class whose
// instances are each used by one thread at a time.
#ifndef ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_
#define ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
// [A-Za-z0-9._-], and a leading '.', become '_', and a name that changed (or
// was shortened to 100 characters, or is empty) gets "-" and a hash of the
// id, so that distinct ids get distinct names. Never empty, never contains
// '/', never starts with '.' (hidden names are elastrun's own).
std::string SnapshotFolderName(absl::string_view id);

// <base>/elastrun-<uid>: the folder of this user's snapshot folders.
std::string SnapshotUserRoot(const std::string& base);
// The same for user `uid`.
std::string SnapshotUserRoot(const std::string& base, uid_t uid);

// A snapshot folder this process holds: made or adopted, and locked for as
// long as the object lives (the lock's descriptor is close-on-exec, so
// workers never hold it). Destroying it releases the lock and leaves the
// folder (a restart of the same run may adopt it); Remove() removes it.
class HeldSnapshotDir {
 public:
  // Creates (or adopts, when it is already a real folder of ours with mode
  // 0700) <base>/elastrun-<uid>/<name> and locks it. `name` must be a single
  // path component (see SnapshotFolderName). Errors name the path:
  // InvalidArgument for a bad `name`; FailedPrecondition when a level is a
  // symlink, not a folder, owned by another user, or open to group/others,
  // and "in use by another launcher" when another open descriptor holds the
  // lock (another process, or another HeldSnapshotDir here); Aborted when
  // cleaners kept moving the folder away while this tried to take it; the
  // errno's status (e.g. NotFound for a missing base) when mkdir, open or
  // flock fails.
  static absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> Create(const std::string& base,
                                                                 const std::string& name);
  // The same for another user (a root elastrund running the job of `uid`):
  // <base>/elastrun-<uid>/<name>, both levels owned by uid:gid (chowned when
  // made here), mode 0700; a level owned by anyone but `uid` is refused.
  static absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> Create(const std::string& base,
                                                                 const std::string& name,
                                                                 uid_t uid, gid_t gid);
  ~HeldSnapshotDir();  // releases the lock; the folder stays
  HeldSnapshotDir(const HeldSnapshotDir&) = delete;
  HeldSnapshotDir& operator=(const HeldSnapshotDir&) = delete;

  const std::string& path() const { return path_; }

  // Removes the folder and everything in it (RemoveSnapshotDir) while
  // still holding it, then releases the lock, even when the removal failed
  // (the error names what is left); a second call does nothing.
  absl::Status Remove();

 private:
  HeldSnapshotDir(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  int fd_;  // holds the lock; -1 once released
};

// The step that HeldSnapshotDir and the cleaner share: takes the lock of the
// open folder `fd` (LOCK_EX, without waiting) and checks that `name` under
// the open folder `dir_fd` still names it. True: `fd` holds the lock on the
// folder at `name`. False: a cleaner moved the folder away (before or after
// the lock was taken); the caller closes `fd`, which drops any lock, and
// looks again. FailedPrecondition "in use by another launcher" naming
// `path` (the folder's path, for messages) when another open descriptor
// holds the lock on the folder still at `name`; the errno's status when
// flock or stat fails.
absl::StatusOr<bool> LockSnapshotDirAt(int dir_fd, const std::string& name,
                                       const std::string& path, int fd);

// Removes the folder `path` (HeldSnapshotDir::path()) and
// everything in it, without following symlinks (a symlink inside is
// removed, not its target). OK when it does not exist. Errors name the
// path; a symlink or non-folder at `path` itself is refused
// (FailedPrecondition) and left in place.
absl::Status RemoveSnapshotDir(const std::string& path);

// A folder RemoveLeftoverSnapshotDirs removed.
struct RemovedSnapshotDir {
  std::string path;    // where it was (a trash folder's own path for one)
  uint64_t bytes = 0;  // the memory its files held
};

// Removes the folders directly under SnapshotUserRoot(base) that nobody
// holds (see HeldSnapshotDir), that are real folders owned by this user,
// and whose name `is_leftover` accepts (trash folders, ".dead-*", need no
// acceptance); a held folder and anything else (files, symlinks, other
// users' folders) is left alone. Returns what it removed; OK and empty when
// the root does not exist. An error (the root is unsafe, or a removal
// failed) names the path.
absl::StatusOr<std::vector<RemovedSnapshotDir>> RemoveLeftoverSnapshotDirs(
    const std::string& base, const std::function<bool(absl::string_view name)>& is_leftover);
// The same under SnapshotUserRoot(base, uid), for the folders of user
// `uid` (a root elastrund cleans up after the jobs it ran as their owners):
// only a root and folders owned by `uid`.
absl::StatusOr<std::vector<RemovedSnapshotDir>> RemoveLeftoverSnapshotDirs(
    const std::string& base, uid_t uid,
    const std::function<bool(absl::string_view name)>& is_leftover);

// The users with a snapshot root under `base`: each N of a real folder
// <base>/elastrun-N owned by uid N. Empty when `base` cannot be listed.
std::vector<uid_t> SnapshotUsers(const std::string& base);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_SNAPSHOT_DIR_H_
