#include "launcher/daemon/route.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_format.h"

namespace elastrun::launcher {

absl::StatusOr<std::string> RouteAddress(const std::string& host, int port,
                                         const std::string& what) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot resolve \"%s\": %s", what, host, gai_strerror(rc)));
  }
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[NI_MAXHOST] = {0};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr,
                    0, NI_NUMERICHOST) == 0) {
      out = text;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (out.empty()) {
    return absl::UnavailableError(absl::StrFormat("%s: no route to %s", what, host));
  }
  return out;
}

}  // namespace elastrun::launcher
