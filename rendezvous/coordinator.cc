// Coordinator: construction, reload, nodes, Watch streams, timers. Rounds
// are in coordinator_rounds.cc, the Jobs API in coordinator_jobs.cc.
#include "rendezvous/coordinator.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/job_spec.h"

namespace elastrun::rendezvous {

// In coordinator_rounds.cc: closes a re-formed round at once when every
// node placed on the job joined it.
std::vector<Event> CloseIfNobodyElseCanJoin(std::unique_ptr<RendezvousCore>& core,
                                            const std::vector<std::string>& placed,
                                            absl::Time now);

Coordinator::Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store)
    : options_(std::move(options)),
      clock_(*options_.clock),
      store_(std::move(store)),
      registry_(options_.lease) {}

Coordinator::~Coordinator() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options) {
  RETURN_IF_ERROR(ValidateLeaseOptions(options.lease));
  if (options.clock == nullptr) options.clock = &RealClock();
  const std::string path = options.state_path.empty() ? ":memory:" : options.state_path;
  ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(path));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(store)));
  absl::MutexLock lock(&c->mu_);
  RETURN_IF_ERROR(c->Load());
  return c;
}

absl::Status Coordinator::Load() {
  ASSIGN_OR_RETURN(Store::Contents contents, store_->Load());
  const absl::Time now = clock_.Now();
  for (const v1::StoredNode& n : contents.nodes) registry_.Restore(n, now);
  for (v1::StoredJob& stored : contents.jobs) {
    auto job = std::make_unique<Job>();
    job->id = stored.job_id();
    job->seq = stored.seq();
    job->spec = stored.spec();
    job->submit_time = FromProto(stored.submit_time());
    if (stored.has_last_progress()) job->last_progress = stored.last_progress();
    if (stored.has_core()) {
      absl::StatusOr<RendezvousState> state = FromProto(stored.core());
      absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
          state.ok() ? RendezvousCore::Restore(*std::move(state))
                     : absl::StatusOr<std::unique_ptr<RendezvousCore>>(state.status());
      if (!core.ok()) {
        return absl::DataLossError(absl::StrFormat("state database %s: job \"%s\": %s",
                                                   store_->path(), job->id,
                                                   core.status().message()));
      }
      job->core = *std::move(core);
    }
    for (const std::string& node : stored.placed()) {
      job->placed.push_back(node);
      registry_.Reserve(node, job->id, job->spec.nproc_per_node());
    }
    next_seq_ = std::max(next_seq_, job->seq + 1);
    by_seq_.push_back(job.get());
    jobs_[job->id] = std::move(job);
  }
  // Nodes that were lost while placed (the service died before it could
  // react) are lost for their jobs now. Nothing can be sent yet.
  Outbox out;
  for (Job* job : by_seq_) {
    std::vector<std::string> gone;
    for (const std::string& node : job->placed) {
      const NodeRecord* n = registry_.Find(node);
      if (n == nullptr || !n->alive()) gone.push_back(node);
    }
    for (const std::string& node : gone) {
      Unplace(*job, node);
      if (job->core) HandleEvents(out, *job, job->core->NodeLost(node, now));
      PersistJob(out, *job);
    }
  }
  LOG(INFO) << "state " << store_->path() << ": " << contents.nodes.size() << " nodes, "
            << contents.jobs.size() << " jobs";
  return out.store_status;
}

void Coordinator::Flush(Outbox& out) {
  for (auto& [stream, command] : out.sends) stream->Send(std::move(command));
  for (auto& [stream, status] : out.closes) stream->Close(status);
  for (auto& [done, status] : out.dones) done(status);
  if (options_.on_timers_changed) options_.on_timers_changed();
}

void Coordinator::Send(Outbox& out, const std::string& node_id, v1::Command command) {
  auto it = streams_.find(node_id);
  if (it == streams_.end()) return;  // Resync sends it when the node attaches.
  out.sends.emplace_back(it->second, std::move(command));
}

void Coordinator::PersistJob(Outbox& out, const Job& job) {
  v1::StoredJob s;
  s.set_job_id(job.id);
  s.set_seq(job.seq);
  *s.mutable_spec() = job.spec;
  *s.mutable_submit_time() = ToProto(job.submit_time);
  for (const std::string& n : job.placed) s.add_placed(n);
  if (job.core) *s.mutable_core() = ToProto(job.core->state_snapshot());
  if (job.last_progress) *s.mutable_last_progress() = *job.last_progress;
  if (absl::Status st = store_->PutJob(s); !st.ok()) {
    LOG(ERROR) << st;
    if (out.store_status.ok()) out.store_status = st;
  }
}

void Coordinator::PersistNode(Outbox& out, const std::string& node_id) {
  const NodeRecord* n = registry_.Find(node_id);
  if (n == nullptr) return;
  if (absl::Status st = store_->PutNode(n->stored); !st.ok()) {
    LOG(ERROR) << st;
    if (out.store_status.ok()) out.store_status = st;
  }
}

absl::StatusOr<v1::RegisterNodeResponse> Coordinator::RegisterNode(
    const v1::RegisterNodeRequest& r) {
  Outbox out;
  v1::RegisterNodeResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the service is shutting down");
    ASSIGN_OR_RETURN(NodeRegistry::Registered check, registry_.CheckRegister(r));
    if (check.restarted) {
      // Its workers died with the old daemon.
      NodeLost(out, r.node_id(), "daemon restarted (new incarnation)");
    }
    const bool was_alive = registry_.Find(r.node_id()) != nullptr &&
                           registry_.Find(r.node_id())->alive();
    registry_.Register(r, clock_.Now());
    PersistNode(out, r.node_id());
    LOG(INFO) << "node " << r.node_id() << " registered (" << r.addr() << ", "
              << r.slots() << " slots" << (was_alive ? ", reconnect" : "") << ")";
    Schedule(out);
    *resp.mutable_heartbeat_interval() = ToProto(options_.lease.heartbeat_interval);
    *resp.mutable_lease_timeout() = ToProto(options_.lease.lease_timeout);
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(absl::Time expiry,
                   registry_.Heartbeat(r.node_id(), r.incarnation(), clock_.Now()));
  v1::HeartbeatResponse resp;
  *resp.mutable_lease_expiry() = ToProto(expiry);
  return resp;
}

absl::Status Coordinator::AttachWatch(const v1::WatchRequest& r,
                                      std::shared_ptr<NodeStream> stream) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the service is shutting down");
    RETURN_IF_ERROR(registry_.CheckAlive(r.node_id(), r.incarnation()));
    auto it = streams_.find(r.node_id());
    if (it != streams_.end()) {
      // Superseded, not broken: erase first so its Detach is not a loss.
      out.closes.emplace_back(it->second,
                              absl::AbortedError("superseded by a newer Watch stream"));
      streams_.erase(it);
    }
    streams_[r.node_id()] = std::move(stream);
    Resync(out, r.node_id());
  }
  Flush(out);
  return absl::OkStatus();
}

void Coordinator::DetachWatch(const std::string& node_id, const NodeStream* stream) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(node_id);
    if (it == streams_.end() || it->second.get() != stream) return;
    streams_.erase(it);
    if (shutting_down_) return;
    NodeLost(out, node_id, "watch stream closed");
  }
  Flush(out);
}

void Coordinator::Resync(Outbox& out, const std::string& node_id) {
  v1::Command welcome;
  *welcome.mutable_welcome()->mutable_heartbeat_interval() =
      ToProto(options_.lease.heartbeat_interval);
  *welcome.mutable_welcome()->mutable_lease_timeout() = ToProto(options_.lease.lease_timeout);
  Send(out, node_id, std::move(welcome));
  NodeRecord* node = registry_.Find(node_id);
  // Attempts the daemon runs that the service no longer wants.
  for (const v1::RunningAttempt& a : node->reported_running) {
    auto it = jobs_.find(a.job_id());
    const Job* job = it == jobs_.end() ? nullptr : it->second.get();
    v1::Command c;
    if (job == nullptr || !job->core || job->core->finished() ||
        !node->jobs.count(a.job_id())) {
      c.mutable_end_job()->set_job_id(a.job_id());
      c.mutable_end_job()->set_state(job && job->core ? PublicJobState(
                                                            job->core->state_snapshot())
                                                      : v1::JOB_STATE_UNSPECIFIED);
      c.mutable_end_job()->set_reason("the node is no longer part of the job");
    } else {
      const RoundAssignment* cur = job->core->assignment();
      if (cur != nullptr && cur->round == a.round() && cur->Find(node_id) != nullptr) {
        continue;  // Still the right attempt: its workers go on.
      }
      c.mutable_stop()->set_job_id(a.job_id());
      c.mutable_stop()->set_round(a.round());
      c.mutable_stop()->set_reason("stale: the job moved on to another round");
    }
    Send(out, node_id, std::move(c));
  }
  for (const std::string& job_id : node->jobs) {
    Job& job = *jobs_.at(job_id);
    if (!job.core || job.core->finished()) continue;
    const RoundAssignment* cur = job.core->assignment();
    if (cur != nullptr && cur->Find(node_id) != nullptr) {
      Send(out, node_id, ForNode(StartCommand(job, *cur), *cur, node_id));
    }
  }
  for (const std::string& job_id : node->jobs) {
    Job& job = *jobs_.at(job_id);
    job.asked.erase(node_id);
    Reconcile(out, job, /*force=*/false);
  }
}

void Coordinator::NodeLost(Outbox& out, const std::string& node_id,
                           const std::string& reason) {
  NodeRecord* node = registry_.Find(node_id);
  if (node == nullptr || !node->alive()) return;
  LOG(WARNING) << "node " << node_id << " lost: " << reason;
  registry_.MarkLost(node_id, reason);
  PersistNode(out, node_id);
  if (auto it = streams_.find(node_id); it != streams_.end()) {
    out.closes.emplace_back(it->second, absl::UnavailableError(absl::StrFormat(
                                            "node \"%s\" lost: %s; register again",
                                            node_id, reason)));
    streams_.erase(it);
  }
  const absl::Time now = clock_.Now();
  const std::set<std::string> jobs = node->jobs;  // Unplace edits node->jobs
  for (const std::string& job_id : jobs) {
    Job& job = *jobs_.at(job_id);
    Unplace(job, node_id);
    if (job.core) HandleEvents(out, job, job.core->NodeLost(node_id, now));
    PersistJob(out, job);
  }
  Schedule(out);
  // A node lost while the others had all joined: nobody else is coming
  // (Schedule placed any free node first).
  for (const std::string& job_id : jobs) {
    Job& job = *jobs_.at(job_id);
    std::vector<Event> early = CloseIfNobodyElseCanJoin(job.core, job.placed, now);
    if (early.empty()) continue;
    HandleEvents(out, job, early);
    PersistJob(out, job);
  }
}

std::optional<absl::Time> Coordinator::Tick() {
  Outbox out;
  std::optional<absl::Time> next;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return std::nullopt;
    const absl::Time now = clock_.Now();
    for (const std::string& id : registry_.Expired(now)) NodeLost(out, id, "lease expired");
    for (Job* job : by_seq_) TickJob(out, *job, now);
    next = registry_.NextExpiry();
    for (Job* job : by_seq_) {
      if (!job->core) continue;
      std::optional<absl::Time> d = job->core->NextDeadline();
      if (d && (!next || *d < *next)) next = d;
    }
  }
  // No timers_changed signal from a Tick: the caller has the new deadline.
  for (auto& [stream, command] : out.sends) stream->Send(std::move(command));
  for (auto& [stream, status] : out.closes) stream->Close(status);
  for (auto& [done, status] : out.dones) done(status);
  return next;
}

void Coordinator::Shutdown() {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [id, stream] : streams_) {
      out.closes.emplace_back(stream, absl::UnavailableError("the service is shutting down"));
    }
    streams_.clear();
    for (auto& [id, waiter] : waiters_) {
      out.dones.emplace_back(std::move(waiter.second),
                             absl::UnavailableError("the service is shutting down"));
    }
    waiters_.clear();
  }
  for (auto& [stream, status] : out.closes) stream->Close(status);
  for (auto& [done, status] : out.dones) done(status);
}

}  // namespace elastrun::rendezvous
