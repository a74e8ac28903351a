// Resuming a run on every rank: each rank finds its own newest checkpoint,
// the ranks agree on the newest one any of them holds, its holder
// broadcasts the bytes, and every rank restores them, so all ranks start
// bitwise identical even when only one node has the file.
#ifndef ELASTRUN_TRAINER_RESUME_H_
#define ELASTRUN_TRAINER_RESUME_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/checkpoint.h"
#include "trainer/run_identity.h"
#include "trainer/trainer.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

// Sums `values` element-wise over all ranks, in place (no-op without a
// group). A collective: every rank calls it with the same size. Errors: the
// process group's.
absl::Status SumOverRanks(worker::ProcessGroup* group, std::vector<double>& values);

// Orders checkpoints of a run: epoch-major, then batches done.
int64_t CheckpointKey(const TrainPosition& position);

// Finds the newest checkpoint of `identity`'s run that any rank holds (or
// the file RunOptions::resume names, when it names one), broadcasts it from
// that rank, and restores model, optimizer and `*position` on every rank.
// A collective. Checkpoints of other runs in the folder are never used:
// each rank names them in one message and leaves them in place. A named
// file of another run (or config) is used, with a warning saying what
// differs (printed by the rank that holds it). Returns false when starting
// fresh (no rank holds a checkpoint of this run and no path was named).
// When the world size changed, a partly done epoch restarts
// (position->iteration = 0). Rank 0 says on `run.out` where it resumed
// from. Errors: NotFound when the named path is on no rank; DataLoss for a
// corrupt named file or bytes that do not fit the model; the process
// group's.
absl::StatusOr<bool> Resume(const RunOptions& run, const RunIdentity& identity,
                            const TrainerConfig& cfg, int world, int rank,
                            worker::ProcessGroup* group, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, TrainPosition* position);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_RESUME_H_
