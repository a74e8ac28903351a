// The agent's progress socket: a unix datagram socket (owner-only) on which
// workers report progress and arrive at named barriers (common/progress.h).
// One per agent, shared by its attempts.
//
// Not thread-safe: Read runs on the agent's loop thread; the `reply` given
// to on_barrier may be called from any thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_PROGRESS_SOCKET_H_
#define ELASTRUN_LAUNCHER_AGENT_PROGRESS_SOCKET_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/progress.h"

namespace elastrun::launcher {

class ProgressSocket {
 public:
  using OnProgress = std::function<void(const ProgressReport&)>;
  using OnBarrier = std::function<void(const BarrierArrival&,
                                       std::function<void(const absl::Status&)> reply)>;

  // Binds `path` (a socket left there by an earlier run is replaced).
  // InvalidArgument for a path too long for a unix socket.
  static absl::StatusOr<std::unique_ptr<ProgressSocket>> Bind(const std::string& path);
  // Closes and unlinks the socket.
  ~ProgressSocket();

  int fd() const { return fd_; }

  // Reads every datagram waiting: reports go to `on_progress` (may be
  // empty), barrier arrivals to `on_barrier` (empty: every barrier fails at
  // once). Malformed datagrams are dropped.
  void Read(const OnProgress& on_progress, const OnBarrier& on_barrier);

 private:
  ProgressSocket(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  const int fd_;
  const std::string path_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_PROGRESS_SOCKET_H_
