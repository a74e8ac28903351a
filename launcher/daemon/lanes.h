// Lanes: tasks posted under a key run one after another, in the order they
// were posted, on a thread of that key's own, beside every other key's. The
// Daemon makes its service calls on them (one lane per job, one for exit
// reports), so that a slow call holds up only what must wait for it.
//
// A lane's thread starts when a task comes to an idle lane and ends when
// its queue is empty: an idle node holds no threads.
//
// Thread-safety: thread-safe. The destructor runs every task still queued
// and joins the threads.
#ifndef ELASTRUN_LAUNCHER_DAEMON_LANES_H_
#define ELASTRUN_LAUNCHER_DAEMON_LANES_H_

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace elastrun::launcher {

class Lanes {
 public:
  Lanes() = default;
  Lanes(const Lanes&) = delete;
  Lanes& operator=(const Lanes&) = delete;
  ~Lanes();

  // Runs `task` on lane `key` after the tasks posted there before it.
  void Post(const std::string& key, std::function<void()> task);

  // Waits until no task is queued or running on any lane, at most
  // `timeout`; returns whether idle.
  bool WaitIdle(absl::Duration timeout);

 private:
  void Run(const std::string& key);
  // Joins the threads of lanes that went idle.
  void JoinExitedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // The lanes with a thread, and what waits on each.
  std::map<std::string, std::deque<std::function<void()>>> queues_ ABSL_GUARDED_BY(mu_);
  std::map<std::thread::id, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  // Threads whose lane went idle: they return without taking mu_ again.
  std::vector<std::thread::id> exited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_LANES_H_
