#include "launcher/agent/snapshot_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace elastrun::launcher {
namespace {

constexpr size_t kMaxNameChars = 100;
// Snapshot folders hold flat files; deeper nesting is not ours to follow.
constexpr int kMaxDepth = 8;
// A dead run's folder is renamed to this prefix and its inode number
// (unique among the folders that exist) before it is removed.
constexpr absl::string_view kTrashPrefix = ".dead-";
// Each time a cleaner moves a folder away under a launcher that is taking
// it, the launcher makes a new one; it gives up after this many.
constexpr int kMaxHoldAttempts = 16;

absl::Status Errno(int err, const std::string& what) {
  return absl::ErrnoToStatus(err, what);
}

// FNV-1a: stable across processes and builds, unlike absl::Hash.
uint32_t Fnv1a(absl::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

// Why the entry `name` of `parent_fd` (shown as `path`) cannot be opened as
// a folder without following a link.
absl::Status NotAFolder(int parent_fd, const std::string& name, const std::string& path,
                        int open_errno) {
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "snapshot folder ", path, " is a symlink; refusing to follow it (remove it)"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("snapshot folder ", path, " exists and is not a folder (remove it)"));
    }
  }
  return Errno(open_errno, absl::StrCat("cannot open snapshot folder ", path));
}

// Opens `name` under `parent_fd` as a folder of user `uid`, first creating
// it (mode 0700, chowned to uid:gid) when `create`. Returns the open
// descriptor.
absl::StatusOr<int> OpenOwnedDir(int parent_fd, const std::string& name,
                                 const std::string& path, bool create, uid_t uid,
                                 gid_t gid) {
  bool created = false;
  if (create) {
    if (mkdirat(parent_fd, name.c_str(), 0700) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      return Errno(errno, absl::StrCat("cannot create snapshot folder ", path));
    }
  }
  const int fd =
      openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NotAFolder(parent_fd, name, path, errno);
  struct stat st;
  absl::Status bad;
  if (fstat(fd, &st) != 0) {
    bad = Errno(errno, absl::StrCat("cannot stat snapshot folder ", path));
  } else if (created && st.st_uid != uid && fchown(fd, uid, gid) != 0) {
    bad =
        Errno(errno, absl::StrCat("cannot give snapshot folder ", path, " to uid ", uid));
  } else if (!created && st.st_uid != uid) {
    bad = absl::FailedPreconditionError(
        absl::StrCat("snapshot folder ", path, " belongs to uid ", st.st_uid,
                     ", not to uid ", uid, "; refusing to use it"));
  } else if (created) {
    // The umask may have taken bits that the owner needs.
    if (fchmod(fd, 0700) != 0) bad = Errno(errno, absl::StrCat("cannot chmod 700 ", path));
  } else if ((st.st_mode & 077) != 0) {
    bad = absl::FailedPreconditionError(absl::StrFormat(
        "snapshot folder %s has mode %04o: others may write to it; refusing to use it "
        "(expected 0700)",
        path, st.st_mode & 07777));
  }
  if (!bad.ok()) {
    close(fd);
    return bad;
  }
  return fd;
}

// Removes everything inside the open folder `fd` (shown as `path`), never
// following a symlink, adding the memory its files held to `*bytes`. Takes
// ownership of `fd`.
absl::Status EmptyDir(int fd, const std::string& path, int depth, uint64_t* bytes) {
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    close(fd);
    return Errno(err, absl::StrCat("cannot list snapshot folder ", path));
  }
  absl::Cleanup close_dir = [d] { closedir(d); };
  absl::Status result;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = absl::StrCat(path, "/", name);
    struct stat st;
    if (fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
      *bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    }
    if (unlinkat(fd, name.c_str(), 0) == 0) continue;
    if (errno != EISDIR && errno != EPERM) {
      result.Update(Errno(errno, absl::StrCat("cannot remove ", child)));
      continue;
    }
    if (depth >= kMaxDepth) {
      result.Update(absl::FailedPreconditionError(
          absl::StrCat("cannot remove ", child, ": folders nested too deep")));
      continue;
    }
    const int sub = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) {
      result.Update(Errno(errno, absl::StrCat("cannot open ", child)));
      continue;
    }
    result.Update(EmptyDir(sub, child, depth + 1, bytes));
    if (unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0) {
      result.Update(Errno(errno, absl::StrCat("cannot remove ", child)));
    }
  }
  return result;
}

// Removes the folder `name` under `parent_fd` and its contents, adding the
// memory they held to `*bytes`.
absl::Status RemoveAt(int parent_fd, const std::string& name, const std::string& path,
                      uint64_t* bytes) {
  const int fd =
      openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return NotAFolder(parent_fd, name, path, errno);
  }
  absl::Status emptied = EmptyDir(fd, path, 0, bytes);
  if (unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    emptied.Update(Errno(errno, absl::StrCat("cannot remove snapshot folder ", path)));
  }
  return emptied;
}

// Splits "dir/name" at its last '/'.
std::pair<std::string, std::string> SplitLast(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// The user root's own name, "elastrun-<uid>".
std::string UserRootName(uid_t uid) { return absl::StrCat("elastrun-", uid); }

absl::Status CheckName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot folder name \"", name, "\" is not a single path component"));
  }
  return absl::OkStatus();
}

// Opens SnapshotUserRoot(base, uid), first creating it when `create`.
absl::StatusOr<int> OpenUserRoot(const std::string& base, uid_t uid, gid_t gid,
                                 bool create) {
  const int base_fd = open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) {
    return Errno(errno, absl::StrCat("cannot open the snapshot base folder ", base));
  }
  absl::StatusOr<int> root_fd = OpenOwnedDir(base_fd, UserRootName(uid),
                                             SnapshotUserRoot(base, uid), create, uid, gid);
  close(base_fd);
  return root_fd;
}

// Whether `name` under `dir_fd` is the folder open as `fd`; `*st` is the
// folder's.
absl::StatusOr<bool> StillNamed(int dir_fd, const std::string& name,
                                const std::string& path, int fd, struct stat* st) {
  if (fstat(fd, st) != 0) {
    return Errno(errno, absl::StrCat("cannot stat snapshot folder ", path));
  }
  struct stat named;
  if (fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return false;
    return Errno(errno, absl::StrCat("cannot stat snapshot folder ", path));
  }
  return named.st_dev == st->st_dev && named.st_ino == st->st_ino;
}

// renameat2(RENAME_NOREPLACE), or a plain rename where the file system
// lacks the flag (the trash name is unique anyway).
int RenameNoReplace(int dir_fd, const std::string& from, const std::string& to) {
  if (renameat2(dir_fd, from.c_str(), dir_fd, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL) return -1;
  return renameat(dir_fd, from.c_str(), dir_fd, to.c_str());
}

// Removes the folder `name` of user `uid` under `root_fd` (shown as
// `root`) if nobody holds it: locked, moved to a trash name, emptied and
// removed. nullopt when it is held, gone, or no longer that user's folder.
absl::StatusOr<std::optional<RemovedSnapshotDir>> RemoveIfDead(int root_fd,
                                                              const std::string& root,
                                                              const std::string& name,
                                                              uid_t uid) {
  const std::string path = absl::StrCat(root, "/", name);
  const int fd =
      openat(root_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return std::nullopt;
    return Errno(errno, absl::StrCat("cannot open snapshot folder ", path));
  }
  // Closed last: the lock is held until the folder is gone.
  absl::Cleanup close_fd = [fd] { close(fd); };
  absl::StatusOr<bool> locked = LockSnapshotDirAt(root_fd, name, path, fd);
  if (absl::IsFailedPrecondition(locked.status())) return std::nullopt;  // held: alive
  if (!locked.ok()) return locked.status();
  if (!*locked) return std::nullopt;  // another cleaner moved it
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno(errno, absl::StrCat("cannot stat ", path));
  if (st.st_uid != uid) return std::nullopt;
  std::string trash = name;
  if (!absl::StartsWith(name, kTrashPrefix)) {
    // One step: from here no launcher finds it under its name.
    trash = absl::StrCat(kTrashPrefix, st.st_ino);
    if (RenameNoReplace(root_fd, name, trash) != 0) {
      return Errno(errno, absl::StrCat("cannot move snapshot folder ", path, " to ", root,
                                       "/", trash, " to remove it"));
    }
  }
  RemovedSnapshotDir removed{path, 0};
  RETURN_IF_ERROR(RemoveAt(root_fd, trash, absl::StrCat(root, "/", trash), &removed.bytes));
  return removed;
}

}  // namespace

std::string SnapshotBase(
    const std::function<std::optional<std::string>(const std::string&)>& env,
    const std::function<bool(const std::string&)>& writable_tmpfs) {
  auto set = [&](const char* name) -> std::optional<std::string> {
    std::optional<std::string> v = env(name);
    if (v && !v->empty()) return v;
    return std::nullopt;
  };
  if (auto v = set(kSnapshotBaseEnv)) return *v;
  if (writable_tmpfs("/dev/shm")) return "/dev/shm";
  if (auto v = set("XDG_RUNTIME_DIR")) return *v;
  if (auto v = set("TMPDIR")) return *v;
  return "/tmp";
}

std::string DefaultSnapshotBase() {
  return SnapshotBase(
      [](const std::string& name) -> std::optional<std::string> {
        const char* v = getenv(name.c_str());
        if (v == nullptr) return std::nullopt;
        return std::string(v);
      },
      IsWritableTmpfs);
}

bool IsWritableTmpfs(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) return false;
  return access(dir.c_str(), W_OK | X_OK) == 0;
}

std::string SnapshotFolderName(absl::string_view id) {
  std::string name;
  for (char c : id.substr(0, kMaxNameChars)) {
    // A leading dot is not kept: hidden names (the trash) are elastrun's own.
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    (c == '.' && !name.empty()) || c == '_' || c == '-';
    name.push_back(ok ? c : '_');
  }
  if (name != id || name.empty()) {
    absl::StrAppend(&name, "-", absl::Hex(Fnv1a(id), absl::kZeroPad8));
  }
  return name;
}

std::string SnapshotUserRoot(const std::string& base) {
  return SnapshotUserRoot(base, geteuid());
}

std::string SnapshotUserRoot(const std::string& base, uid_t uid) {
  return absl::StrCat(base, "/", UserRootName(uid));
}

absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> HeldSnapshotDir::Create(
    const std::string& base, const std::string& name) {
  return Create(base, name, geteuid(), getegid());
}

absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> HeldSnapshotDir::Create(
    const std::string& base, const std::string& name, uid_t uid, gid_t gid) {
  RETURN_IF_ERROR(CheckName(name));
  ASSIGN_OR_RETURN(const int root_fd, OpenUserRoot(base, uid, gid, /*create=*/true));
  absl::Cleanup close_root = [root_fd] { close(root_fd); };
  const std::string path = absl::StrCat(SnapshotUserRoot(base, uid), "/", name);
  for (int attempt = 0; attempt < kMaxHoldAttempts; ++attempt) {
    ASSIGN_OR_RETURN(const int fd,
                     OpenOwnedDir(root_fd, name, path, /*create=*/true, uid, gid));
    absl::StatusOr<bool> locked = LockSnapshotDirAt(root_fd, name, path, fd);
    if (locked.ok() && *locked) {
      return std::unique_ptr<HeldSnapshotDir>(new HeldSnapshotDir(path, fd));
    }
    close(fd);
    if (!locked.ok()) return locked.status();
  }
  return absl::AbortedError(absl::StrCat(
      "snapshot folder ", path, " was removed ", kMaxHoldAttempts,
      " times while this launcher was taking it (as the folder of a run that is gone, "
      "by launchers starting at the same time); start again"));
}

HeldSnapshotDir::~HeldSnapshotDir() {
  if (fd_ >= 0) close(fd_);
}

absl::Status HeldSnapshotDir::Remove() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status removed = RemoveSnapshotDir(path_);
  close(fd_);
  fd_ = -1;
  return removed;
}

absl::StatusOr<bool> LockSnapshotDirAt(int dir_fd, const std::string& name,
                                       const std::string& path, int fd) {
  struct stat st;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      return Errno(errno, absl::StrCat("cannot lock snapshot folder ", path));
    }
    // The holder is alive, or a cleaner that is about to move it away.
    ASSIGN_OR_RETURN(const bool named, StillNamed(dir_fd, name, path, fd, &st));
    if (!named) return false;
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot folder ", path, " is in use by another launcher"));
  }
  // A cleaner may have moved it to the trash between our open and flock.
  return StillNamed(dir_fd, name, path, fd, &st);
}

absl::Status RemoveSnapshotDir(const std::string& path) {
  const auto [parent, leaf] = SplitLast(path);
  // The folder above is the user's (elastrun-<uid>): opened without
  // following a link they may have put in its place, from the base above.
  const auto [base, user_root] = SplitLast(parent);
  const int base_fd = open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno(errno, absl::StrCat("cannot open ", base));
  }
  const int parent_fd =
      openat(base_fd, user_root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int open_errno = errno;
  close(base_fd);
  if (parent_fd < 0) {
    if (open_errno == ENOENT) return absl::OkStatus();
    if (open_errno == ELOOP || open_errno == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot remove ", path, ": ", parent,
                       " is not a folder (a symlink?); refusing to follow it"));
    }
    return Errno(open_errno, absl::StrCat("cannot open ", parent));
  }
  uint64_t bytes = 0;
  absl::Status st = RemoveAt(parent_fd, leaf, path, &bytes);
  close(parent_fd);
  return st;
}

absl::StatusOr<std::vector<RemovedSnapshotDir>> RemoveLeftoverSnapshotDirs(
    const std::string& base, const std::function<bool(absl::string_view name)>& is_leftover) {
  return RemoveLeftoverSnapshotDirs(base, geteuid(), is_leftover);
}

std::vector<uid_t> SnapshotUsers(const std::string& base) {
  std::vector<uid_t> users;
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return users;
  const int fd = dirfd(d);
  while (dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    uint32_t uid = 0;
    if (!absl::ConsumePrefix(&name, "elastrun-") || !absl::SimpleAtoi(name, &uid)) {
      continue;
    }
    struct stat st;
    if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == uid) {
      users.push_back(uid);
    }
  }
  closedir(d);
  return users;
}

absl::StatusOr<std::vector<RemovedSnapshotDir>> RemoveLeftoverSnapshotDirs(
    const std::string& base, uid_t uid,
    const std::function<bool(absl::string_view name)>& is_leftover) {
  absl::StatusOr<int> root_fd = OpenUserRoot(base, uid, /*gid=*/0, /*create=*/false);
  if (absl::IsNotFound(root_fd.status())) return std::vector<RemovedSnapshotDir>();
  if (!root_fd.ok()) return root_fd.status();
  absl::Cleanup close_root = [fd = *root_fd] { close(fd); };
  const std::string root = SnapshotUserRoot(base, uid);
  // The names first: removing while readdir walks the folder may skip some.
  std::vector<std::string> names;
  if (DIR* d = fdopendir(dup(*root_fd))) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (absl::StartsWith(name, kTrashPrefix) || is_leftover(name)) names.push_back(name);
    }
    closedir(d);
  }
  std::vector<RemovedSnapshotDir> removed;
  absl::Status result;
  for (const std::string& name : names) {
    struct stat st;
    if (fstatat(*root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != uid) {
      continue;  // only folders, only the user's
    }
    absl::StatusOr<std::optional<RemovedSnapshotDir>> one =
        RemoveIfDead(*root_fd, root, name, uid);
    if (!one.ok()) {
      result.Update(one.status());
    } else if (one->has_value()) {
      removed.push_back(**std::move(one));
    }
  }
  if (!result.ok()) return result;
  return removed;
}

}  // namespace elastrun::launcher
