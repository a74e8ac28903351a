// Progress heartbeats from a worker to its launcher or node daemon, which
// relays the newest to the service (`elastrun status` shows it).
#ifndef ELASTRUN_WORKER_PROGRESS_H_
#define ELASTRUN_WORKER_PROGRESS_H_

#include <cstdint>
#include <map>
#include <string>

namespace elastrun::worker {

// Sends {rank, step, metrics} to the agent socket named by
// ELASTRUN_AGENT_SOCKET. Never blocks and never fails the caller: without
// an agent (or when its socket is full) the report is dropped. Cheap enough
// to call every step; the agent keeps only the newest. Thread-safe.
void ReportProgress(int64_t step, const std::map<std::string, double>& metrics = {});

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_PROGRESS_H_
