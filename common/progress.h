// A worker's progress report as it travels from the worker to its local
// agent: one unix datagram of text, "job=J rank=R step=S name=value ...",
// small enough for any datagram socket. Shared by worker/ (sender) and
// launcher/ (receiver). The job (TORCHELASTIC_RUN_ID) is informational: the
// agent takes a datagram as the job, rank and node of the worker whose
// "secret=X" (its ELASTRUN_AGENT_SECRET) it carries, and drops datagrams whose
// secret belongs to no live worker, so a process that is not a worker can
// neither post progress nor release a barrier, nor one worker pass for
// another job's, whatever the socket's file permissions.
#ifndef ELASTRUN_COMMON_PROGRESS_H_
#define ELASTRUN_COMMON_PROGRESS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun {

struct ProgressReport {
  // The sender's job; empty: not given (see ValidJobTag).
  std::string job_id;
  // The sender's ELASTRUN_AGENT_SECRET; empty: not given (see ValidSecret).
  std::string secret;
  int rank = 0;
  // The newest training step; -1 in a beat sent before any step.
  int64_t step = 0;
  // > 0: a beat: the worker is busy between steps (reading or hashing a
  // checkpoint, evaluating) and says it is alive; a new beat counts as
  // progress for hang detection without being a step. 0: none.
  int64_t beat = 0;
  std::map<std::string, double> metrics;
};

// Largest datagram; metrics beyond it are left out by EncodeProgress.
inline constexpr size_t kMaxProgressBytes = 4096;
// At most this many metrics travel; the rest are left out.
inline constexpr size_t kMaxProgressMetrics = 32;

// Whether `job_id` can travel in a datagram: 1-256 of [A-Za-z0-9_.@-] (what
// the service's job ids and run ids are made of). Senders leave out any
// other job. Informational: the agent takes a datagram as the job of the
// worker whose secret it carries.
bool ValidJobTag(absl::string_view job_id);

// Whether `secret` can travel: 1-64 lowercase hex digits. Senders leave out
// any other (the agent then drops the datagram).
bool ValidSecret(absl::string_view secret);

// A fresh secret for one worker's activation: 128 random bits as 32
// lowercase hex digits (from getrandom; /dev/urandom as a fallback).
std::string NewAgentSecret();

// Metric names are kept to [A-Za-z0-9_.-] (others become '_'). The job goes
// first, and only when ValidJobTag; the metric "job" cannot travel.
std::string EncodeProgress(const ProgressReport& report);

// InvalidArgument for anything that is not an encoded report.
absl::StatusOr<ProgressReport> DecodeProgress(absl::string_view datagram);

// A worker arriving at a named barrier of its attempt, on the same socket:
// "barrier job=J secret=X rank=R local_world_size=L name=NAME" (job and
// secret as in progress reports: left out when not valid, empty when absent). The agent
// answers the sender's address with "ok" once every worker of every node of the round
// arrived, or "error MESSAGE".
struct BarrierArrival {
  std::string job_id;  // empty: not given
  std::string secret;  // empty: not given
  int rank = 0;
  int local_world_size = 1;
  std::string name;  // 1-256 of [A-Za-z0-9_.-]
};
std::string EncodeBarrier(const BarrierArrival& arrival);
bool IsBarrierDatagram(absl::string_view datagram);
absl::StatusOr<BarrierArrival> DecodeBarrier(absl::string_view datagram);
// Checks a barrier name (what EncodeBarrier needs), naming the problem.
absl::Status ValidateBarrierName(absl::string_view name);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_PROGRESS_H_
