// The agent's event loop primitive: an epoll set whose descriptors each carry
// a callback. Every part of an attempt (process set, output pump, standby
// sockets) registers its descriptors here, so one thread serves the
// attempts of a launcher, and exits, output and signals are each handled the
// moment they happen.
//
// Not thread-safe: Watch, Unwatch and Wait are called on the loop's thread
// (callbacks run there too and may Watch or Unwatch any descriptor).
#ifndef ELASTRUN_LAUNCHER_AGENT_POLLER_H_
#define ELASTRUN_LAUNCHER_AGENT_POLLER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace elastrun::launcher {

class Poller {
 public:
  static absl::StatusOr<std::unique_ptr<Poller>> Create();
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Calls `on_ready` whenever `fd` (not owned) is readable, hung up or in
  // error, until Unwatch(fd). Watching a descriptor twice is an error.
  absl::Status Watch(int fd, std::function<void()> on_ready);
  // Stops watching `fd` (call before closing it). Unknown fds are ignored.
  void Unwatch(int fd);

  // Waits at most `timeout` (absl::InfiniteDuration(): no limit; zero: only
  // look) for ready descriptors and runs their callbacks. Returns how many
  // ran. Errors are failures of epoll itself.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  size_t watched() const { return by_fd_.size(); }

 private:
  explicit Poller(int epoll_fd) : epoll_fd_(epoll_fd) {}

  struct Entry {
    int fd = -1;
    std::function<void()> on_ready;
  };
  const int epoll_fd_;
  // A fresh token per Watch: an event already fetched for a descriptor that
  // a callback unwatched (and maybe reused) finds no entry and is dropped.
  uint64_t next_token_ = 1;
  std::map<uint64_t, Entry> entries_;
  std::map<int, uint64_t> by_fd_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_POLLER_H_
