#include "launcher/daemon/hooks.h"

#include <pthread.h>
#include <signal.h>

#include <functional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace elastrun::launcher {

bool HandleStopSignals(StopRequest* stop) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&mask, s);
  if (pthread_sigmask(SIG_BLOCK, &mask, nullptr) != 0) return false;
  std::thread([stop] {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, s);
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) stop->Request(sig);
    }
  }).detach();
  return true;
}

void RouteAgentHooks(std::atomic<Daemon*>* router, StopRequest* stop, const std::string& who,
                     AgentOptions* options) {
  options->on_progress = [router](const ProgressReport& report) {
    if (Daemon* d = router->load()) d->OnProgress(report);
  };
  options->on_barrier = [router, who](const BarrierArrival& arrival,
                                      std::function<void(const absl::Status&)> reply) {
    Daemon* d = router->load();
    if (d == nullptr) {
      reply(absl::UnavailableError(absl::StrCat(who, " is starting")));
      return;
    }
    d->OnBarrier(arrival, std::move(reply));
  };
  options->on_signal = [stop](int sig) { stop->Request(sig); };
}

}  // namespace elastrun::launcher
