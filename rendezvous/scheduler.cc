#include "rendezvous/scheduler.h"

#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "rendezvous/placement.h"

namespace elastrun::rendezvous {

void ScheduleJobs(const NodeRegistry& registry, JobTable& jobs, PlaceJob place) {
  HeldSlots held;
  // Why jobs of a shape (pool, nproc, min, max) stay queued, while neither
  // the held slots nor the nodes' change in this pass.
  absl::flat_hash_map<std::tuple<std::string, int, int, int>, std::string> unplaceable;
  for (JobRecord* job : jobs.by_seq()) {
    if (job->core) continue;
    const std::string& pool = job->spec.pool();
    const int nproc = job->spec.nproc_per_node();
    const int min = job->spec.min_nodes();
    const std::tuple<std::string, int, int, int> shape{pool, nproc, min,
                                                       job->spec.max_nodes()};
    if (auto known = unplaceable.find(shape); known != unplaceable.end()) {
      if (job->pending_reason != known->second) job->pending_reason = known->second;
      continue;
    }
    std::vector<std::string> picked =
        PickNodes(registry, pool, nproc, job->spec.max_nodes(), {}, held);
    if (static_cast<int>(picked.size()) < min) {
      const bool holds = HoldSlotsFor(registry, pool, nproc, min, held);
      job->pending_reason = WaitingReason(registry, pool, nproc, min, holds);
      if (holds) {
        unplaceable.clear();  // Fewer slots for those behind it.
      } else {
        unplaceable.emplace(shape, job->pending_reason);
      }
      continue;
    }
    unplaceable.clear();  // It takes nodes.
    job->pending_reason.clear();
    place(*job, picked, /*first=*/true);
  }
  for (JobRecord* job : jobs.by_seq()) {
    if (!job->core || job->core->finished()) continue;
    const int room = job->spec.max_nodes() - static_cast<int>(job->placed.size());
    if (room <= 0) continue;
    std::vector<std::string> picked = PickNodes(registry, job->spec.pool(),
                                                job->spec.nproc_per_node(), room,
                                                job->placed.list(), held);
    if (picked.empty()) continue;
    place(*job, picked, /*first=*/false);
  }
}

}  // namespace elastrun::rendezvous
