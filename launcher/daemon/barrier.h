// Named barriers for workers, relayed by their node daemon: the local
// workers of an attempt meet here (they arrive through the agent's socket),
// then this node meets the other nodes of the round through the service's
// Barrier RPC, and every local worker gets the answer.
#ifndef ELASTRUN_LAUNCHER_DAEMON_BARRIER_H_
#define ELASTRUN_LAUNCHER_DAEMON_BARRIER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

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

  // The attempt that arrivals from now on belong to; arrivals of the old
  // attempt still waiting are answered Aborted.
  void SetAttempt(const std::string& job_id, int64_t round);

  // A local worker arrived (the agent's on_barrier hook). Once all
  // `arrival.local_world_size` local workers arrived at that name, one
  // service Barrier call is made on a thread of its own; its outcome
  // answers them all. Never blocks.
  void OnArrival(const BarrierArrival& arrival, Reply reply);

 private:
  struct Waiting {
    int local_world_size = 1;
    std::map<int, Reply> replies;  // by rank: a repeated arrival replaces
  };
  void AbortAllLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RendezvousClient* const client_;
  const std::string node_id_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int64_t round_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<std::string, Waiting> waiting_ ABSL_GUARDED_BY(mu_);  // by name
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
