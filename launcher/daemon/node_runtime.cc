#include "launcher/daemon/node_runtime.h"

#include <signal.h>

#include <random>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/worker_env.h"

namespace elastrun::launcher {

std::string NewIncarnation() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

std::vector<std::string> WorkerEnvironment(char** environ) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var = *e;
    if (!env::IsLauncherSetting(var.substr(0, var.find('=')))) out.emplace_back(var);
  }
  return out;
}

void RelayBarriers(BarrierRelay* barriers, DaemonOptions* options) {
  options->on_barrier = [barriers](const std::string& job, int64_t round,
                                   const BarrierArrival& arrival,
                                   std::function<void(const absl::Status&)> reply) {
    barriers->OnArrival(job, round, arrival, std::move(reply));
  };
  options->on_attempt_start = [barriers](const std::string& job, int64_t round) {
    barriers->SetAttempt(job, round);
  };
}

NodeRuntime::NodeRuntime(DaemonOptions daemon_options, SessionOptions session_options,
                         RendezvousClient* client, AttemptRunner* runner,
                         std::atomic<Daemon*>* router, StopRequest* stop)
    : router_(router),
      daemon_(std::move(daemon_options), client, runner),
      session_(std::move(session_options), client, &daemon_) {
  router_->store(&daemon_);
  session_thread_ = std::thread([this, stop] {
    absl::Status st = session_.Run();
    const bool refused = !st.ok();
    {
      absl::MutexLock lock(&mu_);
      session_status_ = std::move(st);
    }
    if (refused) stop->Request(-1);
  });
}

NodeRuntime::~NodeRuntime() {
  if (!left_) Leave(SIGTERM, absl::Seconds(10));
}

bool NodeRuntime::Leave(int sig, absl::Duration timeout) {
  left_ = true;
  daemon_.Shutdown(sig);
  // Leave at once (the Watch stream closes): the service re-forms the job
  // without this node as a membership change, instead of the other nodes
  // seeing their collectives break while these workers wind down.
  session_.Stop();
  session_thread_.join();
  const bool idle = daemon_.WaitIdle(timeout);
  // The Daemon goes with this object; the agent's hooks see none from now.
  router_->store(nullptr);
  return idle;
}

absl::Status NodeRuntime::session_status() const {
  absl::MutexLock lock(&mu_);
  return session_status_;
}

}  // namespace elastrun::launcher
