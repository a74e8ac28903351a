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

// Where training stands, independent of the world size: the epoch and how
// many samples at the head of its global order are trained (the sampler's
// state, sampler.h: its seed is the config's, its epoch `epoch`), so a state
// taken on any number of ranks continues on any other.
struct TrainPosition {
  int64_t epoch = 0;         // The epoch in progress (or next to start).
  int64_t samples_done = 0;  // Samples of `epoch`'s global order trained.
  // The state's order in the run's history (resume.h, CheckpointKey):
  // `lineage` grows by one at every optimizer step and every epoch's end,
  // across restarts and re-forms; `branch` by one at every resume, so a
  // state taken after a resume outranks every state of the history it
  // resumed from, whatever their lineage (a node that comes back with an
  // older branch's files never wins).
  int64_t lineage = 0;
  int64_t branch = 0;
  int64_t micro_batches = 0;  // Backwards accumulated since the last step.
  // Where the last optimizer step left the position (epoch, samples_done
  // of that epoch; samples_done is the dataset's size after its last batch).
  int64_t step_epoch = 0;
  int64_t step_done = 0;
  int64_t world_size = 1;      // Ranks when it was taken.
  int64_t warmup_samples = 0;  // The schedule's warm-up (schedule.h); 0: unknown.
  double best_acc = -1;        // Best test accuracy so far.
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
  // (gradient accumulation across the epoch's end): that epoch's samples
  // from position `tail_from` on were trained after the last step and their
  // gradients are not stored (they differ by rank). A resume deals them
  // again, to as many ranks as it has, and recomputes their gradients
  // (TrainLoop's replay): from the same weights and generator state, so on
  // the same number of ranks bitwise as the uninterrupted run. -1: none.
  int64_t tail_from = -1;
  // A state of an older build counted batches per rank: `iteration`
  // batches of `epoch` on `world_size` ranks, the last step at global
  // iteration `last_opt_step`, a tail from batch `tail_begin`. -1: not such
  // a state. TrainLoop converts it to samples (it knows the batch size).
  int64_t legacy_iteration = -1;
  int64_t legacy_last_opt_step = -1;
  int64_t legacy_tail_begin = -1;
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
