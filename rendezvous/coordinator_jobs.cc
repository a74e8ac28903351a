// Coordinator: the Jobs API (submit, status, list, cancel, nodes).
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/job_spec.h"

namespace elastrun::rendezvous {

absl::StatusOr<v1::SubmitResponse> Coordinator::Submit(const v1::SubmitRequest& r) {
  RETURN_IF_ERROR(ValidateJobSpec(r.spec()));
  Outbox out;
  v1::SubmitResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the service is shutting down");
    auto job = std::make_unique<Job>();
    job->seq = next_seq_;
    job->spec = WithDefaults(r.spec());
    job->id = absl::StrFormat("%s-%d", job->spec.name(), job->seq);
    job->submit_time = clock_.Now();
    // Durable before visible: a failed write leaves nothing half-created.
    PersistJob(out, *job);
    if (!out.store_status.ok()) return out.store_status;
    ++next_seq_;
    LOG(INFO) << "job " << job->id << " submitted: nnodes " << job->spec.min_nodes() << ":"
              << job->spec.max_nodes() << " x " << job->spec.nproc_per_node();
    resp.set_job_id(job->id);
    by_seq_.push_back(job.get());
    jobs_[job->id] = std::move(job);
    Schedule(out);
  }
  Flush(out);
  return resp;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(const v1::GetJobRequest& r) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
  return Status(*job, /*with_history=*/true);
}

v1::ListJobsResponse Coordinator::ListJobs(const v1::ListJobsRequest& r) {
  absl::MutexLock lock(&mu_);
  v1::ListJobsResponse resp;
  for (const Job* job : by_seq_) {
    v1::JobStatus s = Status(*job, /*with_history=*/false);
    if (!r.states().empty() &&
        std::find(r.states().begin(), r.states().end(), s.state()) == r.states().end()) {
      continue;
    }
    *resp.add_jobs() = std::move(s);
  }
  return resp;
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(const v1::CancelJobRequest& r) {
  Outbox out;
  v1::JobStatus status;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(Job * job, FindJob(r.job_id()));
    const std::string why = r.reason().substr(0, 1024);
    const absl::Time now = clock_.Now();
    if (!job->core) {
      // Queued: give it a core only to record the cancellation in its state.
      absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
          RendezvousCore::Create(job->id, RoundConfigFromSpec(job->spec), now);
      CHECK(core.ok()) << core.status();
      job->core = *std::move(core);
    }
    HandleEvents(out, *job, job->core->Cancel(why.empty() ? "by the user" : why, now));
    PersistJob(out, *job);
    status = Status(*job, /*with_history=*/true);
  }
  Flush(out);
  RETURN_IF_ERROR(out.store_status);
  return status;
}

v1::ListNodesResponse Coordinator::ListNodes() {
  absl::MutexLock lock(&mu_);
  v1::ListNodesResponse resp;
  for (const auto& [id, n] : registry_.nodes()) {
    v1::NodeInfo* info = resp.add_nodes();
    info->set_node_id(id);
    info->set_addr(n.stored.addr());
    info->set_slots(n.stored.slots());
    info->set_free_slots(n.alive() ? std::max(0, n.free_slots()) : 0);
    *info->mutable_labels() = n.stored.labels();
    info->set_state(n.stored.state());
    info->set_watching(streams_.count(id) > 0);
    *info->mutable_registered_time() = n.stored.registered_time();
    if (n.alive()) *info->mutable_lease_expiry() = ToProto(n.lease_expiry);
    for (const std::string& job : n.jobs) info->add_jobs(job);
    info->set_lost_reason(n.stored.lost_reason());
  }
  return resp;
}

v1::JobStatus Coordinator::Status(const Job& job, bool with_history) const {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  *s.mutable_submit_time() = ToProto(job.submit_time);
  if (job.last_progress) *s.mutable_last_progress() = *job.last_progress;
  if (!job.core) {
    s.set_state(v1::JOB_STATE_PENDING);
    s.set_phase(v1::ROUND_PHASE_QUEUED);
    return s;
  }
  const RendezvousState& st = job.core->state_snapshot();
  s.set_state(PublicJobState(st));
  s.set_phase(job.core->finished()                        ? v1::ROUND_PHASE_DONE
              : st.state == JobState::kRunning ? v1::ROUND_PHASE_RUNNING
                                               : v1::ROUND_PHASE_JOINING);
  s.set_round(job.core->round());
  s.set_restarts(st.restart_count);
  const RoundAssignment* latest = nullptr;
  for (auto it = st.rounds.rbegin(); it != st.rounds.rend() && latest == nullptr; ++it) {
    if (it->assignment) latest = &*it->assignment;
  }
  if (latest != nullptr) s.set_world_size(latest->world_size);
  if (with_history) {
    for (const RoundRecord& r : st.rounds) *s.add_history() = ToProto(r);
  }
  if (st.root_cause) *s.mutable_root_cause() = ToProto(*st.root_cause);
  s.set_finish_reason(st.finish_reason);
  if (st.finished_time) *s.mutable_finish_time() = ToProto(*st.finished_time);

  // Per-node state: placed nodes, then nodes of the latest closed round that
  // are no longer placed (lost, or the job finished).
  const RoundRecord& cur = st.rounds.back();
  auto add = [&](const std::string& node, const std::string& state) {
    v1::JobNode* n = s.add_nodes();
    n->set_node_id(node);
    n->set_state(state);
    const NodeAssignment* a = latest != nullptr ? latest->Find(node) : nullptr;
    n->set_group_rank(a != nullptr ? a->group_rank : -1);
  };
  auto in = [](const std::map<int64_t, WaitingNode>& m, const std::string& id) {
    for (const auto& [seq, w] : m) {
      if (w.request.node_id == id) return true;
    }
    return false;
  };
  auto succeeded = [&](const std::string& id) {
    return std::find(cur.succeeded.begin(), cur.succeeded.end(), id) != cur.succeeded.end();
  };
  for (const std::string& node : job.placed) {
    if (in(st.joined, node)) {
      add(node, "JOINED");
    } else if (in(st.spares, node)) {
      add(node, "SPARE");
    } else if (st.state == JobState::kRunning && cur.assignment &&
               cur.assignment->Find(node) != nullptr) {
      add(node, succeeded(node) ? "SUCCEEDED" : "RUNNING");
    } else {
      add(node, "JOINING");
    }
  }
  if (latest != nullptr) {
    for (const NodeAssignment& a : latest->nodes) {
      if (std::find(job.placed.begin(), job.placed.end(), a.node_id) != job.placed.end()) {
        continue;
      }
      if (job.core->finished()) {
        add(a.node_id, succeeded(a.node_id) ? "SUCCEEDED" : "STOPPED");
      } else {
        add(a.node_id, "LOST");
      }
    }
  }
  return s;
}

}  // namespace elastrun::rendezvous
