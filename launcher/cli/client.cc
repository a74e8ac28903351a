#include "launcher/cli/client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "elastrun/v1/jobs.grpc.pb.h"

namespace elastrun::launcher {
namespace {

// gRPC's reconnect backoff grows to 120 s by default; `wait` polls through a
// service restart and should see the service within about a second of its
// return, so the backoff is capped low (a CLI makes few connections).
std::shared_ptr<grpc::Channel> NewChannel(const ServiceOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(),
                                   args);
}

}  // namespace

absl::StatusOr<v1::EventsResponse> JobsClient::Events(const std::string&) {
  return absl::UnimplementedError("this client cannot read events");
}

namespace {

class GrpcJobsClient : public JobsClient {
 public:
  explicit GrpcJobsClient(ServiceOptions options)
      : options_(std::move(options)), stub_(v1::Jobs::NewStub(NewChannel(options_))) {}

  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec) override {
    v1::SubmitRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->Submit(&ctx, req, &resp)); !st.ok()) return st;
    return resp.job_id();
  }

  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) override {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::JobStatus resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->Get(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::ListJobsResponse> List() override {
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->List(&ctx, v1::ListJobsRequest(), &resp));
        !st.ok()) {
      return st;
    }
    return resp;
  }

  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id,
                                       const std::string& reason) override {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::JobStatus resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->Cancel(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::ListNodesResponse> ListNodes() override {
    v1::ListNodesResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->ListNodes(&ctx, v1::ListNodesRequest(), &resp));
        !st.ok()) {
      return st;
    }
    return resp;
  }

  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id, int rank,
                                                     int64_t after_seq) override {
    v1::StreamLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(rank);
    req.set_after_seq(after_seq);
    grpc::ClientContext ctx;
    Prepare(ctx);
    std::unique_ptr<grpc::ClientReader<v1::LogChunk>> reader = stub_->StreamLogs(&ctx, req);
    std::vector<v1::LogChunk> chunks;
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) chunks.push_back(chunk);
    if (absl::Status st = Convert(reader->Finish()); !st.ok()) return st;
    return chunks;
  }

  absl::StatusOr<v1::EventsResponse> Events(const std::string& job_id) override {
    v1::EventsRequest req;
    req.set_job_id(job_id);
    v1::EventsResponse resp;
    grpc::ClientContext ctx;
    Prepare(ctx);
    if (absl::Status st = Convert(stub_->Events(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

 private:
  void Prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    if (!options_.token.empty())
      ctx.AddMetadata("authorization", "Bearer " + options_.token);
  }

  // The one place where a grpc::Status becomes an absl::Status for the CLI;
  // transport failures get the address, which gRPC's text does not name
  // plainly.
  absl::Status Convert(const grpc::Status& st) const {
    if (st.ok()) return absl::OkStatus();
    const auto code = static_cast<absl::StatusCode>(st.error_code());
    if (code == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot reach the elastrun service at %s (%s); is elastrun-rendezvous running "
          "there? (set --rendezvous HOST:PORT or ELASTRUN_RENDEZVOUS)",
          options_.address, st.error_message()));
    }
    if (code == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrFormat("the elastrun service at %s did not answer within %s",
                          options_.address, absl::FormatDuration(options_.rpc_timeout)));
    }
    if (code == absl::StatusCode::kUnauthenticated) {
      return absl::UnauthenticatedError(
          absl::StrCat(st.error_message(),
                       " (give the service's token with --token-file, --token or "
                       "ELASTRUN_TOKEN)"));
    }
    return absl::Status(code, st.error_message());
  }

  const ServiceOptions options_;
  std::unique_ptr<v1::Jobs::Stub> stub_;
};

}  // namespace

std::unique_ptr<JobsClient> NewGrpcJobsClient(const ServiceOptions& options) {
  return std::make_unique<GrpcJobsClient>(options);
}

}  // namespace elastrun::launcher
