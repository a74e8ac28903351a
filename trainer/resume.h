// Resuming a run on every rank: each rank finds its own newest state (a
// snapshot in memory or a checkpoint on disk), the ranks agree on the
// newest one any of them holds, and every rank restores it (its own copy,
// or the bytes its holder broadcasts), so all ranks start bitwise identical
// even when only one node has it.
#ifndef ELASTRUN_TRAINER_RESUME_H_
#define ELASTRUN_TRAINER_RESUME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/checkpoint.h"
#include "trainer/run_identity.h"
#include "trainer/state_image.h"
#include "trainer/trainer.h"
#include "trainer/trainer_pch.h"
#include "worker/snapshot_area.h"

namespace elastrun::trainer {

// Sums `values` element-wise over all ranks, in place (no-op without a
// group). A collective: every rank calls it with the same size. Errors: the
// process group's.
absl::Status SumOverRanks(worker::ProcessGroup* group, std::vector<double>& values);

// Orders checkpoints of a run: epoch-major, then batches done.
int64_t CheckpointKey(const TrainPosition& position);

// The meta text a snapshot of `identity`'s run carries in its slot, and
// whether a slot's meta names that run.
std::string SnapshotMeta(const RunIdentity& identity, int world);
bool SnapshotOfRun(const std::string& meta, const RunIdentity& identity);

// What Resume restored.
struct Resumed {
  bool resumed = false;  // False: a fresh run (nothing of this run anywhere).
  StateExtras extras;    // Position, config, metrics rows, generator state.
  // Every rank restored its own snapshot from memory: each rank's own
  // loss sums (position.local_*) are exact.
  bool own_snapshots = false;
};

// Finds the newest state of `identity`'s run that any rank holds, in either
// tier: the rank's snapshot in `area` (memory the node's agent keeps across
// worker restarts; may be null) or the checkpoints in its output folder
// (or the file RunOptions::resume names, when it names one). When every
// rank holds that state itself, each restores its own; otherwise its
// holder broadcasts the bytes. A collective. Other runs' files and
// snapshots are never used: each rank names the files in one message and
// leaves them in place. A named file of another run (or config) is used,
// with a warning saying what differs. The generator state is returned in
// extras.rng, not applied. When the world size changed, a partly done
// epoch restarts (position.iteration = 0). Rank 0 says on `run.out` which
// step it resumed at and where the state came from (tier and rank).
// Errors: NotFound when the named path is on no rank; DataLoss for a
// corrupt named file or bytes that do not fit the model; the process
// group's.
absl::StatusOr<Resumed> Resume(const RunOptions& run, const RunIdentity& identity,
                               const TrainerConfig& cfg, int world, int rank,
                               worker::ProcessGroup* group, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer, worker::SnapshotArea* area);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_RESUME_H_
