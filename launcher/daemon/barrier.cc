#include "launcher/daemon/barrier.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace elastrun::launcher {

BarrierRelay::BarrierRelay(RendezvousClient* client, std::string node_id,
                           absl::Duration timeout)
    : client_(client), node_id_(std::move(node_id)), timeout_(timeout) {}

BarrierRelay::~BarrierRelay() {
  {
    absl::MutexLock lock(&mu_);
    AbortAllLocked("the node daemon is stopping");
  }
  // The calls' own deadlines bound this wait.
  absl::MutexLock lock(&in_flight_->mu);
  in_flight_->mu.Await(absl::Condition(
      +[](InFlight* f) ABSL_NO_THREAD_SAFETY_ANALYSIS { return f->count == 0; },
      in_flight_.get()));
}

void BarrierRelay::AbortAllLocked(const std::string& why) {
  for (auto& [name, w] : waiting_) {
    for (auto& [rank, reply] : w.replies) reply(absl::AbortedError(why));
  }
  waiting_.clear();
}

void BarrierRelay::SetAttempt(const std::string& job_id, int64_t round) {
  absl::MutexLock lock(&mu_);
  AbortAllLocked(absl::StrCat("attempt ", round, " of job ", job_id, " replaced it"));
  job_id_ = job_id;
  round_ = round;
}

void BarrierRelay::OnArrival(const BarrierArrival& arrival, Reply reply) {
  absl::MutexLock lock(&mu_);
  if (job_id_.empty()) {
    reply(absl::FailedPreconditionError("no attempt is running on this node"));
    return;
  }
  Waiting& w = waiting_[arrival.name];
  w.local_world_size = arrival.local_world_size;
  w.replies[arrival.rank] = std::move(reply);
  if (static_cast<int>(w.replies.size()) < w.local_world_size) return;
  // Every local worker is here: this node arrives for all of them.
  v1::BarrierRequest request;
  request.set_job_id(job_id_);
  request.set_round(round_);
  request.set_name(arrival.name);
  request.set_participant(node_id_);
  std::map<int, Reply> replies = std::move(w.replies);
  waiting_.erase(arrival.name);
  {
    absl::MutexLock count_lock(&in_flight_->mu);
    ++in_flight_->count;
  }
  std::thread([client = client_, timeout = timeout_, flight = in_flight_, request,
               replies = std::move(replies)] {
    const absl::Status st = client->Barrier(request, timeout);
    for (const auto& [rank, r] : replies) r(st);
    absl::MutexLock lock(&flight->mu);
    --flight->count;
  }).detach();
}

}  // namespace elastrun::launcher
