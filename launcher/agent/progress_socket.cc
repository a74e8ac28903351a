#include "launcher/agent/progress_socket.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace elastrun::launcher {

absl::StatusOr<std::unique_ptr<ProgressSocket>> ProgressSocket::Bind(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat(
        "agent socket path '", path, "' is longer than ", sizeof addr.sun_path - 1,
        " bytes; use a shorter --log-dir"));
  }
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.data(), path.size());
  unlink(path.c_str());  // a socket left by an earlier run
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      chmod(path.c_str(), 0600) != 0) {
    auto status = absl::InternalError(
        absl::StrCat("agent socket ", path, ": ", std::strerror(errno)));
    if (fd >= 0) close(fd);
    return status;
  }
  return std::unique_ptr<ProgressSocket>(new ProgressSocket(fd, path));
}

ProgressSocket::~ProgressSocket() {
  close(fd_);
  unlink(path_.c_str());
}

void ProgressSocket::Read(const OnProgress& on_progress, const OnBarrier& on_barrier) {
  char buf[kMaxProgressBytes + 1];
  for (;;) {
    sockaddr_un from{};
    socklen_t from_len = sizeof from;
    ssize_t n = recvfrom(fd_, buf, sizeof buf, MSG_DONTWAIT,
                         reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const absl::string_view datagram(buf, static_cast<size_t>(n));
    // Malformed datagrams are dropped: the socket is owner-only, and a bad
    // one must never disturb the workers.
    if (IsBarrierDatagram(datagram)) {
      auto arrival = DecodeBarrier(datagram);
      if (!arrival.ok() || from_len <= sizeof(sa_family_t)) continue;  // nowhere to answer
      auto reply = [fd = fd_, from, from_len](const absl::Status& st) {
        const std::string answer =
            st.ok() ? "ok" : absl::StrCat("error ", st.message()).substr(0, 1000);
        (void)sendto(fd, answer.data(), answer.size(), MSG_DONTWAIT,
                     reinterpret_cast<const sockaddr*>(&from), from_len);
      };
      if (on_barrier) {
        on_barrier(*arrival, reply);
      } else {
        reply(absl::UnimplementedError("this launcher relays no barriers"));
      }
      continue;
    }
    auto report = DecodeProgress(datagram);
    if (report.ok() && on_progress) on_progress(*report);
  }
}

}  // namespace elastrun::launcher
