// Rounds and membership: places jobs on the nodes the scheduler picks
// (scheduler.h), drives each placed job's RendezvousCore with joins, exit
// reports, node losses and timers, and turns the core's events into
// commands to nodes (join, start, stop, end).
#ifndef ELASTRUN_RENDEZVOUS_ROUNDS_H_
#define ELASTRUN_RENDEZVOUS_ROUNDS_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/barriers.h"
#include "rendezvous/job_metrics.h"
#include "rendezvous/job_table.h"
#include "rendezvous/node_streams.h"
#include "rendezvous/outbox.h"
#include "rendezvous/registry.h"

namespace elastrun::rendezvous {

// Not thread-safe: the Coordinator serializes calls under its mutex. Holds
// references to the other parts, which must outlive it. Job records are
// written through `jobs` whenever a round changes; nothing is sent here:
// commands go into the caller's Outbox. Each job's timeline (job_events.h)
// and the service's round metrics are recorded here as rounds change.
class Rounds {
 public:
  Rounds(Clock& clock, NodeRegistry& registry, JobTable& jobs, NodeStreams& streams,
         BarrierTable& barriers, ServiceMetrics& metrics)
      : clock_(clock),
        registry_(registry),
        jobs_(jobs),
        streams_(streams),
        barriers_(barriers),
        metrics_(metrics) {}

  // After a reload: reserves the slots of every placed node, and a node
  // that was lost while placed (the service died before it could react) is
  // lost for its jobs now. Every RUNNING job then waits for its round's
  // daemons to say whether they still run it (NodeReported, NodeLost).
  void Restored(Outbox& out);

  // The node (re)registered; registry's reported_running is what its
  // daemon runs. After a service restart, a RUNNING job learns from its
  // round's nodes whether they still run the round: once every one
  // re-registered or was lost, nodes that do not run it are lost for the
  // job (the round re-forms), and a job that no daemon runs any more fails
  // ("no daemon runs job J after the service restarted"), freeing its
  // slots. Its workers' outcome is unknown (they may have ended while the
  // state could not be written): starting it again unasked could repeat
  // finished work.
  void NodeReported(Outbox& out, const std::string& node_id);

  // Places the jobs ScheduleJobs (scheduler.h) picks: a queued job's first
  // round opens on its nodes, a placed one grows; their nodes are asked to
  // join and the jobs written.
  void Schedule(Outbox& out);

  // The node was marked lost in the registry: every job it was placed on
  // loses it (a running round ends, a joining one shrinks), then free nodes
  // are placed and rounds that nobody else can join close.
  void NodeLost(Outbox& out, const std::string& node_id);

  // The node (re)attached its Watch stream: stops attempts it runs that the
  // service no longer wants, re-sends its current StartAttempts, and asks
  // it to join the open rounds it is not in.
  void Resync(Outbox& out, const std::string& node_id);

  // Fires every job's timers due at `now` (last calls, join timeouts).
  void Tick(Outbox& out, absl::Time now);
  // The earliest pending round timer, if any.
  std::optional<absl::Time> NextDeadline() const;

  // A node joins the job's current round. NotFound (unknown job, node not
  // registered or lost), FailedPrecondition (node not placed on the job,
  // job finished, not the current round), InvalidArgument (local world
  // size differs from nproc_per_node), or the core's errors.
  absl::StatusOr<v1::JoinRoundResponse> Join(Outbox& out, const v1::JoinRoundRequest& r);
  // A node's workers of a round exited. InvalidArgument for a bad report,
  // FailedPrecondition for a queued job, or the core's errors.
  absl::Status ReportExit(Outbox& out, const v1::ReportExitRequest& r);
  // Cancels the job (a queued one too), stopping its nodes.
  void Cancel(Outbox& out, JobRecord& job, const std::string& why);

  // The number of nodes that meet at a barrier of `r`'s round. ABORTED for
  // a round that already ended, FailedPrecondition for one not running,
  // NotFound for a participant not in it or an unknown job.
  absl::StatusOr<int> BarrierMembers(const v1::BarrierRequest& r);

 private:
  void HandleEvents(Outbox& out, JobRecord& job, const std::vector<Event>& events);
  void RoundEnded(Outbox& out, JobRecord& job, const Event& e);
  void JobFinished(Outbox& out, JobRecord& job, const Event& e);
  // Asks the job's placed nodes that are not in the open round to join it.
  void Reconcile(Outbox& out, JobRecord& job);
  void TickJob(Outbox& out, JobRecord& job, absl::Time now);
  void Place(JobRecord& job, const std::vector<std::string>& nodes);
  void Unplace(JobRecord& job, const std::string& node_id);
  // Closes a re-formed round at once when every placed node joined it.
  std::vector<Event> CloseIfNobodyElseCanJoin(JobRecord& job, absl::Time now);
  // Stop/end commands for the attempts a re-attaching node says it runs.
  void StopStale(Outbox& out, const NodeRecord& node);
  // Records what `node_id` says of the job's restored round (`runs`), then
  // settles the check when every node was heard from. True when that
  // failed the job.
  bool NoteRestored(Outbox& out, JobRecord& job, const std::string& node_id, bool runs);

  Clock& clock_;
  NodeRegistry& registry_;
  JobTable& jobs_;
  NodeStreams& streams_;
  BarrierTable& barriers_;
  ServiceMetrics& metrics_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_ROUNDS_H_
