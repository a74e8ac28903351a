// Named barriers for workers, relayed by their node daemon: the local
// workers of an attempt meet here (they arrive through the agent's socket,
// routed to their attempt by the Daemon), then this node meets the other
// nodes of the round through the service's Barrier RPC, and every local
// worker gets the answer. Attempts of several jobs meet independently.
#ifndef ELASTRUN_LAUNCHER_DAEMON_BARRIER_H_
#define ELASTRUN_LAUNCHER_DAEMON_BARRIER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/progress.h"
#include "launcher/daemon/client.h"

namespace elastrun::launcher {

// Thread-safe. The destructor waits for the calls in flight.
class BarrierRelay {
 public:
  using Reply = std::function<void(const absl::Status&)>;
  // `client` is not owned and must outlive the relay.
  BarrierRelay(RendezvousClient* client, std::string node_id,
               absl::Duration timeout = absl::Minutes(30));
  ~BarrierRelay();

  // Attempt `round` of `job_id` starts: the job's arrivals of other rounds
  // still waiting are answered Aborted. Other jobs' are left alone.
  void SetAttempt(const std::string& job_id, int64_t round);

  // A local worker of attempt (job_id, round) arrived (the Daemon's
  // on_barrier hook). Once all `arrival.local_world_size` local workers of
  // that attempt arrived at that name, one service Barrier call is made on
  // a thread of its own; its outcome answers them all. Never blocks.
  void OnArrival(const std::string& job_id, int64_t round, const BarrierArrival& arrival,
                 Reply reply);

 private:
  struct Waiting {
    int64_t round = 0;
    int local_world_size = 1;
    std::map<int, Reply> replies;  // by rank: a repeated arrival replaces
  };
  // Answers Aborted the waiting arrivals of `job_id` (every job's when
  // empty) except those of round `keep`.
  void AbortLocked(const std::string& job_id, int64_t keep, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RendezvousClient* const client_;
  const std::string node_id_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  // By (job, barrier name).
  std::map<std::pair<std::string, std::string>, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  // Service calls not yet answered. Shared with their threads (which may
  // still be unlocking it when the destructor's wait ends).
  struct InFlight {
    absl::Mutex mu;
    int count ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<InFlight> in_flight_ = std::make_shared<InFlight>();
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_BARRIER_H_
