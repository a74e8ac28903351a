// JobStatusOf: the public view of one job record.
#include <algorithm>
#include <map>
#include <string>

#include "rendezvous/codec.h"
#include "rendezvous/job_table.h"

namespace elastrun::rendezvous {

namespace {

// Per-node state: placed nodes, then nodes of the latest closed round that
// are no longer placed (lost, or the job finished). `latest` is the latest
// closed round's assignment, if any.
void AddNodes(const JobRecord& job, const RoundAssignment* latest, v1::JobStatus& s) {
  const RendezvousState& st = job.core->state_snapshot();
  const RoundRecord& cur = st.rounds.back();
  auto add = [&](const std::string& node, const std::string& state) {
    v1::JobNode* n = s.add_nodes();
    n->set_node_id(node);
    n->set_state(state);
    const NodeAssignment* a = latest != nullptr ? job.core->assigned(node) : nullptr;
    n->set_group_rank(a != nullptr ? a->group_rank : -1);
  };
  auto in = [](const std::map<int64_t, WaitingNode>& m, const std::string& id) {
    for (const auto& [seq, w] : m) {
      if (w.request.node_id == id) return true;
    }
    return false;
  };
  auto succeeded = [&](const std::string& id) {
    return std::find(cur.succeeded.begin(), cur.succeeded.end(), id) !=
           cur.succeeded.end();
  };
  for (const std::string& node : job.placed) {
    if (in(st.joined, node)) {
      add(node, "JOINED");
    } else if (in(st.spares, node)) {
      add(node, "SPARE");
    } else if (st.state == JobState::kRunning && cur.assignment &&
               job.core->assigned(node) != nullptr) {
      add(node, succeeded(node) ? "SUCCEEDED" : "RUNNING");
    } else {
      add(node, "JOINING");
    }
  }
  if (latest != nullptr) {
    for (const NodeAssignment& a : latest->nodes) {
      if (job.placed.contains(a.node_id)) continue;
      if (job.core->finished()) {
        add(a.node_id, succeeded(a.node_id) ? "SUCCEEDED" : "STOPPED");
      } else {
        add(a.node_id, "LOST");
      }
    }
  }
}

}  // namespace

v1::JobStatus JobStatusOf(const JobRecord& job, bool with_history) {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  *s.mutable_submit_time() = ToProto(job.submit_time);
  if (job.last_progress) *s.mutable_last_progress() = *job.last_progress;
  if (!job.core) {
    s.set_state(v1::JOB_STATE_PENDING);
    s.set_phase(v1::ROUND_PHASE_QUEUED);
    s.set_pending_reason(job.pending_reason);
    return s;
  }
  const RendezvousState& st = job.core->state_snapshot();
  s.set_state(PublicJobState(st));
  s.set_phase(job.core->finished()             ? v1::ROUND_PHASE_DONE
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

  AddNodes(job, latest, s);
  return s;
}

}  // namespace elastrun::rendezvous
