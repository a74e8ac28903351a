#include "launcher/daemon/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "common/tls.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/grpc_status.h"

namespace elastrun::launcher {
namespace {

using rendezvous::FromGrpcStatus;

// How long a RegisterNode that cannot reach the service waits for a TLS
// handshake there, to tell why: a plaintext daemon whether the service
// speaks TLS, a TLS daemon why its handshake fails.
constexpr absl::Duration kProbeTimeout = absl::Seconds(2);

class GrpcWatchStream : public WatchStream {
 public:
  GrpcWatchStream(v1::Rendezvous::Stub* stub, const v1::WatchRequest& request,
                  const std::string& token) {
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    // No deadline: the stream lives as long as the connection. Keepalive
    // pings and the heartbeat thread notice a dead service instead.
    reader_ = stub->Watch(&ctx_, request);
  }
  bool Read(v1::Command* command) override { return reader_->Read(command); }
  void Cancel() override { ctx_.TryCancel(); }
  absl::Status Finish() override { return FromGrpcStatus(reader_->Finish()); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::Command>> reader_;
};

class GrpcRendezvousClient : public RendezvousClient {
 public:
  explicit GrpcRendezvousClient(const GrpcClientOptions& options) : options_(options) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    // Reconnect quickly when the service comes back (gRPC's default backoff
    // grows to 120 s); the session adds its own capped backoff on top.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    tls::AddChannelArgs(options.tls, &args);
    channel_ = grpc::CreateCustomChannel(
        options.target,
        options.credentials ? options.credentials : grpc::InsecureChannelCredentials(), args);
    stub_ = v1::Rendezvous::NewStub(channel_);
  }

  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(
      const v1::RegisterNodeRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    // Wait (up to the deadline) for the channel to connect rather than fail
    // at once while it backs off: after a service restart the daemon must
    // re-register within the lease for its workers to go on.
    ctx.set_wait_for_ready(true);
    v1::RegisterNodeResponse resp;
    absl::Status st = FromGrpcStatus(stub_->RegisterNode(&ctx, request, &resp));
    if ((absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) &&
        !tls::ClientWantsTls(options_.tls) &&
        tls::SpeaksTls(options_.target, kProbeTimeout)) {
      // gRPC says only that the call timed out; the daemon would retry for
      // ever.
      return absl::UnauthenticatedError(tls::SpeaksTlsMessage(options_.target));
    }
    if ((absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st)) &&
        tls::ClientWantsTls(options_.tls)) {
      // A refused handshake (Unauthenticated) says why and is not retried.
      absl::Status handshake = tls::CheckHandshake(options_.target, options_.tls, kProbeTimeout);
      if (absl::IsUnauthenticated(handshake)) return handshake;
    }
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::HeartbeatResponse resp;
    return FromGrpcStatus(stub_->Heartbeat(&ctx, request, &resp));
  }
  absl::StatusOr<v1::JoinRoundResponse> JoinRound(
      const v1::JoinRoundRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::JoinRoundResponse resp;
    absl::Status st = FromGrpcStatus(stub_->JoinRound(&ctx, request, &resp));
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status ReportExit(const v1::ReportExitRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ReportExitResponse resp;
    return FromGrpcStatus(stub_->ReportExit(&ctx, request, &resp));
  }
  absl::Status PushLogs(const v1::PushLogsRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::PushLogsResponse resp;
    return FromGrpcStatus(stub_->PushLogs(&ctx, request, &resp));
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ReportProgressResponse resp;
    return FromGrpcStatus(stub_->ReportProgress(&ctx, request, &resp));
  }
  absl::Status Barrier(const v1::BarrierRequest& request, absl::Duration timeout) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    v1::BarrierResponse resp;
    return FromGrpcStatus(stub_->Barrier(&ctx, request, &resp));
  }
  std::unique_ptr<WatchStream> Watch(const v1::WatchRequest& request) override {
    return std::make_unique<GrpcWatchStream>(stub_.get(), request, options_.token);
  }

 private:
  void Prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(options_.deadline));
    if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
  }

  const GrpcClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

}  // namespace

std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(const GrpcClientOptions& options) {
  return std::make_unique<GrpcRendezvousClient>(options);
}

}  // namespace elastrun::launcher
