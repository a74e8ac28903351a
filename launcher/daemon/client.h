// The daemon's view of the rendezvous service: one interface for the calls
// it makes, so the daemon's logic is tested with a fake, and the gRPC
// implementation (deadlines, token, keepalive) in one place.
#ifndef ELASTRUN_LAUNCHER_DAEMON_CLIENT_H_
#define ELASTRUN_LAUNCHER_DAEMON_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "elastrun/v1/rendezvous.pb.h"

namespace elastrun::launcher {

// An open Watch stream.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // Blocks for the next command; false once the stream ended (then call
  // Finish). Called from one thread.
  virtual bool Read(v1::Command* command) = 0;
  // Ends the stream from any thread: a blocked Read returns false.
  virtual void Cancel() = 0;
  // The stream's final status; call once, after Read returned false.
  virtual absl::Status Finish() = 0;
};

// Thread-safe. Unary calls return the service's status (UNAVAILABLE or
// DEADLINE_EXCEEDED when it cannot be reached in time).
class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;
  virtual absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  virtual absl::StatusOr<v1::JoinRoundResponse> JoinRound(
      const v1::JoinRoundRequest& request) = 0;
  virtual absl::Status ReportExit(const v1::ReportExitRequest& request) = 0;
  virtual absl::Status PushLogs(const v1::PushLogsRequest& request) = 0;
  virtual absl::Status ReportProgress(const v1::ReportProgressRequest& request) = 0;
  // Blocks until every node of the round arrived (OK), the round ended
  // (Aborted), or `timeout` passed.
  virtual absl::Status Barrier(const v1::BarrierRequest& request, absl::Duration timeout) = 0;
  virtual std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request) = 0;
};

struct GrpcClientOptions {
  // "HOST:PORT" of elastrun-rendezvous.
  std::string target;
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string token;
  // Deadline of every unary call.
  absl::Duration deadline = absl::Seconds(5);
  // The TLS flags (no TLS flag: plaintext) and the credentials made from
  // them by tls::MakeChannelCredentials, which reports bad files; null:
  // plaintext.
  tls::TlsFiles tls;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// A gRPC channel (TLS with `credentials`, else plaintext) with keepalive
// pings (1 s, which the service permits), so a Watch stream to a vanished
// service breaks within seconds. A RegisterNode that cannot reach the
// service returns Unauthenticated saying why when the cause is TLS (a
// plaintext daemon and a TLS service, or a refused handshake: retrying
// cannot help).
std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(const GrpcClientOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_CLIENT_H_
