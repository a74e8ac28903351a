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
    AbortLocked("", -1, "the node daemon is stopping");
  }
  // The calls' own deadlines bound this wait.
  absl::MutexLock lock(&in_flight_->mu);
  in_flight_->mu.Await(absl::Condition(
      +[](InFlight* f) ABSL_NO_THREAD_SAFETY_ANALYSIS { return f->count == 0; },
      in_flight_.get()));
}

void BarrierRelay::AbortLocked(const std::string& job_id, int64_t keep,
                               const std::string& why) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((!job_id.empty() && it->first.first != job_id) || it->second.round == keep) {
      ++it;
      continue;
    }
    for (auto& [rank, reply] : it->second.replies) reply(absl::AbortedError(why));
    it = waiting_.erase(it);
  }
}

void BarrierRelay::SetAttempt(const std::string& job_id, int64_t round) {
  absl::MutexLock lock(&mu_);
  AbortLocked(job_id, round, absl::StrCat("attempt ", round, " of job ", job_id, " replaced it"));
}

void BarrierRelay::OnArrival(const std::string& job_id, int64_t round,
                             const BarrierArrival& arrival, Reply reply) {
  absl::MutexLock lock(&mu_);
  const std::pair<std::string, std::string> key(job_id, arrival.name);
  if (auto old = waiting_.find(key); old != waiting_.end() && old->second.round != round) {
    // Workers of another round of the job still wait there: theirs is over.
    for (auto& [rank, r] : old->second.replies) {
      r(absl::AbortedError(absl::StrCat("attempt ", round, " of job ", job_id, " replaced it")));
    }
    waiting_.erase(old);
  }
  Waiting& w = waiting_[key];
  w.round = round;
  w.local_world_size = arrival.local_world_size;
  w.replies[arrival.rank] = std::move(reply);
  if (static_cast<int>(w.replies.size()) < w.local_world_size) return;
  // Every local worker is here: this node arrives for all of them.
  v1::BarrierRequest request;
  request.set_job_id(job_id);
  request.set_round(round);
  request.set_name(arrival.name);
  request.set_participant(node_id_);
  std::map<int, Reply> replies = std::move(w.replies);
  waiting_.erase(key);
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
