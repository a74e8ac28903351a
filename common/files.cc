#include "common/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace elastrun {

absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string partial = dir.substr(0, i);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create folder ", partial, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

namespace {

// Why the open folder `fd` (shown as `dir`) must not hold private files.
absl::Status CheckPrivateDir(int fd, const std::string& dir) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat folder ", dir, ": ", strerror(errno)));
  }
  if (st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "folder %s belongs to uid %d, not to this process (uid %d); refusing to use it "
        "(remove it, or give a folder of this user)",
        dir, st.st_uid, geteuid()));
  }
  if ((st.st_mode & 022) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "folder %s has mode %04o: others may write to it; refusing to use it "
        "(chmod go-w %s, or give another folder)",
        dir, st.st_mode & 07777, dir));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MakePrivateDir(const std::string& dir, mode_t mode, bool must_be_new) {
  if (mkdir(dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create folder ", dir, ": ", strerror(errno)));
    }
    if (must_be_new) {
      return absl::FailedPreconditionError(absl::StrCat(
          "folder ", dir, " exists already; refusing to reuse it (remove it)"));
    }
  }
  // Checked through a descriptor: what is checked is what gets the mode.
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat st;
    if (lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "folder ", dir, " is a symlink; refusing to follow it (remove it)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open folder ", dir, ": ", strerror(err)));
  }
  absl::Status st = CheckPrivateDir(fd, dir);
  if (st.ok() && fchmod(fd, mode) != 0) {
    st = absl::FailedPreconditionError(
        absl::StrFormat("cannot chmod %04o %s: %s", mode, dir, strerror(errno)));
  }
  close(fd);
  return st;
}

absl::Status CheckParentsSafe(const std::string& dir) {
  const size_t slash = dir.find_last_of('/');
  const std::string parent =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
  // The links on the way as written: whoever owns one may re-point it
  // later, wherever it points now (the walk below checks only where).
  std::string walked;
  for (absl::string_view part : absl::StrSplit(parent, '/', absl::SkipEmpty())) {
    walked = walked.empty() && parent[0] != '/' ? std::string(part)
                                                : absl::StrCat(walked, "/", part);
    struct stat st;
    if (lstat(walked.c_str(), &st) != 0) break;  // said below, once resolved
    if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != geteuid()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "folder %s is reached through the link %s, which belongs to uid %d: that user "
          "could re-point it; refusing to use it (give the folder's real path)",
          dir, walked, st.st_uid));
    }
  }
  char resolved[PATH_MAX];
  if (realpath(parent.c_str(), resolved) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot resolve folder ", parent, ": ", strerror(errno)));
  }
  std::string above = resolved;
  for (;;) {
    struct stat st;
    if (stat(above.c_str(), &st) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot stat folder ", above, ": ", strerror(errno)));
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "folder %s is inside %s, which belongs to uid %d: that user could replace "
          "it; refusing to use it (give a folder under one of root's or this user's)",
          dir, above, st.st_uid));
    }
    if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "folder %s is inside %s, which has mode %04o: other users could replace it; "
          "refusing to use it (chmod go-w %s, or give another folder)",
          dir, above, st.st_mode & 07777, above));
    }
    if (above == "/") return absl::OkStatus();
    const size_t up = above.find_last_of('/');
    above = up == 0 ? "/" : above.substr(0, up);
  }
}

absl::StatusOr<int> CreateNewFile(const std::string& path, mode_t mode) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd >= 0) return fd;
  if (errno == EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path,
                     ": something is there already (a file or a link); "
                     "refusing to write through it"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot create ", path, ": ", strerror(errno)));
}

}  // namespace elastrun
