#include "launcher/agent/snapshot_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace elastrun::launcher {
namespace {

constexpr size_t kMaxNameChars = 100;
// Snapshot folders hold flat files; deeper nesting is not ours to follow.
constexpr int kMaxDepth = 8;

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
// following a symlink. Takes ownership of `fd`.
absl::Status EmptyDir(int fd, const std::string& path, int depth) {
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
    result.Update(EmptyDir(sub, child, depth + 1));
    if (unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0) {
      result.Update(Errno(errno, absl::StrCat("cannot remove ", child)));
    }
  }
  return result;
}

// Removes the folder `name` under `parent_fd` and its contents.
absl::Status RemoveAt(int parent_fd, const std::string& name, const std::string& path) {
  const int fd =
      openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return NotAFolder(parent_fd, name, path, errno);
  }
  absl::Status emptied = EmptyDir(fd, path, 0);
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
  bool only_dots = true;
  for (char c : id.substr(0, kMaxNameChars)) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                    c == '_' || c == '-';
    name.push_back(ok ? c : '_');
    only_dots = only_dots && c == '.';
  }
  if (name != id || only_dots) absl::StrAppend(&name, "-", absl::Hex(Fnv1a(id), absl::kZeroPad8));
  return name;
}

std::string SnapshotUserRoot(const std::string& base) {
  return SnapshotUserRoot(base, geteuid());
}

std::string SnapshotUserRoot(const std::string& base, uid_t uid) {
  return absl::StrCat(base, "/elastrun-", uid);
}

absl::StatusOr<std::string> CreateSnapshotDir(const std::string& base, const std::string& name) {
  return CreateSnapshotDir(base, name, geteuid(), getegid());
}

absl::StatusOr<std::string> CreateSnapshotDir(const std::string& base,
                                              const std::string& name, uid_t uid,
                                              gid_t gid) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot folder name \"", name, "\" is not a single path component"));
  }
  const std::string root = SnapshotUserRoot(base, uid);
  const auto [parent, leaf] = SplitLast(root);
  const int parent_fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) {
    return Errno(errno, absl::StrCat("cannot open the snapshot base folder ", parent));
  }
  absl::StatusOr<int> root_fd =
      OpenOwnedDir(parent_fd, leaf, root, /*create=*/true, uid, gid);
  close(parent_fd);
  if (!root_fd.ok()) return root_fd.status();
  const std::string path = absl::StrCat(root, "/", name);
  absl::StatusOr<int> fd = OpenOwnedDir(*root_fd, name, path, /*create=*/true, uid, gid);
  close(*root_fd);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return path;
}

absl::StatusOr<int> LockSnapshotDir(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("cannot open snapshot folder ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("snapshot folder ", path, " is in use by another launcher"));
    }
    return Errno(err, absl::StrCat("cannot lock snapshot folder ", path));
  }
  return fd;
}

absl::Status RemoveSnapshotDir(const std::string& path) {
  const auto [parent, leaf] = SplitLast(path);
  const int parent_fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno(errno, absl::StrCat("cannot open ", parent));
  }
  absl::Status st = RemoveAt(parent_fd, leaf, path);
  close(parent_fd);
  return st;
}

absl::StatusOr<std::vector<std::string>> RemoveLeftoverSnapshotDirs(
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

absl::StatusOr<std::vector<std::string>> RemoveLeftoverSnapshotDirs(
    const std::string& base, uid_t uid,
    const std::function<bool(absl::string_view name)>& is_leftover) {
  const std::string root = SnapshotUserRoot(base, uid);
  const auto [parent, leaf] = SplitLast(root);
  const int parent_fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) {
    if (errno == ENOENT) return std::vector<std::string>();
    return Errno(errno, absl::StrCat("cannot open the snapshot base folder ", parent));
  }
  absl::StatusOr<int> root_fd =
      OpenOwnedDir(parent_fd, leaf, root, /*create=*/false, uid, /*gid=*/0);
  close(parent_fd);
  if (!root_fd.ok()) {
    if (absl::IsNotFound(root_fd.status())) return std::vector<std::string>();
    return root_fd.status();
  }
  // The names first: removing while readdir walks the folder may skip some.
  std::vector<std::string> names;
  if (DIR* d = fdopendir(dup(*root_fd))) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && is_leftover(name)) names.push_back(name);
    }
    closedir(d);
  }
  std::vector<std::string> removed;
  absl::Status result;
  for (const std::string& name : names) {
    struct stat st;
    if (fstatat(*root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != uid) {
      continue;  // only folders, only the user's
    }
    const std::string path = absl::StrCat(root, "/", name);
    absl::Status st_remove = RemoveAt(*root_fd, name, path);
    if (st_remove.ok()) {
      removed.push_back(path);
    } else {
      result.Update(st_remove);
    }
  }
  close(*root_fd);
  if (!result.ok()) return result;
  return removed;
}

}  // namespace elastrun::launcher
