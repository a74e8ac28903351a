// Rounds: what nodes and users report — joins, exits, cancels — and the
// round check of a barrier.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/job_events.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/rounds.h"

namespace elastrun::rendezvous {
namespace {

// Checks of a JoinRound that need no core.
absl::Status CheckJoin(const v1::JoinRoundRequest& r, const JobRecord& job,
                       const NodeRecord* node) {
  if (node == nullptr || !node->alive()) {
    return absl::NotFoundError(absl::StrFormat(
        "JoinRound: node \"%s\" is not registered or was lost; register again",
        r.node_id()));
  }
  if (!job.placed.contains(r.node_id())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "JoinRound: node \"%s\" is not placed on job \"%s\"", r.node_id(), job.id));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JoinRoundResponse> Rounds::Join(Outbox& out,
                                                   const v1::JoinRoundRequest& r) {
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  const NodeRecord* node = registry_.Find(r.node_id());
  RETURN_IF_ERROR(CheckJoin(r, *job, node));
  const absl::Time now = clock_.Now();
  TickJob(out, *job, now);
  if (job->core->finished()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("JoinRound: job \"%s\" is finished", job->id));
  }
  if (r.round() != job->core->round()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("JoinRound: round %d of job \"%s\" is not its current round %d",
                        r.round(), job->id, job->core->round()));
  }
  if (r.local_world_size() != job->spec.nproc_per_node()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JoinRound.local_world_size: %d, but job \"%s\" has nproc_per_node %d",
        r.local_world_size(), job->id, job->spec.nproc_per_node()));
  }
  v1::JoinRoundResponse resp;
  resp.set_round(job->core->round());
  const RoundAssignment* running = job->core->assignment();
  if (job->core->joined(r.node_id()) ||
      (running != nullptr && job->core->assigned(r.node_id()) != nullptr)) {
    return resp;  // a retry: already in
  }
  if (job->core->spare(r.node_id())) {
    resp.set_spare(true);
    return resp;
  }
  JoinRequest join;
  join.node_id = r.node_id();
  join.addr = node->stored.addr();
  join.master_port = r.master_port();
  join.local_world_size = r.local_world_size();
  join.wanted_group_rank = r.has_group_rank() ? r.group_rank() : -1;
  ASSIGN_OR_RETURN(std::vector<Event> events, job->core->Join(join, now));
  resp.set_spare(job->core->spare(r.node_id()));
  // A bare join (no event) changes no round: every placed node was asked
  // for this one already, so the Reconcile in HandleEvents (a walk over the
  // placed nodes) is skipped; after each of N joins it would make a round
  // O(N^2) under the lock.
  if (!events.empty()) HandleEvents(out, *job, events);
  std::vector<Event> early = CloseIfNobodyElseCanJoin(*job, now);
  if (!early.empty()) HandleEvents(out, *job, early);
  // Written when the join changed more than the open round's member list
  // (closed it, a scale-up, ...). A bare join is not: after a service
  // restart the node re-attaches, is not in the stored round and is asked
  // to join again (Resync), so nothing is lost, and writing the whole job
  // (every round's assignment) after each of N joins was O(N^2): at 1000
  // nodes 60% of the service's CPU for a round, and the lock held meanwhile.
  if (!events.empty() || !early.empty()) jobs_.Persist(out, *job);
  return resp;
}

absl::Status Rounds::ReportExit(Outbox& out, const v1::ReportExitRequest& r) {
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
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
      // The core alone decides whether this costs a restart (cannot_start
      // fails the job at once).
      const int64_t current = job->core->round();
      const bool hung = r.failure().hung();
      ASSIGN_OR_RETURN(events, job->core->ReportFailure(f, now));
      if (f.round >= current) {  // older rounds' reports are stale and ignored
        if (hung) job->hung_round = f.round;
        RecordFailure(*job, f, hung, now);
      }
      break;
    }
    case v1::ReportExitRequest::OUTCOME_NOT_SET:
      return absl::InvalidArgumentError(
          "ReportExit.outcome: set either succeeded or failure");
  }
  HandleEvents(out, *job, events);
  jobs_.Persist(out, *job);
  return absl::OkStatus();
}

void Rounds::Cancel(Outbox& out, JobRecord& job, const std::string& why) {
  const absl::Time now = clock_.Now();
  if (!job.core) {
    // Queued: give it a core only to record the cancellation in its state.
    absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
        RendezvousCore::Create(job.id, RoundConfigFromSpec(job.spec), now);
    CHECK(core.ok()) << core.status();
    job.core = *std::move(core);
  }
  HandleEvents(out, job, job.core->Cancel(why.empty() ? "by the user" : why, now));
  jobs_.Persist(out, job);
}

absl::StatusOr<int> Rounds::BarrierMembers(const v1::BarrierRequest& r) {
  ASSIGN_OR_RETURN(JobRecord * job, jobs_.Find(r.job_id()));
  const RoundAssignment* a = job->core ? job->core->assignment() : nullptr;
  if (a == nullptr || a->round != r.round()) {
    if (job->core && r.round() < job->core->round()) {
      return absl::AbortedError(
          absl::StrFormat("Barrier \"%s\": round %d of job \"%s\" already ended",
                          r.name(), r.round(), job->id));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("Barrier \"%s\": round %d of job \"%s\" is not running", r.name(),
                        r.round(), job->id));
  }
  if (job->core->assigned(r.participant()) == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("Barrier \"%s\": \"%s\" is not a node of round %d of job \"%s\"",
                        r.name(), r.participant(), r.round(), job->id));
  }
  return a->group_world_size;
}

}  // namespace elastrun::rendezvous
