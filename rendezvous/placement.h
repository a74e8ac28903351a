// Placement: which registered nodes a job of `nnodes MIN:MAX` x
// `nproc_per_node` runs on, whether any could ever hold it, and the slots a
// queued job holds while it waits.
#ifndef ELASTRUN_RENDEZVOUS_PLACEMENT_H_
#define ELASTRUN_RENDEZVOUS_PLACEMENT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "rendezvous/registry.h"

namespace elastrun::rendezvous {

// Slots held back on nodes for queued jobs that wait for them, by node id:
// placement of the jobs behind them counts these slots as used.
using HeldSlots = std::map<std::string, int, std::less<>>;

// Draining nodes take no new placement: every function here skips them.
// Each considers only the nodes of `pool` (RegisterNodeRequest.pool; "" the
// default pool): a job is placed on nodes of its own pool alone.
//
// Up to `want` alive nodes with at least `nproc` free slots (slots minus the
// nproc_per_node of every job placed on it, minus `held`), excluding
// `exclude`, most free slots first, then the least recently placed on
// (NodeRecord::last_placed: short jobs spread over equal nodes), then by
// node id (deterministic).
// Returns them all, even fewer than a job's minimum: the caller decides
// whether that is enough.
//
// A node may hold several jobs at once, as long as their workers fit its
// slots: its daemon runs one attempt per job and tells their exits apart.
std::vector<std::string> PickNodes(const NodeRegistry& registry, absl::string_view pool,
                                   int nproc, int want,
                                   const std::vector<std::string>& exclude,
                                   const HeldSlots& held = {});

// nullopt when at least `min_nodes` alive nodes have `nproc` slots in all
// (free or not: the job fits once their jobs end). Else why not, for the
// user: "job needs 2 node(s) with 2 slot(s) each; registered: a (1 slot),
// b (1 slot)" (alive nodes, biggest first, at most a few named; "; N
// draining" when some alive nodes are drained); of another pool than the
// default: "job needs 2 node(s) with 2 slots each in pool P; registered
// there: ...".
std::optional<std::string> WhyNoNodesCanHold(const NodeRegistry& registry,
                                             absl::string_view pool, int nproc,
                                             int min_nodes);

// For a queued job that PickNodes could not place: holds `nproc` slots on
// `min_nodes` alive nodes whose slots not yet held for an earlier job are
// at least `nproc` (most free slots first, then by id), so that jobs behind
// it cannot take those slots as they free up and starve it. Returns false,
// holding nothing, when there are not that many such nodes: a job waiting
// for nodes that are not registered, or behind earlier holders, blocks no
// one.
bool HoldSlotsFor(const NodeRegistry& registry, absl::string_view pool, int nproc,
                  int min_nodes, HeldSlots& held);

// Why a job that PickNodes could not place stays queued, for its status:
// "waiting for nodes: <WhyNoNodesCanHold>", or "waiting for free slots: ..."
// (`holds`: whether HoldSlotsFor held slots for it).
std::string WaitingReason(const NodeRegistry& registry, absl::string_view pool, int nproc,
                          int min_nodes, bool holds);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_PLACEMENT_H_
