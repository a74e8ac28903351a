// TLS for every gRPC port, in one place: the service's server credentials
// and the daemon's and CLI's channel credentials, made from PEM files that
// are read and checked here (missing, unreadable, not PEM, a key that does
// not match its certificate), so that a mistake is a clear error at start
// and not a failed handshake later. Also a probe that tells a plaintext
// client whether the service it cannot reach speaks TLS.
//
// The service: --tls-cert and --tls-key turn TLS on; --tls-ca as well
// requires every client to present a certificate signed by that CA (mutual
// TLS). A client: --tls-ca turns TLS on (the service's certificate must be
// signed by it); --tls-cert/--tls-key add a client certificate.
#ifndef ELASTRUN_COMMON_TLS_H_
#define ELASTRUN_COMMON_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class ChannelArguments;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace elastrun::tls {

// The TLS flags of one program; every field empty means plaintext.
struct TlsFiles {
  // --tls-cert: PEM certificate (chain, own certificate first).
  std::string cert;
  // --tls-key: PEM private key of `cert`.
  std::string key;
  // --tls-ca: PEM CA certificate(s). Service: clients must present a
  // certificate it signed. Client: the service's certificate must be
  // signed by it.
  std::string ca;
  // Client only (--tls-server-name): the name the service's certificate is
  // checked against instead of the host of the address, for an address
  // that the certificate does not carry (e.g. an IP without an IP SAN).
  std::string server_name;
};

// The largest PEM file read; certificates and keys are a few KiB.
inline constexpr size_t kMaxPemBytes = 1 << 20;

// Whether `files` asks for TLS: as a service (cert or key given), as a
// client (ca, cert or key given).
bool ServerWantsTls(const TlsFiles& files);
bool ClientWantsTls(const TlsFiles& files);

// Checks the combination of flags alone (no file is read). InvalidArgument
// naming the flags: half a pair (cert without key, or key without cert);
// for the service, --tls-ca without cert+key or --tls-server-name (a
// client's flag); for a client, cert+key or --tls-server-name without
// --tls-ca.
absl::Status CheckServerFlags(const TlsFiles& files);
absl::Status CheckClientFlags(const TlsFiles& files);

// The service's credentials: plaintext when no TLS flag is given; TLS with
// cert+key; mutual TLS with ca as well. InvalidArgument naming the flag and
// file: CheckServerFlags' errors, a file missing,
// unreadable, larger than kMaxPemBytes or holding no PEM of its kind, a
// key that does not match the certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);

// A client's credentials: plaintext when no TLS flag is given; TLS
// verifying the service against ca, with the client certificate cert+key
// when given. InvalidArgument: CheckClientFlags' errors, the file errors
// above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

// Sets gRPC's TLS target name override to files.server_name, if given.
void AddChannelArgs(const TlsFiles& files, grpc::ChannelArguments* args);

// Whether whatever listens at `address` ("HOST:PORT", "[v6]:PORT") answers
// a TLS handshake (no certificate is checked). False when nothing answers
// within `timeout`, or it answers otherwise (a plaintext gRPC server).
// Blocking; for explaining a plaintext client's failure, not on a hot path.
bool SpeaksTls(absl::string_view address, absl::Duration timeout);

// Makes a TLS handshake to `address` as a client with `files` would (the
// CA, the name checked, the client certificate) and says why it fails,
// for a TLS client that cannot reach its service. OK: the handshake passed
// (the trouble is elsewhere). Unavailable: nothing answered in time.
// Unauthenticated, with a message naming the address, the reason and the
// flags to fix: the service does not speak TLS, its certificate is not
// accepted (another CA, or a name it does not carry), or it refused this
// client (no client certificate, or one of another CA). Blocking; it
// listens up to half a second after the handshake for a refusal.
absl::Status CheckHandshake(absl::string_view address, const TlsFiles& files,
                            absl::Duration timeout);

// The message for a plaintext client whose service at `address` speaks
// TLS: names the address and the flags (and environment variables) to give.
std::string SpeaksTlsMessage(absl::string_view address);

}  // namespace elastrun::tls

#endif  // ELASTRUN_COMMON_TLS_H_
