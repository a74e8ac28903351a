// What the coordinator's parts hand to the outside world, and the Outbox
// that carries it past the coordinator's lock: commands to nodes, stream
// closes and barrier completions are collected while the lock is held and
// run after it is released, so no callback or network write happens under it.
#ifndef ELASTRUN_RENDEZVOUS_OUTBOX_H_
#define ELASTRUN_RENDEZVOUS_OUTBOX_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "elastrun/v1/rendezvous.pb.h"

namespace elastrun::rendezvous {

// The sending end of one node's Watch stream. Implementations must be
// thread-safe and must not block on the network or call back into the
// Coordinator.
class NodeStream {
 public:
  virtual ~NodeStream() = default;
  // Queues `command` (its seq is set by the stream). No-op once closed.
  virtual void Send(v1::Command command) = 0;
  // Ends the stream with `status`. No-op once closed.
  virtual void Close(absl::Status status) = 0;
};

// Called exactly once with a barrier's outcome.
using BarrierDone = std::function<void(absl::Status)>;

// Work collected under the coordinator's lock and done after releasing it.
struct Outbox {
  // The streams are shared with the gRPC reactors that own their lifetime:
  // a reactor may end while a command for it is still here.
  std::vector<std::pair<std::shared_ptr<NodeStream>, v1::Command>> sends;
  std::vector<std::pair<std::shared_ptr<NodeStream>, absl::Status>> closes;
  std::vector<std::pair<BarrierDone, absl::Status>> dones;
  absl::Status store_status;  // the first failed write, if any

  // Keeps the first failure only.
  void StoreFailed(absl::Status st) {
    if (store_status.ok()) store_status = std::move(st);
  }
  // Sends, closes, then completes barriers; leaves the Outbox empty.
  void Deliver() {
    for (auto& [stream, command] : sends) stream->Send(std::move(command));
    for (auto& [stream, status] : closes) stream->Close(status);
    for (auto& [done, status] : dones) done(status);
    sends.clear();
    closes.clear();
    dones.clear();
  }
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_OUTBOX_H_
