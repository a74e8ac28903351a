// Rounds: placing the jobs the scheduler picks, node loss and resync,
// timers, and the core's events turned into commands. Joins and exit
// reports are in rounds_reports.cc.
#include "rendezvous/rounds.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "rendezvous/codec.h"
#include "rendezvous/commands.h"
#include "rendezvous/job_events.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/placement.h"
#include "rendezvous/scheduler.h"

namespace elastrun::rendezvous {
void Rounds::Restored(Outbox& out) {
  const absl::Time now = clock_.Now();
  for (JobRecord* job : jobs_.by_seq()) {
    for (const std::string& node : job->placed) {
      registry_.Reserve(node, job->id, job->spec.nproc_per_node());
    }
  }
  for (JobRecord* job : jobs_.by_seq()) {
    std::vector<std::string> gone;
    for (const std::string& node : job->placed) {
      const NodeRecord* n = registry_.Find(node);
      if (n == nullptr || !n->alive()) gone.push_back(node);
    }
    for (const std::string& node : gone) {
      Unplace(*job, node);
      const NodeRecord* n = registry_.Find(node);
      RecordEvent(*job, now, kEventNodeLost, job->core ? job->core->round() : 0, node, -1,
                  n != nullptr && !n->stored.lost_reason().empty()
                      ? n->stored.lost_reason()
                      : "lost while the service was down");
      if (job->core) HandleEvents(out, *job, job->core->NodeLost(node, now));
      jobs_.Persist(out, *job);
    }
    const RoundAssignment* running = job->core ? job->core->assignment() : nullptr;
    if (running == nullptr) continue;
    JobRecord::RestartCheck check;
    check.round = running->round;
    for (const NodeAssignment& n : running->nodes) check.waiting.insert(n.node_id);
    job->restart_check = std::move(check);
  }
}

void Rounds::NodeReported(Outbox& out, const std::string& node_id) {
  const NodeRecord* node = registry_.Find(node_id);
  if (node == nullptr) return;
  const std::set<std::string> job_ids = node->jobs;  // a failed job leaves it
  for (const std::string& id : job_ids) {
    absl::StatusOr<JobRecord*> job = jobs_.Find(id);
    if (!job.ok() || !(*job)->restart_check) continue;
    const int64_t round = (*job)->restart_check->round;
    const bool runs =
        std::any_of(node->reported_running.begin(), node->reported_running.end(),
                    [&](const v1::RunningAttempt& a) {
                      return a.job_id() == id && a.round() == round;
                    });
    if (!runs) {
      LOG(WARNING) << "job " << id << ": node " << node_id
                   << " re-registered without round " << round
                   << " after the service restarted";
    }
    NoteRestored(out, **job, node_id, runs);
  }
}

bool Rounds::NoteRestored(Outbox& out, JobRecord& job, const std::string& node_id,
                          bool runs) {
  JobRecord::RestartCheck& check = *job.restart_check;
  const RoundAssignment* cur = job.core ? job.core->assignment() : nullptr;
  if (cur == nullptr || cur->round != check.round) {
    job.restart_check.reset();  // the round ended meanwhile: nothing to check
    return false;
  }
  if (check.waiting.erase(node_id) == 0) return false;
  (runs ? check.running : check.missing).insert(node_id);
  if (!check.waiting.empty()) return false;
  const JobRecord::RestartCheck settled = std::move(check);
  job.restart_check.reset();
  const absl::Time now = clock_.Now();
  // A node that reported success before the restart runs nothing, rightly.
  const bool some_succeeded = !job.core->history().back().succeeded.empty();
  if (settled.running.empty() && !some_succeeded) {
    const std::string why = absl::StrFormat(
        "no daemon runs job %s after the service restarted (round %d on %d nodes; "
        "submit it again to run it)",
        job.id, settled.round, cur->group_world_size);
    LOG(WARNING) << "job " << job.id << " failed: " << why;
    HandleEvents(out, job, job.core->Abandon(why, now));
    jobs_.Persist(out, job);
    return true;
  }
  // Some still run it: the others are lost for the job and the round
  // re-forms (they are asked to join the next one).
  for (const std::string& node : settled.missing) {
    HandleEvents(out, job, job.core->NodeLost(node, now));
  }
  jobs_.Persist(out, job);
  return false;
}

void Rounds::Place(JobRecord& job, const std::vector<std::string>& nodes) {
  for (const std::string& node : nodes) {
    registry_.Reserve(node, job.id, job.spec.nproc_per_node());
    job.placed.push_back(node);
  }
}

void Rounds::Unplace(JobRecord& job, const std::string& node_id) {
  job.placed.erase(node_id);
  job.asked.erase(node_id);
  registry_.Release(node_id, job.id, job.spec.nproc_per_node());
}

void Rounds::Schedule(Outbox& out) {
  const absl::Time now = clock_.Now();
  ScheduleJobs(registry_, jobs_,
               [&](JobRecord& job, const std::vector<std::string>& nodes, bool first) {
                 if (first) {
                   absl::StatusOr<std::unique_ptr<RendezvousCore>> core =
                       RendezvousCore::Create(job.id, RoundConfigFromSpec(job.spec), now);
                   CHECK(core.ok())
                       << "a validated spec gave a bad RoundConfig: " << core.status();
                   job.core = *std::move(core);
                   RecordEvent(job, now, kEventRoundOpened, 0, "", -1,
                               absl::StrFormat("placed on %d nodes", nodes.size()));
                   LOG(INFO) << "job " << job.id << " placed on " << nodes.size()
                             << " nodes";
                 }
                 Place(job, nodes);
                 Reconcile(out, job);
                 jobs_.Persist(out, job);
               });
}

void Rounds::NodeLost(Outbox& out, const std::string& node_id) {
  NodeRecord* node = registry_.Find(node_id);
  if (node == nullptr) return;
  const absl::Time now = clock_.Now();
  const std::set<std::string> job_ids = node->jobs;  // Unplace edits node->jobs
  std::vector<JobRecord*> jobs;
  for (const std::string& id : job_ids) {
    absl::StatusOr<JobRecord*> job = jobs_.Find(id);
    CHECK(job.ok()) << "node " << node_id << " holds an unknown job: " << job.status();
    jobs.push_back(*job);
  }
  for (JobRecord* job : jobs) {
    Unplace(*job, node_id);
    RecordEvent(*job, now, kEventNodeLost, job->core ? job->core->round() : 0, node_id, -1,
                node->stored.lost_reason());
    if (job->restart_check && NoteRestored(out, *job, node_id, /*runs=*/false)) continue;
    if (job->core) HandleEvents(out, *job, job->core->NodeLost(node_id, now));
    jobs_.Persist(out, *job);
  }
  Schedule(out);
  // A node lost while the others had all joined: nobody else is coming
  // (Schedule placed any free node first).
  for (JobRecord* job : jobs) {
    std::vector<Event> early = CloseIfNobodyElseCanJoin(*job, now);
    if (early.empty()) continue;
    HandleEvents(out, *job, early);
    jobs_.Persist(out, *job);
  }
}

void Rounds::StopStale(Outbox& out, const NodeRecord& node) {
  const std::string& node_id = node.stored.node_id();
  for (const v1::RunningAttempt& a : node.reported_running) {
    absl::StatusOr<JobRecord*> found = jobs_.Find(a.job_id());
    const JobRecord* job = found.ok() ? *found : nullptr;
    if (job == nullptr) {
      // Not adopted: with its spec, ranks and round history gone (a service
      // restarted on an empty or other state dir), the service could not
      // re-form, restart or report it.
      LOG(WARNING) << "node " << node_id << " runs job " << a.job_id() << " round "
                   << a.round() << ", which this service does not know (its state was "
                   << "lost or is elsewhere): telling the node to stop it";
      streams_.Send(
          out, node_id,
          EndJobCommand(a.job_id(), v1::JOB_STATE_UNSPECIFIED,
                        "the rendezvous service does not know this job (its "
                        "state was lost or is elsewhere); it cannot be adopted"));
      continue;
    }
    if (!job->core || job->core->finished() || !node.jobs.count(a.job_id())) {
      const v1::JobState state = job->core ? PublicJobState(job->core->state_snapshot())
                                           : v1::JOB_STATE_UNSPECIFIED;
      const std::string why = job->core && job->core->finished()
                                  ? "the job is finished: " + job->core->finish_reason()
                                  : "the node is no longer part of the job";
      LOG(INFO) << "node " << node_id << " runs job " << a.job_id() << " round "
                << a.round() << ": telling it to stop (" << why << ")";
      streams_.Send(out, node_id, EndJobCommand(a.job_id(), state, why));
      continue;
    }
    const RoundAssignment* cur = job->core->assignment();
    if (cur != nullptr && cur->round == a.round() &&
        job->core->assigned(node_id) != nullptr) {
      continue;  // Still the right attempt: its workers go on.
    }
    if (a.ended()) continue;  // nothing runs; its report is stale and refused
    LOG(INFO) << "node " << node_id << " runs job " << a.job_id() << " round "
              << a.round() << ", not its current round " << job->core->round()
              << ": stopping it";
    streams_.Send(
        out, node_id,
        StopCommand(a.job_id(), a.round(), "stale: the job moved on to another round"));
  }
}

void Rounds::Resync(Outbox& out, const std::string& node_id) {
  const NodeRecord* node = registry_.Find(node_id);
  if (node == nullptr) return;
  StopStale(out, *node);
  std::vector<JobRecord*> jobs;
  for (const std::string& id : node->jobs) {
    absl::StatusOr<JobRecord*> job = jobs_.Find(id);
    CHECK(job.ok()) << "node " << node_id << " holds an unknown job: " << job.status();
    jobs.push_back(*job);
  }
  for (JobRecord* job : jobs) {
    if (!job->core || job->core->finished()) continue;
    const RoundAssignment* cur = job->core->assignment();
    const NodeAssignment* in = cur != nullptr ? job->core->assigned(node_id) : nullptr;
    if (in != nullptr)
      streams_.Send(out, node_id, ForNode(StartCommand(*job, *cur), *in));
  }
  for (JobRecord* job : jobs) {
    job->asked.erase(node_id);
    Reconcile(out, *job);
  }
}

void Rounds::Tick(Outbox& out, absl::Time now) {
  for (JobRecord* job : jobs_.by_seq()) TickJob(out, *job, now);
}

std::optional<absl::Time> Rounds::NextDeadline() const {
  std::optional<absl::Time> next;
  for (const JobRecord* job : jobs_.by_seq()) {
    if (!job->core) continue;
    std::optional<absl::Time> d = job->core->NextDeadline();
    if (d && (!next || *d < *next)) next = d;
  }
  return next;
}

void Rounds::TickJob(Outbox& out, JobRecord& job, absl::Time now) {
  if (!job.core || job.core->finished()) return;
  std::optional<absl::Time> d = job.core->NextDeadline();
  if (!d || now < *d) return;
  HandleEvents(out, job, job.core->Tick(now));
  jobs_.Persist(out, job);
}

void Rounds::Reconcile(Outbox& out, JobRecord& job) {
  if (!job.core || job.core->finished()) return;
  const RoundAssignment* running = job.core->assignment();
  const int64_t round = job.core->round();
  for (const std::string& node : job.placed) {
    // Cheapest test first: Reconcile runs after every event of a job
    // (a round opened or closed, a node lost or placed), over every placed
    // node; a node asked for this round already is passed at once.
    auto asked = job.asked.find(node);
    if (asked != job.asked.end() && asked->second == round) continue;
    if (job.core->joined(node) || job.core->spare(node)) continue;
    if (running != nullptr && job.core->assigned(node) != nullptr) continue;
    job.asked[node] = round;
    streams_.Send(out, node, JoinCommand(job));
  }
}

void Rounds::HandleEvents(Outbox& out, JobRecord& job, const std::vector<Event>& events) {
  for (const Event& e : events) {
    switch (e.kind) {
      case Event::Kind::kRoundClosed: {
        LOG(INFO) << "job " << job.id << " round " << e.round
                  << " closed: " << e.assignment->group_world_size
                  << " nodes, world size " << e.assignment->world_size;
        const RoundRecord& r = job.core->history().at(e.round);
        const absl::Time closed = r.closed_time.value_or(clock_.Now());
        metrics_.RoundClosed(closed - r.opened_time);
        RecordEvent(job, closed, kEventRoundClosed, e.round, "", -1,
                    absl::StrFormat("%d nodes, world size %d",
                                    e.assignment->group_world_size,
                                    e.assignment->world_size));
        const v1::Command start = StartCommand(job, *e.assignment);
        for (const NodeAssignment& n : e.assignment->nodes) {
          streams_.Send(out, n.node_id, ForNode(start, n));
        }
        break;
      }
      case Event::Kind::kRoundEnded:
        RoundEnded(out, job, e);
        break;
      case Event::Kind::kJobFinished:
        JobFinished(out, job, e);
        break;
    }
  }
  if (job.core->finished()) {
    Schedule(out);  // its slots are free
  } else {
    Reconcile(out, job);
  }
}

void Rounds::RoundEnded(Outbox& out, JobRecord& job, const Event& e) {
  const std::string why(RoundEndName(e.end));
  LOG(INFO) << "job " << job.id << " round " << e.round << " ended: " << why;
  const RoundRecord& r = job.core->history().at(e.round);
  if (!job.core->finished()) {
    // The job goes on in round e.round + 1.
    const bool hung = e.end == RoundEnd::kFailure && job.hung_round == e.round;
    metrics_.Restarted(e.end, hung);
    const absl::Time ended = r.ended_time.value_or(clock_.Now());
    std::string cause = hung ? "hang" : why;
    if (r.counted_as_restart) {
      absl::StrAppend(&cause, absl::StrFormat(" (restart %d of %d)",
                                              job.core->restart_count(),
                                              job.spec.max_restarts()));
    }
    RecordEvent(job, ended, kEventRestart, e.round, "", -1, cause);
    RecordEvent(job, ended, kEventRoundOpened, e.round + 1, "", -1, "");
  }
  if (r.assignment) {
    for (const NodeAssignment& n : r.assignment->nodes) {
      streams_.Send(out, n.node_id, StopCommand(job.id, e.round, why));
    }
  }
  barriers_.AbortJob(out, job.id,
                     absl::AbortedError(absl::StrFormat(
                         "round %d of job \"%s\" ended: %s", e.round, job.id, why)));
}

void Rounds::JobFinished(Outbox& out, JobRecord& job, const Event& e) {
  LOG(INFO) << "job " << job.id << " finished: " << JobStateName(e.final_state) << ": "
            << e.reason;
  RecordEvent(job, clock_.Now(), kEventJobFinished, e.round, "", -1,
              absl::StrCat(JobStateName(e.final_state), ": ", e.reason));
  const v1::JobState state = PublicJobState(job.core->state_snapshot());
  for (const std::string& node : job.placed) {
    streams_.Send(out, node, EndJobCommand(job.id, state, e.reason));
  }
  // All at once (one by one, each removal would walk the list).
  for (const std::string& node : job.placed) {
    registry_.Release(node, job.id, job.spec.nproc_per_node());
  }
  job.placed.clear();
  job.asked.clear();
  barriers_.AbortJob(
      out, job.id,
      absl::AbortedError(absl::StrFormat("job \"%s\" finished: %s", job.id, e.reason)));
}

// Closes the job's JOINING round now when waiting out the last call cannot
// bring anyone else in: it is a re-formed round (round > 0; round 0 keeps
// the whole last call for daemons still registering), at least min_nodes
// joined, and every node placed on the job joined. A node that registers
// later still gets in, through a scale-up round. Without this, a lost node
// cost lease + last_call_timeout (3 s + 1 s by default) before the
// survivors restarted. Returns the core's events; empty when nothing
// changed.
std::vector<Event> Rounds::CloseIfNobodyElseCanJoin(JobRecord& job, absl::Time now) {
  RendezvousCore* core = job.core.get();
  if (core == nullptr || core->finished() || core->state() != JobState::kJoining ||
      core->round() == 0) {
    return {};
  }
  const RendezvousState& st = core->state_snapshot();
  if (!st.min_reached_time || st.joined.size() != job.placed.size()) return {};
  absl::flat_hash_set<std::string> joined;
  for (const auto& [seq, w] : st.joined) joined.insert(w.request.node_id);
  for (const std::string& node : job.placed) {
    if (!joined.contains(node)) return {};
  }
  absl::StatusOr<std::vector<Event>> events = core->CloseNow(now);
  if (!events.ok()) {
    LOG(ERROR) << "job " << job.id << ": cannot close round " << core->round()
               << " early: " << events.status();
    return {};
  }
  return *std::move(events);
}

}  // namespace elastrun::rendezvous
