#include "common/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace elastrun::metrics {
namespace {

// A request head longer than this is refused: a scrape sends a few hundred
// bytes.
constexpr size_t kMaxHead = 16 * 1024;

std::string Response(absl::string_view status, absl::string_view type,
                     const std::string& body, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                                 "\r\nContent-Length: ", body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (!head_only) out += body;
  return out;
}

struct Conn {
  int fd = -1;
  std::string in;
  std::string out;
  size_t written = 0;
  absl::Time deadline;
};

absl::StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics-listen %s:%d: cannot resolve \"%s\": %s", host, port, host,
        gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrFormat("--metrics-listen %s:%d: cannot listen: %s", host, port, why));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

}  // namespace

std::string HttpAnswer(const std::string& request_head, const Registry& registry) {
  const std::string line = request_head.substr(0, request_head.find("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response("400 Bad Request", "text/plain", "bad request\n", false);
  }
  const bool head = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head) {
    return Response("405 Method Not Allowed", "text/plain", "only GET\n", false);
  }
  // The query string (Prometheus sends none, a browser may) is ignored.
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return Response("404 Not Found", "text/plain", "not found: try /metrics\n", head);
  }
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", registry.Render(),
                  head);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Create(
    MetricsServerOptions options, const Registry* registry) {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(options.listen, "--metrics-listen", &host, &port));
  ASSIGN_OR_RETURN(int fd, Listen(host, port));
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<MetricsServer> s(new MetricsServer(std::move(options), registry, fd, wake));
  s->port_ = BoundPort(fd);
  s->address_ = host.find(':') != std::string::npos
                    ? absl::StrFormat("[%s]:%d", host, s->port_)
                    : absl::StrFormat("%s:%d", host, s->port_);
  MetricsServer* raw = s.get();
  s->thread_ = std::thread([raw] { raw->Loop(); });
  return s;
}

MetricsServer::MetricsServer(MetricsServerOptions options, const Registry* registry,
                             int listen_fd, int wake_fd)
    : options_(std::move(options)),
      registry_(registry),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd) {}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof(one)) < 0) {
    // An eventfd write fails only on overflow, which cannot happen here.
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void MetricsServer::Loop() {
  std::vector<Conn> conns;
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = static_cast<int>(conns.size()) < options_.max_connections;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    absl::Time next = absl::Now() + absl::Seconds(1);
    for (const Conn& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      next = std::min(next, c.deadline);
    }
    const int wait_ms = static_cast<int>(
        std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now()) + 1));
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) break;
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      const short ev = fds[i + 2].revents;
      bool done = now >= c.deadline;
      if (!done && c.out.empty() && (ev & (POLLIN | POLLHUP | POLLERR))) {
        char buf[4096];
        const ssize_t n = ::read(c.fd, buf, sizeof(buf));
        if (n <= 0) {
          done = n == 0 || (errno != EAGAIN && errno != EINTR);
        } else {
          c.in.append(buf, n);
          if (c.in.find("\r\n\r\n") != std::string::npos) {
            c.out = HttpAnswer(c.in, *registry_);
          } else if (c.in.size() > kMaxHead) {
            c.out = Response("431 Request Header Fields Too Large", "text/plain",
                             "request head too large\n", false);
          }
        }
      } else if (!done && !c.out.empty() && (ev & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n =
            ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
        if (n < 0) {
          done = errno != EAGAIN && errno != EINTR;
        } else {
          c.written += n;
          done = c.written == c.out.size();
        }
      }
      if (done) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const Conn& c) { return c.fd < 0; }),
                conns.end());
    if (accepting && (fds[1].revents & POLLIN)) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) conns.push_back({fd, "", "", 0, now + options_.idle_timeout});
    }
  }
  for (Conn& c : conns) ::close(c.fd);
}

}  // namespace elastrun::metrics
