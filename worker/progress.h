// Progress heartbeats from a worker to its launcher or node daemon, which
// relays the newest to the service (`elastrun status` shows it).
#ifndef ELASTRUN_WORKER_PROGRESS_H_
#define ELASTRUN_WORKER_PROGRESS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace elastrun::worker {

// Sends {rank, step, metrics} to the agent socket named by
// ELASTRUN_AGENT_SOCKET. Never blocks and never fails the caller: without
// an agent (or when its socket is full) the report is dropped. Cheap enough
// to call every step; the agent keeps only the newest. Thread-safe.
void ReportProgress(int64_t step, const std::map<std::string, double>& metrics = {});

// Tells the agent that this worker is alive while it works between steps
// (reads or hashes a checkpoint, evaluates), so hang detection neither
// fires on a long resume or evaluation nor counts it as a step: sends a
// beat (common/progress.h) with the newest step reported (-1: none yet).
// Call it as often as convenient: at most one datagram per 250 ms leaves
// (within that time after any report, none). Never blocks, never fails.
// Thread-safe.
void ReportBusy();

// Waits until every worker of every node of this attempt has called
// AgentBarrier(name): the local workers meet at their daemon, which meets
// the other nodes through the service. Needs a node daemon (elastrund;
// ELASTRUN_AGENT_SOCKET set). Errors: FailedPrecondition without an agent,
// InvalidArgument for a bad name, DeadlineExceeded after `timeout`, Aborted
// when the round ended first (a node failed or was lost).
absl::Status AgentBarrier(const std::string& name,
                          absl::Duration timeout = absl::Minutes(30));

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_PROGRESS_H_
