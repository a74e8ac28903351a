// A job's timeline for `elastrun events`: what happened to it and when
// (round opened and closed, node lost, worker failed, hang, restart, job
// finished), recorded by Rounds as it drives the job and kept, bounded,
// with the job's record.
#ifndef ELASTRUN_RENDEZVOUS_JOB_EVENTS_H_
#define ELASTRUN_RENDEZVOUS_JOB_EVENTS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "rendezvous/job_table.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {

// The kinds of JobEvent (proto/elastrun/v1/jobs.proto says what each holds).
inline constexpr char kEventSubmitted[] = "submitted";
inline constexpr char kEventRoundOpened[] = "round_opened";
inline constexpr char kEventRoundClosed[] = "round_closed";
inline constexpr char kEventNodeLost[] = "node_lost";
inline constexpr char kEventWorkerFailed[] = "worker_failed";
// A worker declared hung by the hang detector. Recorded for a failure that
// says so (WorkerFailure.hung, once the contract has it); nothing else maps
// to it: a message that happens to read "hung" is a plain failure.
inline constexpr char kEventHang[] = "hang";
inline constexpr char kEventRestart[] = "restart";
inline constexpr char kEventJobFinished[] = "job_finished";

// Events kept per job; the oldest are dropped beyond it, so a job that
// restarts for days keeps a bounded record (and a bounded row to write).
inline constexpr size_t kMaxJobEvents = 1000;

// Appends an event (rank -1: none applies), dropping the oldest beyond
// kMaxJobEvents. Messages are cut to 1 KiB.
void RecordEvent(JobRecord& job, absl::Time time, const std::string& kind, int64_t round,
                 const std::string& node_id, int rank, const std::string& message);

// A worker's failure: "worker_failed" with its exit code or signal and the
// first line of its message; or, when `hung`, "hang" with the first line of
// the message alone (the daemon's "rank R hung at step S ...").
void RecordFailure(JobRecord& job, const Failure& failure, bool hung, absl::Time now);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_JOB_EVENTS_H_
