#include "launcher/daemon/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <optional>

#include "common/rpc.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"

namespace elastrun::launcher {
namespace {

using rpc::FromGrpcStatus;

class GrpcWatchStream : public WatchStream {
 public:
  GrpcWatchStream(v1::Rendezvous::Stub* stub, const v1::WatchRequest& request,
                  const std::string& token) {
    rpc::AddToken(ctx_, token);
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
    // Keepalive: the Watch stream notices a dead service within seconds;
    // the session adds its own capped backoff on top of the channel's.
    rpc::ChannelOptions co;
    co.target = options.target;
    co.tls = options.tls;
    co.credentials = options.credentials;
    co.keepalive = true;
    channel_ = rpc::NewChannel(co);
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
    // gRPC says only that the call timed out, and the daemon would retry
    // for ever: TLS as the reason is not retried.
    if (std::optional<absl::Status> tls =
            rpc::TlsFailure(st, options_.target, options_.tls)) {
      return *tls;
    }
    if (!st.ok()) return st;
    return resp;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::HeartbeatResponse resp;
    absl::Status st = FromGrpcStatus(stub_->Heartbeat(&ctx, request, &resp));
    if (!st.ok()) return st;
    return resp;
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
    rpc::PrepareCall(ctx, options_.deadline, options_.token);
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
