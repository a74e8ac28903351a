// Coordinator: one method per RPC, each under the one mutex, delegating to
// the part that owns the concern (see coordinator.h).
#include "rendezvous/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/placement.h"

namespace elastrun::rendezvous {
namespace {

absl::Status ShuttingDown() {
  return absl::UnavailableError("the service is shutting down");
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store)
    : options_(std::move(options)),
      clock_(*options_.clock),
      store_(std::move(store)),
      registry_(options_.lease),
      jobs_(store_.get(), options_.jobs),
      node_writes_(store_.get(), registry_, options_.jobs),
      rounds_(clock_, registry_, jobs_, streams_, barriers_, service_metrics_) {
  metrics_.AddCollector([this] { return CollectMetrics(); });
}

Coordinator::~Coordinator() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options) {
  RETURN_IF_ERROR(ValidateLeaseOptions(options.lease));
  if (options.max_nodes < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max nodes %d must be at least 1", options.max_nodes));
  }
  if (options.jobs.progress_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("progress interval must not be negative");
  }
  if (options.clock == nullptr) options.clock = &RealClock();
  const std::string path = options.state_path.empty() ? ":memory:" : options.state_path;
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                   options.open_store ? options.open_store() : Store::Open(path));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(store)));
  absl::MutexLock lock(&c->mu_);
  RETURN_IF_ERROR(c->Load());
  return c;
}

absl::Status Coordinator::Load() {
  ASSIGN_OR_RETURN(Store::Contents contents, store_->Load());
  const absl::Time now = clock_.Now();
  for (const v1::StoredNode& n : contents.nodes) registry_.Restore(n, now);
  RETURN_IF_ERROR(jobs_.Restore(contents));
  Outbox out;  // nothing can be sent yet: no stream is attached
  rounds_.Restored(out);
  LOG(INFO) << store_->where() << ": " << contents.nodes.size() << " nodes, "
            << contents.jobs.size() << " jobs";
  if (absl::IsUnavailable(out.store_status)) {
    // A full disk: serve what is stored (reads work, each write fails
    // UNAVAILABLE with the reason), and write the restored changes once
    // there is space (they are retried as every failed write is).
    LOG(WARNING) << "serving read-only until the state can be written: "
                 << out.store_status;
    return absl::OkStatus();
  }
  return out.store_status;
}

void Coordinator::Flush(Outbox& out) {
  out.Deliver();
  if (options_.on_timers_changed) options_.on_timers_changed();
}

absl::Status Coordinator::JobSaved(Outbox& out, const std::string& job_id) {
  absl::StatusOr<JobRecord*> job = jobs_.Find(job_id);
  if (!job.ok()) return absl::OkStatus();
  return jobs_.EnsureSaved(out, **job);
}

Store::Writes Coordinator::store_writes() const {
  absl::MutexLock lock(&mu_);
  return store_->writes();
}

absl::StatusOr<v1::RegisterNodeResponse> Coordinator::RegisterNode(
    const v1::RegisterNodeRequest& r) {
  Outbox out;
  v1::RegisterNodeResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return ShuttingDown();
    absl::StatusOr<NodeRegistry::Registered> check =
        registry_.CheckRegister(r, clock_.Now());
    if (!check.ok()) {
      // A second daemon with this node id: the operator must hear of it.
      if (absl::IsAlreadyExists(check.status())) LOG(WARNING) << check.status();
      return check.status();
    }
    RETURN_IF_ERROR(MakeRoomFor(out, r.node_id()));
    if (check->restarted) {
      // Its workers died with the old daemon.
      NodeLost(out, r.node_id(), "daemon restarted (new incarnation)");
    }
    const NodeRecord* before = registry_.Find(r.node_id());
    const bool was_alive = before != nullptr && before->alive();
    registry_.Register(r, clock_.Now());
    node_writes_.Save(out, r.node_id());
    rounds_.NodeReported(out, r.node_id());
    LOG(INFO) << "node " << r.node_id() << " registered (" << r.addr() << ", "
              << r.slots() << " slots" << (r.pool().empty() ? "" : ", pool " + r.pool())
              << (was_alive ? ", reconnect" : "") << ")";
    rounds_.Schedule(out);
    const Cadence cadence = registry_.cadence();
    *resp.mutable_heartbeat_interval() = ToProto(cadence.heartbeat_interval);
    *resp.mutable_lease_timeout() = ToProto(cadence.lease_timeout);
  }
  Flush(out);
  // A write that failed here (a full disk) is kept and retried, and the
  // node's record is rebuilt by its next registration: the node is
  // registered all the same. Failing it would keep the daemon from its
  // Watch, and so from sending the reports that end its jobs.
  if (!out.store_status.ok()) {
    LOG(WARNING) << "node " << r.node_id()
                 << " registered; its state is saved later: " << out.store_status;
  }
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(
    const v1::HeartbeatRequest& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(absl::Time expiry,
                   registry_.Heartbeat(r.node_id(), r.incarnation(), clock_.Now()));
  v1::HeartbeatResponse resp;
  *resp.mutable_lease_expiry() = ToProto(expiry);
  const Cadence cadence = registry_.cadence();
  *resp.mutable_heartbeat_interval() = ToProto(cadence.heartbeat_interval);
  *resp.mutable_lease_timeout() = ToProto(cadence.lease_timeout);
  return resp;
}

absl::Status Coordinator::AttachWatch(const v1::WatchRequest& r,
                                      std::shared_ptr<NodeStream> stream) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return ShuttingDown();
    RETURN_IF_ERROR(registry_.CheckAlive(r.node_id(), r.incarnation()));
    streams_.Attach(out, r.node_id(), std::move(stream));
    v1::Command welcome;
    const Cadence cadence = registry_.cadence();
    *welcome.mutable_welcome()->mutable_heartbeat_interval() =
        ToProto(cadence.heartbeat_interval);
    *welcome.mutable_welcome()->mutable_lease_timeout() = ToProto(cadence.lease_timeout);
    welcome.mutable_welcome()->set_cluster_id(store_->cluster_id());
    streams_.Send(out, r.node_id(), std::move(welcome));
    rounds_.Resync(out, r.node_id());
  }
  Flush(out);
  return absl::OkStatus();
}

void Coordinator::DetachWatch(const std::string& node_id, const NodeStream* stream) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (!streams_.Detach(node_id, stream) || shutting_down_) return;
    NodeLost(out, node_id, "watch stream closed");
  }
  Flush(out);
}

void Coordinator::NodeLost(Outbox& out, const std::string& node_id,
                           const std::string& reason) {
  const NodeRecord* node = registry_.Find(node_id);
  if (node == nullptr || !node->alive()) return;
  LOG(WARNING) << "node " << node_id << " lost: " << reason;
  registry_.MarkLost(node_id, reason, clock_.Now());
  node_writes_.Save(out, node_id);
  streams_.Close(out, node_id,
                 absl::UnavailableError(absl::StrFormat(
                     "node \"%s\" lost: %s; register again", node_id, reason)));
  rounds_.NodeLost(out, node_id);
}

absl::StatusOr<v1::JoinRoundResponse> Coordinator::JoinRound(
    const v1::JoinRoundRequest& r) {
  Outbox out;
  absl::StatusOr<v1::JoinRoundResponse> resp;
  {
    absl::MutexLock lock(&mu_);
    resp = rounds_.Join(out, r);
    if (resp.ok()) {
      if (absl::Status st = JobSaved(out, r.job_id()); !st.ok()) resp = st;
    }
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return resp;
}

absl::Status Coordinator::ReportExit(const v1::ReportExitRequest& r) {
  Outbox out;
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    st = rounds_.ReportExit(out, r);
    // Also for a repeated report that changed nothing: the daemon keeps
    // its report (and retries it) until the job's new state is on disk.
    if (st.ok()) st = JobSaved(out, r.job_id());
  }
  Flush(out);
  RETURN_IF_ERROR(st);
  return out.store_status;
}

absl::Status Coordinator::ReportProgress(const v1::ReportProgressRequest& r) {
  Outbox out;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
    const bool had_pending = jobs_.NextProgressFlush().has_value();
    const absl::Time now = clock_.Now();
    RETURN_IF_ERROR(jobs_.ReportProgress(out, *job, r.progress(), now));
    NoteProgress(*job, r.progress(), now);
    // A row left for later needs the timer: wake it when the first one
    // becomes pending (at most once per interval and job).
    wake = !had_pending && jobs_.NextProgressFlush().has_value();
  }
  if (wake && options_.on_timers_changed) options_.on_timers_changed();
  // A failed progress write is retried by the timer: the report was taken
  // and the job record is untouched, so the caller has nothing to redo.
  return absl::OkStatus();
}

uint64_t Coordinator::Barrier(const v1::BarrierRequest& r, BarrierDone done) {
  Outbox out;
  absl::StatusOr<uint64_t> id;
  {
    absl::MutexLock lock(&mu_);
    id = Arrive(out, r, done);
  }
  if (!id.ok()) out.dones.emplace_back(std::move(done), id.status());
  out.Deliver();
  return id.ok() ? *id : 0;
}

absl::StatusOr<uint64_t> Coordinator::Arrive(Outbox& out, const v1::BarrierRequest& r,
                                             BarrierDone& done) {
  if (shutting_down_) return ShuttingDown();
  RETURN_IF_ERROR(BarrierTable::CheckName(r.name()));
  ASSIGN_OR_RETURN(int members, rounds_.BarrierMembers(r));
  return barriers_.Arrive(out, r.job_id(), r.round(), r.name(), r.participant(), members,
                          done);
}

void Coordinator::AbandonBarrier(uint64_t waiter_id) {
  BarrierDone done;
  {
    absl::MutexLock lock(&mu_);
    done = barriers_.Abandon(waiter_id);
  }
  if (done) done(absl::CancelledError("barrier wait abandoned by the caller"));
}

absl::StatusOr<v1::SubmitResponse> Coordinator::Submit(const v1::SubmitRequest& r) {
  RETURN_IF_ERROR(ValidateJobSpec(r.spec()));
  RETURN_IF_ERROR(ValidateRequestId(r.request_id()));
  Outbox out;
  v1::SubmitResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return ShuttingDown();
    const v1::JobSpec spec = WithDefaults(r.spec());
    // Sent again (its answer was lost): the job it made, not a second one.
    if (JobRecord* done = jobs_.FindRequest(spec, r.request_id())) {
      LOG(INFO) << "job " << done->id << ": submit request " << r.request_id()
                << " repeated; not submitted again";
      resp.set_job_id(done->id);
      return resp;
    }
    if (!spec.wait_for_nodes()) {
      // Refused rather than queued: such a job would wait for ever, and the
      // user learns it now instead of from a job that never starts.
      if (std::optional<std::string> why = WhyNoNodesCanHold(
              registry_, spec.pool(), spec.nproc_per_node(), spec.min_nodes())) {
        LOG(INFO) << "job refused: " << *why;
        return absl::FailedPreconditionError(absl::StrCat(
            *why,
            "; submit with --wait-for-nodes (wait_for_nodes: true in a job file) to "
            "wait for such nodes"));
      }
    }
    ASSIGN_OR_RETURN(JobRecord * job, jobs_.Submit(spec, clock_.Now(), r.request_id()));
    LOG(INFO) << "job " << job->id << " submitted: nnodes " << job->spec.min_nodes()
              << ":" << job->spec.max_nodes() << " x " << job->spec.nproc_per_node();
    resp.set_job_id(job->id);
    rounds_.Schedule(out);
  }
  Flush(out);
  return resp;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(const v1::GetJobRequest& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  v1::JobStatus s = JobStatusOf(*job, /*with_history=*/true);
  // Finished, and every node that ran it sent its last lines or is gone
  // (or a while passed: a node may never say so).
  constexpr absl::Duration kLogsGrace = absl::Seconds(30);
  bool complete = s.state() == v1::JOB_STATE_SUCCEEDED ||
                  s.state() == v1::JOB_STATE_FAILED ||
                  s.state() == v1::JOB_STATE_CANCELLED;
  if (complete && clock_.Now() - FromProto(s.finish_time()) < kLogsGrace) {
    for (const v1::JobNode& n : s.nodes()) {
      const NodeRecord* node = registry_.Find(n.node_id());
      if (node != nullptr && node->alive() && job->logs_done.count(n.node_id()) == 0) {
        complete = false;
      }
    }
  }
  s.set_logs_complete(complete);
  return s;
}

void Coordinator::LogsDone(const std::string& job_id, const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobRecord*> job = jobs_.Find(job_id);
  if (job.ok()) (*job)->logs_done.insert(node_id);
}

bool Coordinator::JobLive(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<JobRecord*> job = jobs_.Find(job_id);
  return job.ok() && ((*job)->core == nullptr || !(*job)->core->finished());
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& r) {
  absl::MutexLock lock(&mu_);
  return jobs_.List(r);
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(const v1::CancelJobRequest& r) {
  Outbox out;
  v1::JobStatus status;
  absl::Status saved;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
    rounds_.Cancel(out, *job, r.reason().substr(0, 1024));
    saved = jobs_.EnsureSaved(out, *job);
    status = JobStatusOf(*job, /*with_history=*/true);
  }
  // The stops go out even when the cancel is not on disk yet: workers of
  // a cancelled job must not run on; the record is retried.
  Flush(out);
  RETURN_IF_ERROR(saved);
  RETURN_IF_ERROR(out.store_status);
  return status;
}

absl::StatusOr<v1::EventsResponse> Coordinator::Events(const v1::EventsRequest& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  v1::EventsResponse resp;
  for (const v1::JobEvent& e : job->events) *resp.add_events() = e;
  return resp;
}

std::vector<metrics::Family> Coordinator::CollectMetrics() {
  absl::MutexLock lock(&mu_);
  std::vector<metrics::Family> families = JobFamilies(jobs_.by_seq(), clock_.Now());
  metrics::Family nodes{"elastrun_nodes", "Node daemons the service knows, by state.",
                        "gauge", {}};
  double alive = 0, lost = 0;
  for (const auto& [id, n] : registry_.nodes()) (n.alive() ? alive : lost) += 1;
  nodes.samples.push_back({{{"state", "alive"}}, alive});
  nodes.samples.push_back({{{"state", "lost"}}, lost});
  families.push_back(std::move(nodes));
  return families;
}

std::optional<absl::Time> Coordinator::Tick() {
  Outbox out;
  std::optional<absl::Time> next;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return std::nullopt;
    const absl::Time now = clock_.Now();
    for (const std::string& id : registry_.Expired(now))
      NodeLost(out, id, "lease expired");
    ExpireLostNodes(out, now);
    rounds_.Tick(out, now);
    jobs_.FlushProgress(out, now);
    jobs_.RetryUnsaved(out, now);
    node_writes_.Retry(out, now);
    for (std::optional<absl::Time> d :
         {registry_.NextExpiry(), registry_.NextLostExpiry(), rounds_.NextDeadline(),
          jobs_.NextProgressFlush(), jobs_.NextRetry(), node_writes_.NextRetry()}) {
      if (d && (!next || *d < *next)) next = d;
    }
  }
  // No timers_changed signal from a Tick: the caller has the new deadline.
  out.Deliver();
  return next;
}

void Coordinator::Shutdown() {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    jobs_.FlushProgress(out, clock_.Now(), /*all=*/true);
    // A last try of what failed to write: a job's end must not be lost.
    jobs_.RetryUnsaved(out, absl::InfiniteFuture());
    node_writes_.SaveAll(out, clock_.Now());
    streams_.CloseAll(out, ShuttingDown());
    barriers_.AbortAll(out, ShuttingDown());
  }
  out.Deliver();
}

}  // namespace elastrun::rendezvous
