#include "launcher/daemon/runner.h"

#include <utility>

#include "glog/logging.h"

namespace elastrun::launcher {

AgentRunner::AgentRunner(Agent* agent)
    : agent_(agent),
      callback_thread_([this] { CallbackLoop(); }),
      loop_thread_([this] {
        // epoll failing is not something the daemon can work around: its
        // attempts would never be seen to end.
        absl::Status s = agent_->Run();
        CHECK(s.ok()) << "the agent's event loop failed: " << s;
      }) {}

AgentRunner::~AgentRunner() {
  agent_->Quit();
  loop_thread_.join();  // once no attempt is active
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  callback_thread_.join();
}

void AgentRunner::Start(uint64_t id, AttemptSpec spec,
                        std::function<void(const AttemptOutcome&)> done) {
  // Held across agent_->Start so that `done` (on the loop thread) cannot
  // erase the entry before it is made.
  absl::MutexLock lock(&mu_);
  CHECK_EQ(active_.count(id), 0u) << "attempt " << id << " started twice";
  active_[id] = agent_->Start(
      std::move(spec), [this, id, done = std::move(done)](absl::StatusOr<AttemptOutcome> o) {
        {
          absl::MutexLock lock(&mu_);
          active_.erase(id);
        }
        AttemptOutcome outcome;
        if (o.ok()) {
          outcome = *std::move(o);
        } else {
          // The attempt could not begin (its log files): report it as a
          // failure to start the workers.
          LOG(ERROR) << "attempt " << id << ": " << o.status();
          outcome.kind = AttemptOutcome::Kind::kFailed;
          outcome.spawn_error = o.status();
        }
        Deliver([done, outcome = std::move(outcome)] { done(outcome); });
      });
}

void AgentRunner::Stop(uint64_t id, int sig) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return;
  // The agent applies it even when the attempt has not begun yet.
  agent_->Stop(it->second, sig);
}

void AgentRunner::Deliver(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  callbacks_.push_back(std::move(callback));
}

void AgentRunner::CallbackLoop() {
  for (;;) {
    std::function<void()> callback;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !callbacks_.empty() || quit_;
      };
      mu_.Await(absl::Condition(&ready));
      if (callbacks_.empty()) return;  // quit, with every callback run
      callback = std::move(callbacks_.front());
      callbacks_.pop_front();
    }
    callback();
  }
}

}  // namespace elastrun::launcher
