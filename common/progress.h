// A worker's progress report as it travels from the worker to its local
// agent: one unix datagram of text, "job=J rank=R step=S name=value ...",
// small enough for any datagram socket. Shared by worker/ (sender) and
// launcher/ (receiver). The job (TORCHELASTIC_RUN_ID) lets a daemon that
// runs several jobs route the datagram; a datagram without it (an older
// worker) is decoded with an empty job.
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
  int rank = 0;
  int64_t step = 0;
  std::map<std::string, double> metrics;
};

// Largest datagram; metrics beyond it are left out by EncodeProgress.
inline constexpr size_t kMaxProgressBytes = 4096;
// At most this many metrics travel; the rest are left out.
inline constexpr size_t kMaxProgressMetrics = 32;

// Whether `job_id` can travel in a datagram: 1-256 of [A-Za-z0-9_.-] (what
// the service's job ids are made of). Senders leave out any other job, so
// the daemon falls back to its one running job.
bool ValidJobTag(absl::string_view job_id);

// Metric names are kept to [A-Za-z0-9_.-] (others become '_'). The job goes
// first, and only when ValidJobTag; the metric "job" cannot travel.
std::string EncodeProgress(const ProgressReport& report);

// InvalidArgument for anything that is not an encoded report.
absl::StatusOr<ProgressReport> DecodeProgress(absl::string_view datagram);

// A worker arriving at a named barrier of its attempt, on the same socket:
// "barrier job=J rank=R local_world_size=L name=NAME" (job as in progress
// reports: left out when not ValidJobTag, empty when absent). The agent answers the
// sender's address with "ok" once every worker of every node of the round
// arrived, or "error MESSAGE".
struct BarrierArrival {
  std::string job_id;  // empty: not given
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
