#include "launcher/cli/client.h"

#include <grpcpp/grpcpp.h>

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/rpc.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "launcher/daemon/cred_socket.h"

namespace elastrun::launcher {
namespace {

// A credential is fetched again this long after the last one: well inside
// its life, so that `logs -f` and `wait` outlive many credentials.
constexpr absl::Duration kCredentialRefresh = absl::Minutes(4);  // of auth::kCredentialLife
constexpr absl::Duration kCredentialFetchTimeout = absl::Seconds(5);

}  // namespace

absl::StatusOr<v1::EventsResponse> JobsClient::Events(const std::string&) {
  return absl::UnimplementedError("this client cannot read events");
}

namespace {

class GrpcJobsClient : public JobsClient {
 public:
  explicit GrpcJobsClient(ServiceOptions options)
      : options_(std::move(options)),
        channel_(rpc::NewChannel({options_.address, options_.tls, options_.credentials})),
        stub_(v1::Jobs::NewStub(channel_)),
        token_(options_.token) {}

  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec,
                                     const std::string& request_id) override {
    v1::SubmitRequest req;
    *req.mutable_spec() = spec;
    req.set_request_id(request_id);
    v1::SubmitResponse resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx, /*state_owner=*/true); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->Submit(&ctx, req, &resp)); !st.ok()) return st;
    return resp.job_id();
  }

  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) override {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::JobStatus resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->Get(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& req) override {
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->List(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id,
                                       const std::string& reason) override {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::JobStatus resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->Cancel(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) override {
    v1::ListNodesResponse resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->ListNodes(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::NodeInfo> DrainNode(const v1::NodeRequest& req) override {
    v1::NodeInfo resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->DrainNode(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<v1::NodeInfo> RemoveNode(const v1::NodeRequest& req) override {
    v1::NodeInfo resp;
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->RemoveNode(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id, int rank,
                                                     int64_t after_seq) override {
    v1::StreamLogsRequest req;
    req.set_job_id(job_id);
    req.set_rank(rank);
    req.set_after_seq(after_seq);
    grpc::ClientContext ctx;
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
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
    if (absl::Status st = Prepare(ctx); !st.ok()) return st;
    if (absl::Status st = Convert(stub_->Events(&ctx, req, &resp)); !st.ok()) return st;
    return resp;
  }

 private:
  // The deadline and the caller's identity. A cluster caller states this
  // user as the owner of what it submits.
  absl::Status Prepare(grpc::ClientContext& ctx, bool state_owner = false) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    absl::MutexLock lock(&mu_);
    if (absl::Status st = Identify(); !st.ok()) return st;
    if (!token_.empty()) {
      ctx.AddMetadata(auth::kAuthorizationKey, "Bearer " + token_);
      if (state_owner) {
        const auth::Identity me = auth::Self();
        ctx.AddMetadata(auth::kOwnerKey, absl::StrFormat("%d:%d:%s", me.uid, me.gid, me.name));
      }
    } else {
      ctx.AddMetadata(auth::kCredentialKey, credential_);
    }
    return absl::OkStatus();
  }

  // The token, else the token file (once), else a fresh enough credential.
  absl::Status Identify() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!token_.empty()) return absl::OkStatus();
    if (!tried_token_file_) {
      tried_token_file_ = true;
      if (options_.token_file.empty()) {
        token_note_ = "no token file (neither $XDG_STATE_HOME nor $HOME is set)";
      } else {
        absl::StatusOr<std::string> token = auth::ReadTokenFile(options_.token_file);
        if (token.ok()) {
          token_ = *token;
          return absl::OkStatus();
        }
        // Not this user's to read: fine, the daemon vouches for them. A
        // token file open to others is a hole: refuse it.
        if (!absl::IsNotFound(token.status()) && !absl::IsPermissionDenied(token.status())) {
          return absl::FailedPreconditionError(token.status().message());
        }
        token_note_ = absl::StrCat(token.status().message());
        if (absl::IsNotFound(token.status())) {
          token_note_ = absl::StrCat("cannot read the token file ", options_.token_file,
                                     " (it does not exist)");
        }
      }
    }
    if (!credential_.empty() && absl::Now() < credential_time_ + kCredentialRefresh) {
      return absl::OkStatus();
    }
    if (options_.cred_socket.empty()) {
      return absl::UnauthenticatedError(absl::StrCat(
          token_note_, " and no daemon credential socket (set $ELASTRUN_CRED_SOCKET or "
          "$XDG_RUNTIME_DIR); give the service's token with --token-file or ELASTRUN_TOKEN"));
    }
    absl::StatusOr<std::string> credential =
        FetchCredential(options_.cred_socket, kCredentialFetchTimeout);
    if (!credential.ok()) {
      return absl::UnauthenticatedError(absl::StrCat(
          token_note_, " and ", credential.status().message(),
          ": run elastrund on this node, or give the service's token with --token-file "
          "or ELASTRUN_TOKEN"));
    }
    credential_ = *credential;
    credential_time_ = absl::Now();
    return absl::OkStatus();
  }

  // The one place where a grpc::Status becomes an absl::Status for the CLI;
  // transport failures get the address, which gRPC's text does not name
  // plainly.
  absl::Status Convert(const grpc::Status& st) const {
    if (st.ok()) return absl::OkStatus();
    const absl::Status failed = rpc::FromGrpcStatus(st);
    const absl::StatusCode code = failed.code();
    if (code == absl::StatusCode::kUnavailable &&
        channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
      // Connected: the service answered, and its message says why (a full
      // disk, a restart under way). Retried all the same.
      return absl::UnavailableError(
          absl::StrFormat("the elastrun service at %s cannot do it now: %s",
                          options_.address, st.error_message()));
    }
    // A TLS mismatch: said plainly, and not retried.
    if (std::optional<absl::Status> tls =
            rpc::TlsFailure(failed, options_.address, options_.tls)) {
      return *tls;
    }
    if (code == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot reach the elastrun service at %s (%s); is elastrun-rendezvous running "
          "there? (set --rendezvous HOST:PORT or ELASTRUN_RENDEZVOUS)",
          options_.address, st.error_message()));
    }
    if (code == absl::StatusCode::kCancelled) {
      // The CLI cancels none of its calls: the service's port closed under
      // this one (gRPC cancels calls that arrive as a server shuts down: a
      // service stopping, or a follower replica taking over). Retried as
      // the service being away.
      return absl::UnavailableError(absl::StrFormat(
          "the elastrun service at %s closed the call (%s); it is stopping or "
          "handing over",
          options_.address, st.error_message()));
    }
    if (code == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrFormat("the elastrun service at %s did not answer within %s",
                          options_.address, absl::FormatDuration(options_.rpc_timeout)));
    }
    if (code == absl::StatusCode::kUnauthenticated) {
      return absl::UnauthenticatedError(absl::StrCat(
          st.error_message(),
          " (give the service's token with --token, --token-file, ELASTRUN_TOKEN or "
          "ELASTRUN_TOKEN_FILE, or run elastrund on this node for a credential)"));
    }
    return failed;
  }

  const ServiceOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Jobs::Stub> stub_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  bool tried_token_file_ ABSL_GUARDED_BY(mu_) = false;
  std::string token_note_ ABSL_GUARDED_BY(mu_);  // why the token file was not used
  std::string credential_ ABSL_GUARDED_BY(mu_);
  absl::Time credential_time_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::string NewRequestId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

std::unique_ptr<JobsClient> NewGrpcJobsClient(const ServiceOptions& options) {
  return std::make_unique<GrpcJobsClient>(options);
}

}  // namespace elastrun::launcher
