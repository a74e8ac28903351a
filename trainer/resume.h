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

// Orders the states of a run: by branch, then lineage (TrainPosition),
// packed as branch << kLineageBits | lineage. Never by epoch and iteration,
// which a world-size change resets.
inline constexpr int kLineageBits = 40;
int64_t CheckpointKey(const TrainPosition& position);

// The meta text a snapshot of `identity`'s run carries in its slot, and
// whether a slot's meta names that run.
std::string SnapshotMeta(const RunIdentity& identity, int world);
bool SnapshotOfRun(const std::string& meta, const RunIdentity& identity);

// What Resume restored.
struct Resumed {
  bool resumed = false;  // False: a fresh run (nothing of this run anywhere).
  StateExtras extras;    // Position, config, metrics rows, generator state.
  // Every rank held the state (same key, same ContentDigest) and restored
  // its own copy; else `source`'s bytes were broadcast to those without.
  bool everyone = false;
  // Every rank restored its own snapshot from memory: each rank's own
  // loss sums (position.local_*) are exact.
  bool own_snapshots = false;
  int source = 0;            // The rank whose state it is (the lowest holder).
  std::string source_tier;   // "snapshot in memory", "checkpoint on disk", "named file".
};

// Finds the newest state of `identity`'s run that any rank holds, in either
// tier: the rank's snapshots in `area` (memory the node's agent keeps across
// worker restarts; may be null) or the checkpoints in its output folder
// (or the file RunOptions::resume names, when it names one). Newest is the
// highest CheckpointKey; a candidate whose image is malformed is skipped
// with a message naming it and the next newest is used. The ranks gather
// every rank's key and ContentDigest: a rank whose candidate has the newest
// key and the source's digest restores its own copy; every other rank
// gets the source's bytes (broadcast), and rank 0 names a rank whose state
// of the same key differed. A collective. Other runs' files and snapshots
// are never used: each rank names the files in one message and leaves them
// in place. A named file of another run (or config) is used, with a
// warning saying what differs. The generator state is returned in
// extras.rng, not applied. The position is returned as taken (the caller
// fits it to its world size); rank 0 says "no checkpoint ... starting
// fresh" for a fresh run, the caller says where it resumed.
// Errors: NotFound when the named path is on no rank; DataLoss for a
// corrupt named file or bytes that do not fit the model (the model and
// optimizer then unchanged); the process group's.
absl::StatusOr<Resumed> Resume(const RunOptions& run, const RunIdentity& identity,
                               const TrainerConfig& cfg, int world, int rank,
                               worker::ProcessGroup* group, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer, worker::SnapshotArea* area);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_RESUME_H_
