#include "launcher/daemon/lanes.h"

#include <utility>

namespace elastrun::launcher {

Lanes::~Lanes() {
  std::map<std::thread::id, std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::map<std::string, std::deque<std::function<void()>>>* q) {
          return q->empty();
        },
        &queues_));
    threads.swap(threads_);
    exited_.clear();
  }
  for (auto& [id, t] : threads) t.join();
}

void Lanes::Post(const std::string& key, std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  JoinExitedLocked();
  auto [it, idle] = queues_.try_emplace(key);
  it->second.push_back(std::move(task));
  if (!idle) return;  // its thread takes the task in turn
  std::thread t([this, key] { Run(key); });
  const std::thread::id id = t.get_id();
  threads_.emplace(id, std::move(t));
}

void Lanes::Run(const std::string& key) {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      auto it = queues_.find(key);
      if (it->second.empty()) {
        queues_.erase(it);
        exited_.push_back(std::this_thread::get_id());
        return;
      }
      task = std::move(it->second.front());
      it->second.pop_front();
    }
    task();
  }
}

void Lanes::JoinExitedLocked() {
  for (const std::thread::id& id : exited_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    // It left mu_ for good: joining under the lock cannot deadlock.
    it->second.join();
    threads_.erase(it);
  }
  exited_.clear();
}

bool Lanes::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](std::map<std::string, std::deque<std::function<void()>>>* q) {
            return q->empty();
          },
          &queues_),
      timeout);
}

}  // namespace elastrun::launcher
