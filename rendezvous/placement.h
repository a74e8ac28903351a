// Placement: which registered nodes a job of `nnodes MIN:MAX` x
// `nproc_per_node` runs on.
#ifndef ELASTRUN_RENDEZVOUS_PLACEMENT_H_
#define ELASTRUN_RENDEZVOUS_PLACEMENT_H_

#include <string>
#include <vector>

#include "rendezvous/registry.h"

namespace elastrun::rendezvous {

// Up to `want` alive nodes with at least `nproc` free slots (slots minus the
// nproc_per_node of every job placed on it), excluding `exclude`, most free
// slots first, then by node id (deterministic). Returns them all, even
// fewer than a job's minimum: the caller decides whether that is enough.
//
// A node may hold several jobs at once, as long as their workers fit its
// slots: its daemon runs one attempt per job and tells their exits apart.
std::vector<std::string> PickNodes(const NodeRegistry& registry, int nproc, int want,
                                   const std::vector<std::string>& exclude);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_PLACEMENT_H_
