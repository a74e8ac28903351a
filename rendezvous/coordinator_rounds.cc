// Coordinator: rounds, membership, placement and barriers — the part that
// drives each job's RendezvousCore and turns its events into commands.
#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/placement.h"

namespace elastrun::rendezvous {
namespace {

constexpr size_t kMaxBarrierName = 256;
constexpr size_t kMaxBarriersPerRound = 1024;
constexpr int kMaxMetrics = 256;

bool InWaiting(const std::map<int64_t, WaitingNode>& m, const std::string& node_id) {
  for (const auto& [seq, w] : m) {
    if (w.request.node_id == node_id) return true;
  }
  return false;
}

}  // namespace

// Declared in coordinator.cc (NodeLost) too.
//
// Closes `core`'s JOINING round now when waiting out the last call cannot
// bring anyone else in: it is a re-formed round (round > 0; round 0 keeps
// the whole last call for daemons still registering), at least min_nodes
// joined, and every node placed on the job joined. A node that registers
// later still gets in, through a scale-up round. Without this, a lost node
// cost lease + last_call_timeout (3 s + 1 s by default) before the
// survivors restarted. The core has no "close now" event: it is restored
// with its last call already over (min_reached_time moved back) and its
// timer fired at `now`, so the round's closed_time is `now`. Returns the
// core's events; empty when nothing changed.
std::vector<Event> CloseIfNobodyElseCanJoin(std::unique_ptr<RendezvousCore>& core,
                                            const std::vector<std::string>& placed,
                                            absl::Time now) {
  if (!core || core->finished() || core->state() != JobState::kJoining ||
      core->round() == 0) {
    return {};
  }
  const RendezvousState& st = core->state_snapshot();
  if (!st.min_reached_time || st.joined.size() != placed.size()) return {};
  if (now >= *st.min_reached_time + st.config.last_call_timeout) return {};  // Tick's job
  absl::flat_hash_set<std::string> joined;
  for (const auto& [seq, w] : st.joined) joined.insert(w.request.node_id);
  for (const std::string& node : placed) {
    if (!joined.contains(node)) return {};
  }
  RendezvousState early = st;
  early.min_reached_time = now - early.config.last_call_timeout;
  absl::StatusOr<std::unique_ptr<RendezvousCore>> restored =
      RendezvousCore::Restore(std::move(early));
  if (!restored.ok()) {
    LOG(ERROR) << "run " << core->run_id() << ": cannot close round " << core->round()
               << " early (waiting for the last call): " << restored.status();
    return {};
  }
  std::vector<Event> events = (*restored)->Tick(now);
  core = *std::move(restored);
  return events;
}

absl::StatusOr<Coordinator::Job*> Coordinator::FindJob(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrFormat("no job \"%s\"", job_id));
  }
  return it->second.get();
}

v1::Command Coordinator::JoinCommand(const Job& job) const {
  v1::Command c;
  c.mutable_join_round()->set_job_id(job.id);
  c.mutable_join_round()->set_round(job.core->round());
  *c.mutable_join_round()->mutable_spec() = job.spec;
  return c;
}

v1::Command Coordinator::StartCommand(const Job& job, const RoundAssignment& a) const {
  v1::Command c;
  c.mutable_start()->set_job_id(job.id);
  *c.mutable_start()->mutable_spec() = job.spec;
  *c.mutable_start()->mutable_assignment() = ToProto(a);
  c.mutable_start()->set_max_restarts(job.spec.max_restarts());
  // Without the node entries: ForNode() adds the receiver's own.
  c.mutable_start()->mutable_assignment()->clear_nodes();
  return c;
}

v1::Command Coordinator::ForNode(const v1::Command& start, const RoundAssignment& a,
                                 const std::string& node_id) {
  v1::Command c = start;
  if (const NodeAssignment* n = a.Find(node_id)) {
    *c.mutable_start()->mutable_assignment()->add_nodes() = ToProto(*n);
  }
  return c;
}

void Coordinator::Reconcile(Outbox& out, Job& job, bool force) {
  if (!job.core || job.core->finished()) return;
  const RendezvousState& s = job.core->state_snapshot();
  const RoundAssignment* running = job.core->assignment();
  const int64_t round = job.core->round();
  for (const std::string& node : job.placed) {
    // Cheapest test first: Reconcile runs after every JoinRound, and the
    // waiting lists are linear scans (O(N^2) per join at 1000 nodes held
    // the lock for seconds, so heartbeats queued and leases expired).
    auto asked = job.asked.find(node);
    if (!force && asked != job.asked.end() && asked->second == round) continue;
    if (InWaiting(s.joined, node) || InWaiting(s.spares, node)) continue;
    if (running != nullptr && running->Find(node) != nullptr) continue;
    job.asked[node] = round;
    Send(out, node, JoinCommand(job));
  }
}

void Coordinator::HandleEvents(Outbox& out, Job& job, const std::vector<Event>& events) {
  for (const Event& e : events) {
    switch (e.kind) {
      case Event::Kind::kRoundClosed:
        LOG(INFO) << "job " << job.id << " round " << e.round << " closed: "
                  << e.assignment->group_world_size << " nodes, world size "
                  << e.assignment->world_size;
        {
          // Each node gets its own entry only: the full list to each of N
          // nodes is N x N entries (35 MB per round at 1000 nodes).
          const v1::Command start = StartCommand(job, *e.assignment);
          for (const NodeAssignment& n : e.assignment->nodes) {
            Send(out, n.node_id, ForNode(start, *e.assignment, n.node_id));
          }
        }
        break;
      case Event::Kind::kRoundEnded: {
        LOG(INFO) << "job " << job.id << " round " << e.round << " ended: " << e.reason;
        const RoundRecord& r = job.core->history().at(e.round);
        if (r.assignment) {
          for (const NodeAssignment& n : r.assignment->nodes) {
            v1::Command c;
            c.mutable_stop()->set_job_id(job.id);
            c.mutable_stop()->set_round(e.round);
            c.mutable_stop()->set_reason(e.reason);
            Send(out, n.node_id, std::move(c));
          }
        }
        AbortBarriers(out, job,
                      absl::AbortedError(absl::StrFormat("round %d of job \"%s\" ended: %s",
                                                         e.round, job.id, e.reason)));
        break;
      }
      case Event::Kind::kJobFinished: {
        LOG(INFO) << "job " << job.id << " finished: " << JobStateName(e.final_state)
                  << ": " << e.reason;
        const v1::JobState state = PublicJobState(job.core->state_snapshot());
        for (const std::string& node : job.placed) {
          v1::Command c;
          c.mutable_end_job()->set_job_id(job.id);
          c.mutable_end_job()->set_state(state);
          c.mutable_end_job()->set_reason(e.reason);
          Send(out, node, std::move(c));
        }
        const std::vector<std::string> placed = job.placed;
        for (const std::string& node : placed) Unplace(job, node);
        AbortBarriers(out, job, absl::AbortedError(absl::StrFormat(
                                    "job \"%s\" finished: %s", job.id, e.reason)));
        break;
      }
    }
  }
  if (job.core->finished()) {
    Schedule(out);  // its slots are free
  } else {
    Reconcile(out, job, /*force=*/false);
  }
}

void Coordinator::TickJob(Outbox& out, Job& job, absl::Time now) {
  if (!job.core || job.core->finished()) return;
  std::optional<absl::Time> d = job.core->NextDeadline();
  if (!d || now < *d) return;
  HandleEvents(out, job, job.core->Tick(now));
  PersistJob(out, job);
}

void Coordinator::Unplace(Job& job, const std::string& node_id) {
  job.placed.erase(std::remove(job.placed.begin(), job.placed.end(), node_id),
                   job.placed.end());
  job.asked.erase(node_id);
  registry_.Release(node_id, job.id, job.spec.nproc_per_node());
}

void Coordinator::Schedule(Outbox& out) {
  const absl::Time now = clock_.Now();
  bool queue_blocked = false;
  // Waiting jobs first, strictly in submission order, so a big job is not
  // starved by smaller ones behind it.
  for (Job* job : by_seq_) {
    if (job->core) continue;
    std::vector<std::string> picked =
        PickNodes(registry_, job->spec.nproc_per_node(), job->spec.max_nodes(), {});
    if (static_cast<int>(picked.size()) < job->spec.min_nodes()) {
      queue_blocked = true;
      break;
    }
    absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
        RendezvousCore::Create(job->id, RoundConfigFromSpec(job->spec), now);
    CHECK(core.ok()) << "a validated spec gave a bad RoundConfig: " << core.status();
    job->core = *std::move(core);
    for (const std::string& node : picked) {
      registry_.Reserve(node, job->id, job->spec.nproc_per_node());
      job->placed.push_back(node);
    }
    LOG(INFO) << "job " << job->id << " placed on " << picked.size() << " nodes";
    Reconcile(out, *job, /*force=*/false);
    PersistJob(out, *job);
  }
  if (queue_blocked) return;
  // Then grow placed jobs below max_nodes (replacement or scale-up).
  for (Job* job : by_seq_) {
    if (!job->core || job->core->finished()) continue;
    const int room = job->spec.max_nodes() - static_cast<int>(job->placed.size());
    if (room <= 0) continue;
    std::vector<std::string> picked =
        PickNodes(registry_, job->spec.nproc_per_node(), room, job->placed);
    if (picked.empty()) continue;
    for (const std::string& node : picked) {
      registry_.Reserve(node, job->id, job->spec.nproc_per_node());
      job->placed.push_back(node);
    }
    Reconcile(out, *job, /*force=*/false);
    PersistJob(out, *job);
  }
}

absl::StatusOr<v1::JoinRoundResponse> Coordinator::JoinRound(const v1::JoinRoundRequest& r) {
  Outbox out;
  v1::JoinRoundResponse resp;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
    const NodeRecord* node = registry_.Find(r.node_id());
    if (node == nullptr || !node->alive()) {
      return absl::NotFoundError(absl::StrFormat(
          "JoinRound: node \"%s\" is not registered or was lost; register again",
          r.node_id()));
    }
    if (std::find(job->placed.begin(), job->placed.end(), r.node_id()) ==
        job->placed.end()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "JoinRound: node \"%s\" is not placed on job \"%s\"", r.node_id(), job->id));
    }
    TickJob(out, *job, clock_.Now());
    if (job->core->finished()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("JoinRound: job \"%s\" is finished", job->id));
    }
    if (r.round() != job->core->round()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "JoinRound: round %d of job \"%s\" is not its current round %d", r.round(),
          job->id, job->core->round()));
    }
    if (r.local_world_size() != job->spec.nproc_per_node()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "JoinRound.local_world_size: %d, but job \"%s\" has nproc_per_node %d",
          r.local_world_size(), job->id, job->spec.nproc_per_node()));
    }
    resp.set_round(job->core->round());
    const RendezvousState& s = job->core->state_snapshot();
    const RoundAssignment* running = job->core->assignment();
    if (InWaiting(s.joined, r.node_id()) ||
        (running != nullptr && running->Find(r.node_id()) != nullptr)) {
      return resp;  // a retry: already in
    }
    if (InWaiting(s.spares, r.node_id())) {
      resp.set_spare(true);
      return resp;
    }
    JoinRequest join;
    join.node_id = r.node_id();
    join.addr = node->stored.addr();
    join.master_port = r.master_port();
    join.local_world_size = r.local_world_size();
    ASSIGN_OR_RETURN(std::vector<Event> events, job->core->Join(join, clock_.Now()));
    resp.set_spare(InWaiting(job->core->state_snapshot().spares, r.node_id()));
    HandleEvents(out, *job, events);
    std::vector<Event> early = CloseIfNobodyElseCanJoin(job->core, job->placed, clock_.Now());
    if (!early.empty()) HandleEvents(out, *job, early);
    // Written when the join changed more than the open round's member list
    // (closed it, a scale-up, ...). A bare join is not: after a service
    // restart the node re-attaches, is not in the stored round and is asked
    // to join again (Resync), so nothing is lost, and writing the whole job
    // (every round's assignment) after each of N joins was O(N^2): at 1000
    // nodes 60% of the service's CPU for a round, and the lock held meanwhile.
    if (!events.empty() || !early.empty()) PersistJob(out, *job);
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return resp;
}

absl::Status Coordinator::ReportExit(const v1::ReportExitRequest& r) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
    if (!job->core) {
      return absl::FailedPreconditionError(
          absl::StrFormat("ReportExit: job \"%s\" is still queued", job->id));
    }
    const absl::Time now = clock_.Now();
    TickJob(out, *job, now);
    std::vector<Event> events;
    switch (r.outcome_case()) {
      case v1::ReportExitRequest::kSucceeded: {
        if (!r.succeeded()) {
          return absl::InvalidArgumentError("ReportExit.succeeded: must be true when set");
        }
        ASSIGN_OR_RETURN(events, job->core->ReportSuccess(r.node_id(), r.round(), now));
        break;
      }
      case v1::ReportExitRequest::kFailure: {
        Failure f = FromProto(r.failure());
        if (!f.node_id.empty() && f.node_id != r.node_id()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "ReportExit.failure.node_id: \"%s\" differs from node_id \"%s\"", f.node_id,
              r.node_id()));
        }
        f.node_id = r.node_id();
        f.round = r.round();
        if (!r.failure().has_time()) f.time = now;
        f.message = f.message.substr(0, 64 * 1024);
        f.traceback = f.traceback.substr(0, 256 * 1024);
        ASSIGN_OR_RETURN(events, job->core->ReportFailure(f, now));
        break;
      }
      case v1::ReportExitRequest::OUTCOME_NOT_SET:
        return absl::InvalidArgumentError(
            "ReportExit.outcome: set either succeeded or failure");
    }
    HandleEvents(out, *job, events);
    PersistJob(out, *job);
  }
  Flush(out);
  return out.store_status;
}

absl::Status Coordinator::ReportProgress(const v1::ReportProgressRequest& r) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
    if (r.progress().metrics_size() > kMaxMetrics) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ReportProgress.progress.metrics: %d entries; at most %d",
          r.progress().metrics_size(), kMaxMetrics));
    }
    job->last_progress = r.progress();
    if (!r.progress().has_time()) *job->last_progress->mutable_time() = ToProto(clock_.Now());
    PersistJob(out, *job);
  }
  return out.store_status;
}

uint64_t Coordinator::Barrier(const v1::BarrierRequest& r, BarrierDone done) {
  Outbox out;
  uint64_t id = 0;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    result = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      if (shutting_down_) return absl::UnavailableError("the service is shutting down");
      if (r.name().empty() || r.name().size() > kMaxBarrierName) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Barrier.name: must have 1..%d characters", kMaxBarrierName));
      }
      ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
      const RoundAssignment* a = job->core ? job->core->assignment() : nullptr;
      if (a == nullptr || a->round != r.round()) {
        if (job->core && r.round() < job->core->round()) {
          return absl::AbortedError(absl::StrFormat(
              "Barrier \"%s\": round %d of job \"%s\" already ended", r.name(), r.round(),
              job->id));
        }
        return absl::FailedPreconditionError(absl::StrFormat(
            "Barrier \"%s\": round %d of job \"%s\" is not running", r.name(), r.round(),
            job->id));
      }
      if (a->Find(r.participant()) == nullptr) {
        return absl::NotFoundError(absl::StrFormat(
            "Barrier \"%s\": \"%s\" is not a node of round %d of job \"%s\"", r.name(),
            r.participant(), r.round(), job->id));
      }
      if (job->barrier_round != r.round()) {
        job->barriers.clear();
        job->barrier_round = r.round();
      }
      if (!job->barriers.count(r.name()) && job->barriers.size() >= kMaxBarriersPerRound) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "Barrier \"%s\": at most %d barriers per round", r.name(),
            kMaxBarriersPerRound));
      }
      BarrierState& b = job->barriers[r.name()];
      b.arrived.insert(r.participant());
      if (!b.complete && static_cast<int>(b.arrived.size()) < a->group_world_size) {
        id = next_waiter_++;
        waiters_[id] = {job->id, std::move(done)};
        b.waiters.push_back(id);
        return absl::OkStatus();
      }
      b.complete = true;
      for (uint64_t w : b.waiters) {
        auto it = waiters_.find(w);
        if (it == waiters_.end()) continue;  // abandoned
        out.dones.emplace_back(std::move(it->second.second), absl::OkStatus());
        waiters_.erase(it);
      }
      b.waiters.clear();
      return absl::OkStatus();
    }();
  }
  if (id == 0) out.dones.emplace_back(std::move(done), result);
  for (auto& [d, status] : out.dones) d(status);
  return id;
}

void Coordinator::AbandonBarrier(uint64_t waiter_id) {
  BarrierDone done;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(waiter_id);
    if (it == waiters_.end()) return;
    done = std::move(it->second.second);
    waiters_.erase(it);
  }
  done(absl::CancelledError("barrier wait abandoned by the caller"));
}

void Coordinator::AbortBarriers(Outbox& out, Job& job, const absl::Status& why) {
  for (auto& [name, b] : job.barriers) {
    for (uint64_t w : b.waiters) {
      auto it = waiters_.find(w);
      if (it == waiters_.end()) continue;
      out.dones.emplace_back(std::move(it->second.second), why);
      waiters_.erase(it);
    }
  }
  job.barriers.clear();
  job.barrier_round = -1;
}

}  // namespace elastrun::rendezvous
