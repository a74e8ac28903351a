// Placement: which registered nodes a job of `nnodes MIN:MAX` x
// `nproc_per_node` runs on.
#ifndef ELASTRUN_RENDEZVOUS_PLACEMENT_H_
#define ELASTRUN_RENDEZVOUS_PLACEMENT_H_

#include <string>
#include <vector>

#include "rendezvous/registry.h"

namespace elastrun::rendezvous {

// Up to `want` alive nodes with at least `nproc` free slots and no job,
// excluding `exclude`, most free slots first, then by node id
// (deterministic). Returns them all, even fewer than a job's minimum: the
// caller decides whether that is enough.
//
// A node that holds any job counts as full: a daemon runs one job at a time
// (its agent reaps with waitpid(-1), so two worker groups in one daemon
// would steal each other's exits).
std::vector<std::string> PickNodes(const NodeRegistry& registry, int nproc, int want,
                                   const std::vector<std::string>& exclude);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_PLACEMENT_H_
