// The store gate: holds the activations of ranks != 0 until rank 0's c10d
// store listens (AttemptSpec::store_port). A c10d client that finds no
// store sleeps a whole second before it tries again, and a warm worker is
// always faster to the store than rank 0 is to create it.
//
// Nothing signals that a port began to listen, so once rank 0 runs (it
// reported its start-up: it is past its imports) the port is looked at
// every kStoreGatePoll, for at most kStoreGateMax; then the held activations
// go out anyway (a program that hosts no store there loses that much, once
// per attempt). A pure state machine: time comes in as arguments, the look
// at the port goes through `is_listening`.
//
// Not thread-safe; owned by one attempt.
#ifndef ELASTRUN_LAUNCHER_AGENT_STORE_GATE_H_
#define ELASTRUN_LAUNCHER_AGENT_STORE_GATE_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace elastrun::launcher {

inline constexpr absl::Duration kStoreGatePoll = absl::Milliseconds(2);

class StoreGate {
 public:
  // `closed`: whether the gate holds anything at all (the store's port is
  // known and rank 0 runs here with other workers). `is_listening(port)`
  // tells whether something listens on `port`.
  StoreGate(bool closed, int port, std::function<bool(int)> is_listening);

  // Whether the activation of a worker with `rank` must wait.
  bool Holds(int rank) const { return closed_ && rank != 0; }
  // Keeps `activation` for `worker` until the gate opens.
  void Hold(size_t worker, std::string activation);

  // Rank 0 finished its start-up at `now`: the store may listen soon. Only
  // the first call counts.
  void RankZeroStarted(absl::Time now);

  // Opens the gate when the store listens or its time is up, and returns
  // the held activations (worker, activation) to send now; empty otherwise.
  std::vector<std::pair<size_t, std::string>> Poll(absl::Time now);

  // When Poll is due next; nullopt while nothing needs a look.
  std::optional<absl::Time> NextPoll(absl::Time now) const;

  bool open() const { return !closed_; }

 private:
  bool closed_;
  const int port_;
  const std::function<bool(int)> is_listening_;
  std::vector<std::pair<size_t, std::string>> held_;
  std::optional<absl::Time> give_up_at_;  // set once rank 0 started
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_STORE_GATE_H_
