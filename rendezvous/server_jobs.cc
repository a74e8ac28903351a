#include "rendezvous/server_jobs.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/rpc.h"
#include "common/status_macros.h"
#include "rendezvous/caller.h"

namespace elastrun::rendezvous {
namespace {

using calls::Audience;
using calls::RequireNodeAdmin;
using calls::Unary;

// Bound on one StreamLogs answer.
constexpr size_t kMaxStreamLogsBytes = 4 << 20;

// Writes a fixed list of chunks, then finishes: StreamLogs answers with what
// the service holds now; a follower calls again with the last seq it saw.
class LogsReactor : public grpc::ServerWriteReactor<v1::LogChunk> {
 public:
  LogsReactor(grpc::Status status, std::vector<v1::LogChunk> chunks)
      : status_(std::move(status)), chunks_(std::move(chunks)) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    const v1::LogChunk* chunk = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (status_.ok() && next_ < chunks_.size()) chunk = &chunks_[next_++];
    }
    if (chunk == nullptr) {
      Finish(status_);
      return;
    }
    StartWrite(chunk);
  }
  const grpc::Status status_;
  const std::vector<v1::LogChunk> chunks_;
  // Each OnWriteDone may run on another gRPC thread. gRPC orders them, but
  // inside its uninstrumented library: without a lock of ours, TSan
  // (scripts/check_threads.sh) takes the next reaction's read of next_ for
  // a race with the previous one's write. Never contended.
  absl::Mutex mu_;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

grpc::ServerUnaryReactor* RendezvousServer::JobsService::Submit(
    grpc::CallbackServerContext* ctx, const v1::SubmitRequest* req,
    v1::SubmitResponse* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "Submit", resp,
               [&](const Caller& caller) {
                 v1::SubmitRequest owned = *req;
                 *owned.mutable_spec() = WithOwner(caller, req->spec());
                 return c_->Submit(owned);
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::Get(
    grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req, v1::JobStatus* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "Get", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::JobStatus> {
                 ASSIGN_OR_RETURN(v1::JobStatus job, c_->GetJob(*req));
                 RedactForCaller(caller, &job);
                 return job;
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::List(
    grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
    v1::ListJobsResponse* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "List", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::ListJobsResponse> {
                 ASSIGN_OR_RETURN(v1::ListJobsResponse list, c_->ListJobs(*req));
                 for (v1::JobStatus& job : *list.mutable_jobs())
                   RedactForCaller(caller, &job);
                 return list;
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::Cancel(
    grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
    v1::JobStatus* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "Cancel", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::JobStatus> {
                 v1::GetJobRequest get;
                 get.set_job_id(req->job_id());
                 ASSIGN_OR_RETURN(v1::JobStatus job, c_->GetJob(get));
                 RETURN_IF_ERROR(CheckJobAccess(caller, job, "cancel"));
                 return c_->CancelJob(*req);
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::ListNodes(
    grpc::CallbackServerContext* ctx, const v1::ListNodesRequest* req,
    v1::ListNodesResponse* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "ListNodes", resp,
               [&](const Caller&) { return c_->ListNodes(*req); });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::DrainNode(
    grpc::CallbackServerContext* ctx, const v1::NodeRequest* req, v1::NodeInfo* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "DrainNode", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::NodeInfo> {
                 RETURN_IF_ERROR(RequireNodeAdmin(caller, "drain"));
                 return c_->DrainNode(*req);
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::RemoveNode(
    grpc::CallbackServerContext* ctx, const v1::NodeRequest* req, v1::NodeInfo* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "RemoveNode", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::NodeInfo> {
                 RETURN_IF_ERROR(RequireNodeAdmin(caller, "remove"));
                 return c_->RemoveNode(*req);
               });
}

grpc::ServerUnaryReactor* RendezvousServer::JobsService::Events(
    grpc::CallbackServerContext* ctx, const v1::EventsRequest* req,
    v1::EventsResponse* resp) {
  return Unary(ctx, policy_, Audience::kAnyone, "Events", resp,
               [&](const Caller& caller) -> absl::StatusOr<v1::EventsResponse> {
                 v1::GetJobRequest get;
                 get.set_job_id(req->job_id());
                 ASSIGN_OR_RETURN(v1::JobStatus job, c_->GetJob(get));
                 RETURN_IF_ERROR(CheckJobAccess(caller, job, "read the events of"));
                 return c_->Events(*req);
               });
}

grpc::ServerWriteReactor<v1::LogChunk>* RendezvousServer::JobsService::StreamLogs(
    grpc::CallbackServerContext* ctx, const v1::StreamLogsRequest* req) {
  absl::StatusOr<Caller> caller = policy_.CallerOf(ctx);
  absl::Status st = caller.status();
  LogStore::ReadResult read;
  if (st.ok()) {
    v1::GetJobRequest get;
    get.set_job_id(req->job_id());
    absl::StatusOr<v1::JobStatus> job = c_->GetJob(get);
    st = job.ok() ? CheckJobAccess(*caller, *job, "read the logs of") : job.status();
  }
  if (st.ok()) {
    read = logs_->Read(req->job_id(), req->after_seq(), req->rank(), kMaxStreamLogsBytes);
    if (read.evicted) {
      st = absl::FailedPreconditionError(absl::StrCat(
          "the service no longer keeps the logs of job ", req->job_id(),
          " (it keeps those of its newest finished jobs and of every live one); each "
          "node of the job has its ranks' logs under its daemon's --log-dir, in ",
          req->job_id(), "/attempt_<round>/<local rank>/"));
    } else if (read.dropped && !read.chunks.empty()) {
      read.chunks.front().set_gap_before(true);
    }
  }
  return new LogsReactor(rpc::ToGrpcStatus(st), std::move(read.chunks));
}

}  // namespace elastrun::rendezvous
