// Named barriers of running rounds: the nodes of a round meet at a name, and
// everyone waiting is released when the last one arrives.
#ifndef ELASTRUN_RENDEZVOUS_BARRIERS_H_
#define ELASTRUN_RENDEZVOUS_BARRIERS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rendezvous/outbox.h"

namespace elastrun::rendezvous {

// Not thread-safe: the Coordinator serializes calls under its mutex. Every
// `done` runs exactly once, later, from the caller's Outbox (never here).
// A job's barriers belong to one round: the first arrival for a newer round
// forgets the older round's.
class BarrierTable {
 public:
  static constexpr size_t kMaxName = 256;
  static constexpr size_t kMaxPerRound = 1024;

  // OK, or InvalidArgument for a name that is empty or too long.
  static absl::Status CheckName(const std::string& name);

  // `participant` arrives at barrier `name` of `round` of `job_id`, whose
  // round has `members` nodes (the caller checked that the participant is
  // one of them). Returns a waiter id when it must wait (`done` is kept),
  // or 0 when the barrier is complete: `done` and every waiter's go into
  // `out` with OK. Errors, `done` untouched: InvalidArgument for a bad
  // name, ResourceExhausted past kMaxPerRound barriers in a round.
  absl::StatusOr<uint64_t> Arrive(Outbox& out, const std::string& job_id, int64_t round,
                                  const std::string& name, const std::string& participant,
                                  int members, BarrierDone& done);
  // The caller gave up waiting: returns the waiter's `done` (empty if it
  // already ran). The arrival itself stays counted.
  BarrierDone Abandon(uint64_t waiter_id);
  // Fails every waiter of the job with `why` and forgets its barriers.
  void AbortJob(Outbox& out, const std::string& job_id, const absl::Status& why);
  // Fails every waiter with `why`.
  void AbortAll(Outbox& out, const absl::Status& why);

  size_t waiting() const { return waiters_.size(); }

 private:
  struct Barrier {
    std::set<std::string> arrived;
    bool complete = false;
    std::vector<uint64_t> waiters;
  };
  struct JobBarriers {
    int64_t round = -1;
    std::map<std::string, Barrier> by_name;
  };
  void Release(Outbox& out, const std::vector<uint64_t>& ids, const absl::Status& status);

  std::map<std::string, JobBarriers> jobs_;
  // Waiters by id: (job id, done).
  std::map<uint64_t, std::pair<std::string, BarrierDone>> waiters_;
  uint64_t next_waiter_ = 1;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_BARRIERS_H_
