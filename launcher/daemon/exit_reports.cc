#include "launcher/daemon/exit_reports.h"

#include "glog/logging.h"
#include "launcher/daemon/reports.h"

namespace elastrun::launcher {
namespace {
// The lane of the exit reports (a job's lane is named by its id, never
// empty).
constexpr char kReportsLane[] = "";
}  // namespace

ExitReports::ExitReports(RendezvousClient* client, Lanes* lanes,
                         std::function<void()> before_send)
    : client_(client), lanes_(lanes), before_send_(std::move(before_send)) {}

void ExitReports::Add(v1::ReportExitRequest report) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(report));
}

void ExitReports::Send() {
  {
    absl::MutexLock lock(&mu_);
    // Nothing to send (every Add is followed by a Send), or a send queued
    // already: no thread for the lane.
    if (queue_.empty() || send_queued_) return;
    send_queued_ = true;
  }
  lanes_->Post(kReportsLane, [this] { SendNow(); });
}

void ExitReports::SendNow() {
  {
    absl::MutexLock lock(&mu_);
    send_queued_ = false;
    if (queue_.empty()) return;
  }
  if (before_send_) before_send_();
  for (;;) {
    v1::ReportExitRequest r;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return;
      r = queue_.front();
    }
    const absl::Status st = client_->ReportExit(r);
    if (!st.ok() && internal::Retriable(st)) {
      LOG(WARNING) << "ReportExit job " << r.job_id() << " round " << r.round()
                   << " kept for later: " << st;
      return;
    }
    if (!st.ok()) {
      LOG(WARNING) << "ReportExit job " << r.job_id() << " round " << r.round()
                   << " refused: " << st;
    }
    absl::MutexLock lock(&mu_);
    queue_.pop_front();  // only this lane takes reports off the queue
  }
}

std::vector<std::pair<std::string, int64_t>> ExitReports::Rounds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const v1::ReportExitRequest& r : queue_) out.emplace_back(r.job_id(), r.round());
  return out;
}

size_t ExitReports::size() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace elastrun::launcher
