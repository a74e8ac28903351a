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
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/strings.h"
#include "common/tls.h"

namespace elastrun::tls {
namespace {

// How long CheckHandshake listens after a handshake for the alert by which
// a TLS 1.3 service refuses a client certificate.
constexpr absl::Duration kSettleTime = absl::Milliseconds(500);

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

using CtxPtr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;
using SslPtr = std::unique_ptr<SSL, decltype(&SSL_free)>;

// One TLS connection driven over memory BIOs: OpenSSL never touches the
// socket itself.
class Probe {
 public:
  Probe(int fd, SSL_CTX* ctx, absl::Time deadline)
      : fd_(fd), ssl_(SSL_new(ctx), &SSL_free), deadline_(deadline) {
    if (ssl_ == nullptr) return;
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_.get(), in_, out_);  // ssl_ owns both now
    SSL_set_connect_state(ssl_.get());
  }
  SSL* ssl() { return ssl_.get(); }

  enum Outcome { kDone, kFailed, kClosed };
  // Runs the handshake: kDone, kFailed (OpenSSL's error queue says why), or
  // kClosed (the peer hung up or went silent past the deadline).
  Outcome Handshake() { return Drive([this] { return SSL_do_handshake(ssl_.get()); }); }
  // After the handshake: reads until application data or `until`. kDone
  // when data came or nothing happened, kFailed on an alert (a TLS 1.3
  // service refuses a client certificate only after the handshake), kClosed
  // when the peer hung up.
  Outcome Settle(absl::Time until) {
    deadline_ = std::min(deadline_, until);
    char byte;
    const Outcome o = Drive([this, &byte] { return SSL_read(ssl_.get(), &byte, 1); });
    return o == kClosed && !hung_up_ ? kDone : o;
  }

 private:
  template <typename Step>
  Outcome Drive(Step step) {
    if (ssl_ == nullptr) return kFailed;
    for (;;) {
      const int r = step();
      const int err = r > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_.get(), r);
      if (!Flush(fd_, out_, deadline_)) return Closed(true);
      if (err == SSL_ERROR_NONE) return kDone;
      if (err == SSL_ERROR_ZERO_RETURN) return Closed(true);
      if (err != SSL_ERROR_WANT_READ) return kFailed;
      if (!WaitFor(fd_, POLLIN, deadline_)) return Closed(false);
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return Closed(true);
      BIO_write(in_, buf, static_cast<int>(n));
    }
  }
  Outcome Closed(bool hung_up) {
    hung_up_ = hung_up;
    return kClosed;
  }

  const int fd_;
  SslPtr ssl_;
  absl::Time deadline_;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
  bool hung_up_ = false;
};

// OpenSSL's reason for the newest error ("certificate verify failed").
std::string LastSslError() {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e == 0 ? nullptr : ERR_reason_error_string(e);
  return reason == nullptr ? "no reason given" : reason;
}

// A client context that checks the service as gRPC does: its chain against
// files.ca, its name (files.server_name, else the address's host); with the
// client certificate when given.
absl::StatusOr<CtxPtr> ClientContext(const TlsFiles& files, const std::string& host) {
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx.get(), files.ca.c_str(), nullptr) != 1 ||
      (!files.cert.empty() &&
       (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), files.key.c_str(), SSL_FILETYPE_PEM) != 1))) {
    return absl::InvalidArgumentError(absl::StrCat("TLS files: ", LastSslError()));
  }
  // gRPC services accept only HTTP/2 negotiated by ALPN.
  static constexpr unsigned char kAlpnH2[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx.get(), kAlpnH2, sizeof kAlpnH2);
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx.get());
  const std::string& name = files.server_name.empty() ? host : files.server_name;
  if (X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) != 1) {
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
  }
  return ctx;
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
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr) return false;
  // Only whether the peer speaks TLS matters here, not who it is.
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  Probe probe(fd, ctx.get(), deadline);
  // Done, or refused by the peer (e.g. it wants a client certificate):
  // either way it answered in TLS if its certificate came.
  const bool answered = probe.Handshake() == Probe::kDone ||
                        (probe.ssl() && SSL_get0_peer_certificate(probe.ssl()) != nullptr);
  ERR_clear_error();
  return answered;
}

absl::Status CheckHandshake(absl::string_view address, const TlsFiles& files,
                            absl::Duration timeout) {
  std::string host;
  int port = 0;
  if (absl::Status st = SplitHostPort(address, "address", &host, &port); !st.ok()) return st;
  absl::StatusOr<CtxPtr> ctx = ClientContext(files, host);
  if (!ctx.ok()) return ctx.status();
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = Connect(host, port, deadline);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("nothing answers at ", address));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  Probe probe(fd, ctx->get(), deadline);
  Probe::Outcome o = probe.Handshake();
  const bool got_cert = probe.ssl() && SSL_get0_peer_certificate(probe.ssl()) != nullptr;
  if (o == Probe::kDone) o = probe.Settle(absl::Now() + kSettleTime);
  const long verify = probe.ssl() ? SSL_get_verify_result(probe.ssl()) : X509_V_OK;
  const std::string reason = LastSslError();
  ERR_clear_error();
  if (o == Probe::kDone) return absl::OkStatus();
  if (verify != X509_V_OK) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "the certificate of the service at %s is not accepted: %s (--tls-ca %s must be the "
        "CA that signed it; for an address the certificate does not name, give "
        "--tls-server-name)",
        address, X509_verify_cert_error_string(verify), files.ca));
  }
  if (!got_cert) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "the service at %s does not speak TLS (%s): drop --tls-ca, or start the service "
        "with --tls-cert and --tls-key",
        address, o == Probe::kClosed ? "it hung up" : reason));
  }
  return absl::UnauthenticatedError(absl::StrFormat(
      "the service at %s refused this client's TLS handshake (%s): with mutual TLS it "
      "requires --tls-cert and --tls-key, a client certificate signed by its CA",
      address, o == Probe::kClosed ? "it hung up" : reason));
}

}  // namespace elastrun::tls
