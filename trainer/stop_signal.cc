#include "trainer/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>

namespace elastrun::trainer {
namespace {

std::atomic<bool> g_armed{false};
std::atomic<bool> g_requested{false};
std::atomic<unsigned> g_bound_s{10};
static_assert(std::atomic<bool>::is_always_lock_free);
static_assert(std::atomic<unsigned>::is_always_lock_free);

// SIGTERM's default action, from anywhere (a handler included).
void DieOfSigterm() {
  ::signal(SIGTERM, SIG_DFL);
  ::kill(::getpid(), SIGTERM);
}

void OnTerm(int) {
  if (!g_armed.load()) {
    DieOfSigterm();
    return;
  }
  if (!g_requested.exchange(true)) ::alarm(g_bound_s.load());
}

void OnAlarm(int) {
  if (g_requested.load()) DieOfSigterm();
}

}  // namespace

void StopSignal::Install() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = OnTerm;
  ::sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = OnAlarm;
  ::sigaction(SIGALRM, &sa, nullptr);
}

void StopSignal::Arm() { g_armed.store(true); }

void StopSignal::Disarm() {
  g_armed.store(false);
  if (g_requested.load()) Exit();
}

void StopSignal::SetStepTime(absl::Duration step) {
  const double s = std::ceil(3 * absl::ToDoubleSeconds(step));
  g_bound_s.store(static_cast<unsigned>(std::clamp(s, 10.0, 3600.0)));
}

bool StopSignal::Requested() { return g_requested.load(std::memory_order_relaxed); }

void StopSignal::Exit() {
  DieOfSigterm();
  for (;;) ::pause();
}

}  // namespace elastrun::trainer
