// A worker's progress report as it travels from the worker to its local
// agent: one unix datagram of text, "rank=R step=S name=value ...", small
// enough for any datagram socket. Shared by worker/ (sender) and launcher/
// (receiver).
#ifndef ELASTRUN_COMMON_PROGRESS_H_
#define ELASTRUN_COMMON_PROGRESS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun {

struct ProgressReport {
  int rank = 0;
  int64_t step = 0;
  std::map<std::string, double> metrics;
};

// Largest datagram; metrics beyond it are left out by EncodeProgress.
inline constexpr size_t kMaxProgressBytes = 4096;
// At most this many metrics travel; the rest are left out.
inline constexpr size_t kMaxProgressMetrics = 32;

// Metric names are kept to [A-Za-z0-9_.-] (others become '_').
std::string EncodeProgress(const ProgressReport& report);

// InvalidArgument for anything that is not an encoded report.
absl::StatusOr<ProgressReport> DecodeProgress(absl::string_view datagram);

// A worker arriving at a named barrier of its attempt, on the same socket:
// "barrier rank=R local_world_size=L name=NAME". The agent answers the
// sender's address with "ok" once every worker of every node of the round
// arrived, or "error MESSAGE".
struct BarrierArrival {
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
