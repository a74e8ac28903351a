#include "rendezvous/placement.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace elastrun::rendezvous {
namespace {

// How many nodes a refusal names; the rest are counted.
constexpr int kNodesNamed = 8;

int HeldOn(const HeldSlots& held, const std::string& id) {
  auto it = held.find(id);
  return it == held.end() ? 0 : it->second;
}

// By count (free or total slots), biggest first; equal counts keep node-id
// order (the registry's), so that placement is deterministic.
void SortDescending(std::vector<std::pair<int, const std::string*>>& nodes) {
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
}

std::string Slots(int n) { return absl::StrFormat("%d slot%s", n, n == 1 ? "" : "s"); }

}  // namespace

std::vector<std::string> PickNodes(const NodeRegistry& registry, absl::string_view pool,
                                   int nproc, int want,
                                   const std::vector<std::string>& exclude,
                                   const HeldSlots& held) {
  struct Fit {
    int free;
    uint64_t last_placed;
    const std::string* id;
  };
  std::vector<Fit> fit;
  const absl::flat_hash_set<absl::string_view> excluded(exclude.begin(), exclude.end());
  for (const auto& [id, n] : registry.nodes()) {
    const int free = n.free_slots() - HeldOn(held, id);
    if (!n.alive() || n.draining() || free < nproc || n.stored.pool() != pool) continue;
    if (excluded.contains(id)) continue;
    fit.push_back({free, n.last_placed, &id});
  }
  // Most free slots first; among equals the least recently placed on (short
  // jobs spread over equal nodes), then node id (the registry's order).
  std::stable_sort(fit.begin(), fit.end(), [](const Fit& a, const Fit& b) {
    return a.free != b.free ? a.free > b.free : a.last_placed < b.last_placed;
  });
  std::vector<std::string> out;
  for (const Fit& f : fit) {
    if (static_cast<int>(out.size()) >= want) break;
    out.push_back(*f.id);
  }
  return out;
}

std::optional<std::string> WhyNoNodesCanHold(const NodeRegistry& registry,
                                             absl::string_view pool, int nproc,
                                             int min_nodes) {
  std::vector<std::pair<int, const std::string*>> alive;  // (slots, id)
  int big_enough = 0;
  int draining = 0;
  for (const auto& [id, n] : registry.nodes()) {
    if (!n.alive() || n.stored.pool() != pool) continue;
    if (n.draining()) {
      ++draining;
      continue;
    }
    alive.emplace_back(n.stored.slots(), &id);
    if (n.stored.slots() >= nproc) ++big_enough;
  }
  if (big_enough >= min_nodes) return std::nullopt;
  SortDescending(alive);  // the nodes that come closest first
  std::string registered;
  const int named = std::min(static_cast<int>(alive.size()), kNodesNamed);
  for (int i = 0; i < named; ++i) {
    absl::StrAppend(&registered, i > 0 ? ", " : "", *alive[i].second, " (",
                    Slots(alive[i].first), ")");
  }
  if (alive.empty()) registered = "none alive";
  if (static_cast<int>(alive.size()) > named) {
    absl::StrAppend(&registered, " and ", alive.size() - named, " more with at most ",
                    Slots(alive[named].first), " each");
  }
  if (draining > 0) absl::StrAppend(&registered, "; ", draining, " draining");
  return absl::StrFormat("job needs %d node(s) with %s each%s; registered%s: %s",
                         min_nodes, Slots(nproc),
                         pool.empty() ? "" : absl::StrCat(" in pool ", pool),
                         pool.empty() ? "" : " there", registered);
}

bool HoldSlotsFor(const NodeRegistry& registry, absl::string_view pool, int nproc,
                  int min_nodes, HeldSlots& held) {
  std::vector<std::pair<int, const std::string*>> open;  // (free minus held, id)
  for (const auto& [id, n] : registry.nodes()) {
    const int already = HeldOn(held, id);
    if (!n.alive() || n.draining() || n.stored.pool() != pool ||
        n.stored.slots() - already < nproc)
      continue;
    open.emplace_back(n.free_slots() - already, &id);
  }
  if (static_cast<int>(open.size()) < min_nodes) return false;
  SortDescending(open);
  for (int i = 0; i < min_nodes; ++i) held[*open[i].second] += nproc;
  return true;
}

std::string WaitingReason(const NodeRegistry& registry, absl::string_view pool, int nproc,
                          int min_nodes, bool holds) {
  if (std::optional<std::string> why =
          WhyNoNodesCanHold(registry, pool, nproc, min_nodes)) {
    return absl::StrCat("waiting for nodes: ", *why);
  }
  return absl::StrFormat(
      "waiting for free slots: needs %d node(s) with %d free slot(s) each%s", min_nodes,
      nproc, holds ? " (held for it as other jobs end)" : ", behind earlier queued jobs");
}

}  // namespace elastrun::rendezvous
