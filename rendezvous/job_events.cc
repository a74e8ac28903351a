#include "rendezvous/job_events.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

constexpr size_t kMaxMessage = 1024;

std::string FirstLine(const std::string& text) {
  return text.substr(0, std::min(text.find('\n'), kMaxMessage));
}

}  // namespace

void RecordEvent(JobRecord& job, absl::Time time, const std::string& kind, int64_t round,
                 const std::string& node_id, int rank, const std::string& message) {
  v1::JobEvent e;
  *e.mutable_time() = ToProto(time);
  e.set_kind(kind);
  e.set_round(round);
  e.set_node_id(node_id);
  e.set_rank(rank);
  e.set_message(message.substr(0, kMaxMessage));
  job.events.push_back(std::move(e));
  while (job.events.size() > kMaxJobEvents) job.events.pop_front();
}

void RecordFailure(JobRecord& job, const Failure& f, bool hung, absl::Time now) {
  if (hung) {
    // The daemon's "rank R hung at step S (no progress for T)" alone: the
    // signal that then ended the worker is the launcher's own stop, and
    // "killed by signal 15" first would read as another cause.
    RecordEvent(job, now, kEventHang, f.round, f.node_id, f.rank,
                f.message.empty() ? std::string("hung") : FirstLine(f.message));
    return;
  }
  std::string what = f.signal != 0 ? absl::StrFormat("killed by signal %d", f.signal)
                                   : absl::StrFormat("exit code %d", f.exit_code);
  if (f.cannot_start) what = "cannot start: " + what;
  if (!f.message.empty()) absl::StrAppend(&what, ": ", FirstLine(f.message));
  RecordEvent(job, now, kEventWorkerFailed, f.round, f.node_id, f.rank, what);
}

}  // namespace elastrun::rendezvous
