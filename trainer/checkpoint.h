// What a checkpoint holds, as bytes for checkpoint_file.h: the model's
// parameters and buffers, the optimizer's state (momentum buffers, param
// groups), gradients accumulated but not yet applied, the position in the
// run (epoch, batches done in it, the schedule's step counters), the best
// accuracy so far, the default CPU generator's state (dropout), and the
// resolved config it was trained with.
#ifndef ELASTRUN_TRAINER_CHECKPOINT_H_
#define ELASTRUN_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

// Where training stands. Also the sampler's state: its seed is the
// config's and its epoch is `epoch`; `iteration * batch_size` samples of
// this rank's shard are done.
struct TrainPosition {
  int64_t epoch = 0;          // The epoch in progress (or next to start).
  int64_t iteration = 0;      // Batches of `epoch` already trained.
  int64_t last_opt_step = -1; // Global iteration of the last optimizer step.
  int64_t micro_batches = 0;  // Backwards accumulated since that step.
  int64_t world_size = 1;     // Ranks when it was taken.
  double best_acc = -1;       // Best test accuracy so far.
  // Loss sum and samples of `epoch` so far, over all ranks, so the epoch's
  // train_loss survives a resume. Valid when `sums_global` (checkpoints to
  // disk sum them; per-step snapshots do not, to stay a memcpy).
  double loss_sum = 0;
  double seen = 0;
  bool sums_global = false;
  // The same sums on the rank that took the state alone.
  double local_loss_sum = 0;
  double local_seen = 0;
  // The loss scaler's state (train.amp).
  double amp_scale = 0;
  int64_t amp_growth_tracker = 0;
  // State taken at the end of epoch `epoch - 1` between optimizer steps
  // (gradient accumulation across the epoch's end): batches `tail_begin`
  // to the end of that epoch were trained after the last step and their
  // gradients are not stored (they differ by rank). A resume on as many
  // ranks recomputes them from the same weights and generator state
  // (TrainLoop's replay). -1: none.
  int64_t tail_begin = -1;
};

// The state as bytes (torch::serialize archive).
std::string SerializeState(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           const TrainPosition& position, const std::string& config_yaml);

// Loads bytes from SerializeState into an identically built model and
// optimizer, restores the default CPU generator, and returns the position
// in `*position` and the config in `*config_yaml` (either may be null).
// DataLoss with torch's message when the bytes do not fit the model (for
// example a checkpoint of another architecture).
absl::Status RestoreState(const std::string& bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, TrainPosition* position,
                          std::string* config_yaml);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_CHECKPOINT_H_
