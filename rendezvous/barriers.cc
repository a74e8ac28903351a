#include "rendezvous/barriers.h"

#include "absl/strings/str_format.h"

namespace elastrun::rendezvous {

absl::Status BarrierTable::CheckName(const std::string& name) {
  if (name.empty() || name.size() > kMaxName) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Barrier.name: must have 1..%d characters", kMaxName));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BarrierTable::Arrive(Outbox& out, const std::string& job_id,
                                              int64_t round, const std::string& name,
                                              const std::string& participant, int members,
                                              BarrierDone& done) {
  if (absl::Status st = CheckName(name); !st.ok()) return st;
  JobBarriers& job = jobs_[job_id];
  if (job.round != round) {
    // Waiters of an older round were aborted when it ended.
    job.by_name.clear();
    job.round = round;
  }
  if (!job.by_name.count(name) && job.by_name.size() >= kMaxPerRound) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "Barrier \"%s\": at most %d barriers per round", name, kMaxPerRound));
  }
  Barrier& b = job.by_name[name];
  b.arrived.insert(participant);
  if (!b.complete && static_cast<int>(b.arrived.size()) < members) {
    const uint64_t id = next_waiter_++;
    waiters_[id] = {job_id, std::move(done)};
    b.waiters.push_back(id);
    return id;
  }
  b.complete = true;
  Release(out, b.waiters, absl::OkStatus());
  b.waiters.clear();
  out.dones.emplace_back(std::move(done), absl::OkStatus());
  return 0;
}

BarrierDone BarrierTable::Abandon(uint64_t waiter_id) {
  auto it = waiters_.find(waiter_id);
  if (it == waiters_.end()) return nullptr;
  BarrierDone done = std::move(it->second.second);
  waiters_.erase(it);
  return done;
}

void BarrierTable::Release(Outbox& out, const std::vector<uint64_t>& ids,
                           const absl::Status& status) {
  for (uint64_t id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;  // abandoned
    out.dones.emplace_back(std::move(it->second.second), status);
    waiters_.erase(it);
  }
}

void BarrierTable::AbortJob(Outbox& out, const std::string& job_id,
                            const absl::Status& why) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  for (auto& [name, b] : it->second.by_name) Release(out, b.waiters, why);
  jobs_.erase(it);
}

void BarrierTable::AbortAll(Outbox& out, const absl::Status& why) {
  for (auto& [id, waiter] : waiters_)
    out.dones.emplace_back(std::move(waiter.second), why);
  waiters_.clear();
  jobs_.clear();
}

}  // namespace elastrun::rendezvous
