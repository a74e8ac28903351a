#include "tests/testing/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace elastrun::testing {

absl::StatusOr<HttpAnswer> HttpGet(const std::string& host_port, const std::string& path,
                                   absl::Duration timeout) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("not HOST:PORT: ", host_port));
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &a.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", host_port));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(std::strerror(errno));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return absl::UnavailableError(absl::StrCat(host_port, ": ", std::strerror(errno)));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host_port,
                                           "\r\nConnection: close\r\n\r\n");
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return absl::UnavailableError(absl::StrCat(host_port, ": send failed"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string text;
  char buf[8192];
  while (true) {
    pollfd p = {fd, POLLIN, 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || ::poll(&p, 1, static_cast<int>(ms)) <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(host_port, path, ": no answer"));
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) return absl::UnavailableError(std::strerror(errno));
    if (n == 0) break;
    text.append(buf, n);
  }
  const size_t end = text.find("\r\n\r\n");
  HttpAnswer answer;
  if (end == std::string::npos || text.size() < 12 ||
      !absl::SimpleAtoi(text.substr(9, 3), &answer.status)) {
    return absl::UnavailableError(absl::StrCat(host_port, path, ": malformed answer"));
  }
  answer.head = text.substr(0, end);
  answer.body = text.substr(end + 4);
  // Chunked bodies (Go's servers, Prometheus) are joined here.
  if (answer.head.find("Transfer-Encoding: chunked") != std::string::npos) {
    std::string joined;
    size_t pos = 0;
    while (pos < answer.body.size()) {
      const size_t eol = answer.body.find("\r\n", pos);
      if (eol == std::string::npos) break;
      size_t len = 0;
      if (!absl::SimpleHexAtoi(answer.body.substr(pos, eol - pos), &len) || len == 0) break;
      joined += answer.body.substr(eol + 2, len);
      pos = eol + 2 + len + 2;
    }
    answer.body = joined;
  }
  return answer;
}

}  // namespace elastrun::testing
