// Scheduling: the order in which jobs get nodes, separate from what
// placing them does (rounds.h opens the round, asks the nodes to join and
// writes the job). Queued jobs are placed in submission order with
// backfill: one that cannot be placed now does not stop the ones behind
// it, but holds the slots it waits for (HoldSlotsFor), so a stream of
// smaller jobs cannot take them as they free up and starve it; a job
// waiting for nodes that are not registered holds nothing and so blocks no
// one. Then placed jobs below their max_nodes grow (a lost node replaced,
// a scale-up), never into held slots. Every choice is within the job's
// pool (placement.h).
#ifndef ELASTRUN_RENDEZVOUS_SCHEDULER_H_
#define ELASTRUN_RENDEZVOUS_SCHEDULER_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "rendezvous/job_table.h"
#include "rendezvous/registry.h"

namespace elastrun::rendezvous {

// Places `job` on `nodes`: `first` when the job was queued (its first
// round opens), else it grows. Must reserve the nodes' slots in the
// registry before it returns: the jobs after it are placed by what is left.
using PlaceJob =
    absl::FunctionRef<void(JobRecord& job, const std::vector<std::string>& nodes, bool first)>;

// One pass over every job (`jobs.by_seq()`): calls `place` for each job
// that gets nodes, and sets each still-queued job's pending_reason (the
// same text for jobs of one shape behind it, which are not weighed again:
// a queue of thousands made every submit and every event O(queue x
// nodes)). A job is queued while it has no core.
void ScheduleJobs(const NodeRegistry& registry, JobTable& jobs, PlaceJob place);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_SCHEDULER_H_
