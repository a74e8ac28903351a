// SpeaksTls (common/tls.h): a TLS handshake to an address, to tell a
// plaintext client that its service wants TLS. gRPC's own message for that
// case names neither TLS nor the fix ("Socket closed").
//
// OpenSSL works on memory buffers and this file moves the bytes with
// send(MSG_NOSIGNAL)/recv under poll: a service that hangs up mid-way
// raises no SIGPIPE in the caller, and every wait has the deadline.
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/time/clock.h"
#include "common/strings.h"
#include "common/tls.h"

namespace elastrun::tls {
namespace {

// Milliseconds left until `deadline` for poll(), at least 0.
int MillisLeft(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits for `events` on fd; false past the deadline or on an error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  for (;;) {
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, MillisLeft(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// A connected non-blocking TCP socket to host:port, or -1.
int Connect(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return -1;
  absl::Cleanup free_res = [res] { freeaddrinfo(res); };
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    int err = errno;
    if (err == EINPROGRESS && WaitFor(fd, POLLOUT, deadline)) {
      socklen_t len = sizeof err;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
    }
    close(fd);
  }
  return -1;
}

// Sends what OpenSSL wrote into `out`. False when the peer is gone.
bool Flush(int fd, BIO* out, absl::Time deadline) {
  char buf[4096];
  int n;
  while ((n = BIO_read(out, buf, sizeof buf)) > 0) {
    for (int sent = 0; sent < n;) {
      const ssize_t w = send(fd, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
      if (w > 0) {
        sent += static_cast<int>(w);
      } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!WaitFor(fd, POLLOUT, deadline)) return false;
      } else {
        return false;
      }
    }
  }
  return true;
}

// Moves what the peer sent into `in`. False at its end, an error or the
// deadline.
bool Receive(int fd, BIO* in, absl::Time deadline) {
  if (!WaitFor(fd, POLLIN, deadline)) return false;
  char buf[4096];
  const ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n <= 0) return false;
  BIO_write(in, buf, static_cast<int>(n));
  return true;
}

}  // namespace

bool SpeaksTls(absl::string_view address, absl::Duration timeout) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, "address", &host, &port).ok()) return false;
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = Connect(host, port, deadline);
  if (fd < 0) return false;
  absl::Cleanup close_fd = [fd] { close(fd); };

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  if (ctx == nullptr) return false;
  // Only whether the peer speaks TLS matters here, not who it is.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
  if (ssl == nullptr) return false;
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);  // ssl owns both now
  SSL_set_connect_state(ssl.get());
  bool answered = false;
  for (;;) {
    const int r = SSL_do_handshake(ssl.get());
    const int err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl.get(), r);
    if (!Flush(fd, out, deadline)) break;
    if (err != SSL_ERROR_WANT_READ) {
      // Done, or refused by the peer (e.g. it wants a client certificate):
      // either way it answered in TLS if its certificate came.
      answered = r == 1 || SSL_get0_peer_certificate(ssl.get()) != nullptr;
      break;
    }
    if (!Receive(fd, in, deadline)) {
      answered = SSL_get0_peer_certificate(ssl.get()) != nullptr;
      break;
    }
  }
  ERR_clear_error();
  return answered;
}

}  // namespace elastrun::tls
