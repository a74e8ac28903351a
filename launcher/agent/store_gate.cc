#include "launcher/agent/store_gate.h"

#include <algorithm>

#include "launcher/agent/attempt_spec.h"

namespace elastrun::launcher {

StoreGate::StoreGate(bool closed, int port, std::function<bool(int)> is_listening)
    : closed_(closed && port > 0), port_(port), is_listening_(std::move(is_listening)) {}

void StoreGate::Hold(size_t worker, std::string activation) {
  held_.emplace_back(worker, std::move(activation));
}

void StoreGate::RankZeroStarted(absl::Time now) {
  if (!give_up_at_) give_up_at_ = now + kStoreGateMax;
}

std::vector<std::pair<size_t, std::string>> StoreGate::Poll(absl::Time now) {
  if (!closed_ || !give_up_at_ || held_.empty()) return {};
  if (now < *give_up_at_ && !is_listening_(port_)) return {};
  closed_ = false;
  return std::move(held_);
}

std::optional<absl::Time> StoreGate::NextPoll(absl::Time now) const {
  // Nothing held (no worker waits for an activation): no need to look.
  if (!closed_ || !give_up_at_ || held_.empty()) return std::nullopt;
  return std::min(now + kStoreGatePoll, *give_up_at_);
}

}  // namespace elastrun::launcher
