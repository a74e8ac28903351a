#include "launcher/daemon/cred_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "glog/logging.h"

namespace elastrun::launcher {
namespace {

constexpr size_t kMaxAnswer = 1024;

absl::StatusOr<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("credential socket path \"", path,
                                                   "\" is empty or longer than ",
                                                   sizeof addr.sun_path - 1, " bytes"));
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Connects a new stream socket to `addr`; the fd, or -errno.
int Connect(const sockaddr_un& addr) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

// Makes room at `path`: a stale socket (nobody answers) is removed; a live
// one or anything else stays and is an error.
absl::Status ClearPath(const std::string& path, const sockaddr_un& addr) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("credential socket ", path,
                     " exists and is not a socket; remove it or give "
                     "--cred-socket another path"));
  }
  if (int fd = Connect(addr); fd >= 0) {
    close(fd);
    return absl::AlreadyExistsError(
        absl::StrCat("another elastrund serves credentials at ", path,
                     "; give --cred-socket another path"));
  }
  unlink(path.c_str());
  return absl::OkStatus();
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string DefaultCredSocket(const auth::EnvLookup& env, uid_t euid) {
  if (euid == 0) return "/run/elastrund/cred.sock";
  std::optional<std::string> runtime = env ? env("XDG_RUNTIME_DIR") : std::nullopt;
  if (!runtime || runtime->empty()) return "";
  return *runtime + "/elastrund-cred.sock";
}

absl::StatusOr<std::unique_ptr<CredSocket>> CredSocket::Create(
    CredSocketOptions options) {
  if (options.token.empty()) {
    return absl::InvalidArgumentError("the credential socket needs the cluster token");
  }
  absl::StatusOr<sockaddr_un> addr = Address(options.path);
  if (!addr.ok()) return addr.status();
  const std::string dir = Dirname(options.path);
  if (absl::Status st = MakeDirs(dir); !st.ok()) return st;
  // Its folder and those above: no other user may swap the socket for one
  // of theirs (answering the node's CLIs).
  if (absl::Status st = CheckParentsSafe(options.path); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("credential socket ", options.path, ": ", st.message()));
  }
  if (absl::Status st = ClearPath(options.path, *addr); !st.ok()) return st;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  // Every local user may connect: the kernel's peer credentials, not the
  // socket's mode, decide what each one gets.
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0 ||
      chmod(options.path.c_str(), 0666) != 0 || listen(fd, 64) != 0) {
    const int e = errno;
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot serve credentials at ", options.path, ": ", strerror(e)));
  }
  int stop[2];
  if (pipe2(stop, O_CLOEXEC) != 0) {
    close(fd);
    unlink(options.path.c_str());
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  return std::unique_ptr<CredSocket>(new CredSocket(std::move(options), fd, stop));
}

CredSocket::CredSocket(CredSocketOptions options, int listen_fd, int stop_fd[2])
    : options_(std::move(options)),
      listen_fd_(listen_fd),
      stop_read_(stop_fd[0]),
      stop_write_(stop_fd[1]),
      spare_fd_(open("/dev/null", O_RDONLY | O_CLOEXEC)) {
  thread_ = std::thread([this] { Serve(); });
}

CredSocket::~CredSocket() {
  close(stop_write_);  // the thread sees POLLHUP
  thread_.join();
  close(stop_read_);
  close(listen_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
  unlink(options_.path.c_str());
}

void CredSocket::Serve() {
  for (;;) {
    pollfd fds[2] = {{stop_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "credential socket " << options_.path
                 << ": poll: " << strerror(errno);
      return;
    }
    if (fds[0].revents != 0) return;
    const int fd = options_.accept_for_test
                       ? options_.accept_for_test(listen_fd_)
                       : accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors the caller stays queued and poll stays
      // readable: shed it rather than spin.
      if (errno == EMFILE || errno == ENFILE) Shed();
      continue;  // else EAGAIN (another wake-up), or the caller left
    }
    Answer(fd);
    close(fd);
  }
}

void CredSocket::Shed() {
  LOG_EVERY_N(WARNING, 1000) << "credential socket " << options_.path
                               << ": out of file descriptors; callers are refused";
  if (spare_fd_ >= 0) close(spare_fd_);
  spare_fd_ = -1;
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    constexpr char kLine[] = "error: elastrund is out of file descriptors; try again\n";
    if (send(fd, kLine, sizeof kLine - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
      VLOG(1) << "credential socket: send: " << strerror(errno);
    }
    close(fd);
  } else {
    // Not even the spare's slot: wait a little for descriptors to free
    // (or a stop) instead of spinning.
    pollfd stop{stop_read_, POLLIN, 0};
    poll(&stop, 1, 100);
  }
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void CredSocket::Answer(int fd) {
  ucred peer{};
  socklen_t len = sizeof peer;
  std::string answer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    answer =
        absl::StrCat("error: cannot read the caller's credentials: ", strerror(errno));
  } else {
    auth::Identity who{peer.uid, peer.gid, auth::UserName(peer.uid)};
    absl::StatusOr<std::string> cred =
        auth::SignCredential(options_.token, who, options_.clock->Now() + options_.life);
    answer = cred.ok() ? *cred : absl::StrCat("error: ", cred.status().message());
  }
  answer += "\n";
  // A short line into a fresh socket's buffer: it does not block; a caller
  // that went away costs an EPIPE, not a signal.
  if (send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    VLOG(1) << "credential socket: send: " << strerror(errno);
  }
}

absl::StatusOr<std::string> FetchCredential(const std::string& path,
                                            absl::Duration timeout) {
  absl::StatusOr<sockaddr_un> addr = Address(path);
  if (!addr.ok()) return addr.status();
  const int fd = Connect(*addr);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("no daemon credential socket at ", path, ": ", strerror(-fd)));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string text;
  char buf[256];
  absl::Status st;
  while (text.size() < kMaxAnswer && !absl::StrContains(text, '\n')) {
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p = {fd, POLLIN, 0};
    if (ms <= 0 || poll(&p, 1, ms) == 0) {
      st = absl::DeadlineExceededError(absl::StrCat("the daemon at ", path,
                                                    " sent no credential within ",
                                                    absl::FormatDuration(timeout)));
      break;
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!st.ok()) return st;
  const std::string first = text.substr(0, text.find('\n'));
  absl::string_view line = first;
  if (absl::ConsumePrefix(&line, "error: ")) {
    return absl::FailedPreconditionError(
        absl::StrCat("the daemon at ", path, " gave no credential: ", line));
  }
  if (!absl::StartsWith(line, "v1:")) {
    return absl::UnavailableError(
        absl::StrCat("no credential from the daemon at ", path));
  }
  return std::string(line);
}

}  // namespace elastrun::launcher
