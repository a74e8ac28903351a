#include "rendezvous/placement.h"

#include <algorithm>
#include <utility>

namespace elastrun::rendezvous {

std::vector<std::string> PickNodes(const NodeRegistry& registry, int nproc, int want,
                                   const std::vector<std::string>& exclude) {
  std::vector<std::pair<int, const std::string*>> fit;  // (free slots, id)
  for (const auto& [id, n] : registry.nodes()) {
    if (!n.alive() || n.free_slots() < nproc) continue;
    if (std::find(exclude.begin(), exclude.end(), id) != exclude.end()) continue;
    fit.emplace_back(n.free_slots(), &id);
  }
  // Stable: equal free slots keep node-id order.
  std::stable_sort(fit.begin(), fit.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (const auto& [free, id] : fit) {
    if (static_cast<int>(out.size()) >= want) break;
    out.push_back(*id);
  }
  return out;
}

}  // namespace elastrun::rendezvous
