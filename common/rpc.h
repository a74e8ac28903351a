// The client and server sides of the project's gRPC calls that every
// binary shares: status conversion, the channel to the rendezvous service
// (reconnect backoff, keepalive, TLS), a call's deadline and token, and why
// a call that could not reach the service failed when TLS is the cause.
// The daemon's client (launcher/daemon/client.cc), the CLI's
// (launcher/cli/client.cc) and the service (rendezvous/server*.cc) use it.
#ifndef ELASTRUN_COMMON_RPC_H_
#define ELASTRUN_COMMON_RPC_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace elastrun::rpc {

// absl::Status and grpc::Status share their codes (google.rpc.Code).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// gRPC's target for `endpoints`: "HOST:PORT" as it is (a name that
// resolves to several addresses gives them all), several comma-separated
// ("a:1,b:2,c:3": the replicas of a service, the members of etcd) as one
// list of addresses (names resolved now), of which a channel uses the first
// that accepts a connection and moves on when it is lost. So a client of
// replicated services reaches whichever listens: the rendezvous service's
// leader (its followers do not listen), any live member of etcd.
std::string ChannelTarget(const std::string& endpoints);

struct ChannelOptions {
  // "HOST:PORT", or several comma-separated (ChannelTarget).
  std::string target;
  tls::TlsFiles tls;
  // From tls::MakeChannelCredentials; null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Pings every second, also without calls, so that a long-lived stream
  // (a daemon's Watch) notices a dead peer within seconds.
  bool keepalive = false;
  // How long one connection attempt may take, TCP and HTTP/2 handshake
  // (gRPC's min reconnect backoff, which is also its least connect
  // timeout).
  absl::Duration connect_timeout = absl::Milliseconds(100);
};
// A channel that reconnects within about a second of the service's return
// (gRPC's own backoff grows to 120 s).
std::shared_ptr<grpc::Channel> NewChannel(const ChannelOptions& options);

// The settings of the service's gRPC port (the service's, or a follower
// replica's passing calls on): the port is its alone (no SO_REUSEPORT: a
// second service on it would take half of its connections, and `elastrun
// run` learns from the bind failing that another node hosts the
// rendezvous); daemons' keepalive pings every second allowed; messages up
// to 16 MiB.
void ConfigureServicePort(grpc::ServerBuilder& builder);

// Sends `token` as "authorization: Bearer TOKEN" when not empty.
void AddToken(grpc::ClientContext& ctx, const std::string& token);
// Sets `ctx`'s deadline, `timeout` from now, and adds `token`.
void PrepareCall(grpc::ClientContext& ctx, absl::Duration timeout,
                 const std::string& token);

// How long the TLS probes below wait for an answer.
inline constexpr absl::Duration kTlsProbeTimeout = absl::Seconds(2);
// For a call to `target` that failed Unavailable or DeadlineExceeded: when
// TLS is the reason, the status that says so, Unauthenticated (retrying
// cannot help): a plaintext client whose service speaks TLS, or a TLS
// client whose handshake is refused (the service's certificate, the name,
// the client's certificate). nullopt otherwise. Blocking (up to about
// kTlsProbeTimeout): for a failed call, not a hot path.
std::optional<absl::Status> TlsFailure(const absl::Status& failed,
                                       const std::string& target,
                                       const tls::TlsFiles& tls);

}  // namespace elastrun::rpc

#endif  // ELASTRUN_COMMON_RPC_H_
