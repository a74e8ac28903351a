// YOLOv5's learning-rate and momentum schedule (train.py, hyp.scratch-low),
// as plain math so it can be tested against the formulas without torch,
// made a function of the samples trained rather than of per-rank
// iterations, so that an elastic re-form (another world size, so another
// global batch and number of iterations per epoch) changes neither the lr
// nor the momentum, and the nominal batch is kept by the accumulation.
//
// YOLOv5, with nb batches per epoch of a global batch gb = batch x world:
//   nw = max(round(warmup_epochs * nb), 100)   warm-up iterations
//   lf(e) = ((1 - cos(e * pi / epochs)) / 2) * (lrf - 1) + 1   (one_cycle)
//         = (1 - e / epochs) * (1 - lrf) + lrf                  (linear)
//   iteration ni <= nw (warm-up), xi = [0, nw]:
//     bias lr   = interp(ni, xi, [warmup_bias_lr, lr0 * lf(epoch)])
//     other lrs = interp(ni, xi, [0,              lr0 * lf(epoch)])
//     momentum  = interp(ni, xi, [warmup_momentum, momentum])
//     accumulate = max(1, round(interp(ni, xi, [1, nbs / gb])))
//   afterwards: lr = lr0 * lf(epoch), momentum = momentum,
//     accumulate = max(round(nbs / gb), 1)
// Here the interpolation runs over `seen`, the samples the run trained
// before the batch (epoch x dataset size + the epoch's position), and the
// warm-up lasts nw x gb samples, fixed when the run starts (WarmupSamples at
// its first world size) and carried in its state. Without a re-form seen is
// ni x gb, so the values are YOLOv5's; after one, the lr and momentum go on
// from the same sample, and `accumulate` follows the new global batch.
// Rounding is Python's (half to even), as YOLOv5 gets from round()/np.round.
//
// The same warm-up can lead into SGDR's cosine annealing with warm restarts
// (torch.optim.lr_scheduler.CosineAnnealingWarmRestarts) instead of lf():
// after warm-up lr = CosineRestartsLr(seen / epoch_samples, ...), at the
// fractional epoch of the batch, as torch's scheduler.step(epoch + i / n).
#ifndef ELASTRUN_TRAINER_SCHEDULE_H_
#define ELASTRUN_TRAINER_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace elastrun::trainer {

// The `scheduler` section (`_target_: YoloV5Schedule`).
struct ScheduleOptions {
  // Epochs of the run; lf() reaches lrf at this epoch.
  int64_t epochs = 10;
  // Final lr as a fraction of lr0.
  double lrf = 0.01;
  // true: cosine decay; false: linear.
  bool one_cycle = true;
  // Warm-up length in epochs (at least kMinWarmupIters iterations).
  double warmup_epochs = 3.0;
  // Momentum at the start of warm-up.
  double warmup_momentum = 0.8;
  // Bias lr at the start of warm-up.
  double warmup_bias_lr = 0.1;
  // Momentum after warm-up (the optimizer's).
  double momentum = 0.937;
  // The lr after warm-up: YOLOv5's lr0 x lf(epoch) (epochs, lrf,
  // one_cycle), or cosine annealing with warm restarts (t_0, t_mult,
  // eta_min) over fractional epochs.
  enum class Decay { kYoloV5, kCosineRestarts };
  Decay decay = Decay::kYoloV5;
  // CosineAnnealingWarmRestarts' T_0 (first period, epochs, > 0), T_mult
  // (period growth, >= 1) and eta_min (the lowest lr, absolute).
  int64_t t_0 = 10;
  int64_t t_mult = 1;
  double eta_min = 0;
};

// torch's CosineAnnealingWarmRestarts lr at fractional `epoch` (>= 0):
// eta_min + (lr0 - eta_min) (1 + cos(pi T_cur / T_i)) / 2, T_i the period
// that `epoch` falls in and T_cur the epochs since it began.
double CosineRestartsLr(double epoch, double lr0, int64_t t_0, int64_t t_mult, double eta_min);

// The hyperparameters one iteration uses.
struct IterationValues {
  double bias_lr = 0;   // Parameter group of biases.
  double lr = 0;        // The other parameter groups.
  double momentum = 0;  // SGD momentum (AdamW: unused).
  int64_t accumulate = 1;  // Micro-batches per optimizer step.
};

// Immutable, thread-compatible.
class YoloV5Schedule {
 public:
  static constexpr int64_t kMinWarmupIters = 100;

  // lr0: base lr; nbs: nominal batch; warmup_samples: the warm-up's length
  // in samples (WarmupSamples); epoch_samples: samples per epoch (the
  // dataset's size: `seen` / epoch_samples is the fractional epoch), needed
  // by Decay::kCosineRestarts only. InvalidArgument on non-positive epochs
  // (kYoloV5) or nbs, a negative warm-up, t_0 < 1, t_mult < 1 or
  // epoch_samples < 1 (kCosineRestarts).
  static absl::StatusOr<YoloV5Schedule> Create(const ScheduleOptions& options, double lr0,
                                               int64_t nbs, int64_t warmup_samples,
                                               int64_t epoch_samples = 0);

  // YOLOv5's warm-up, nw = max(round(warmup_epochs * batches_per_epoch),
  // 100) iterations of `global_batch` samples, in samples.
  // batches_per_epoch and global_batch must be positive.
  static int64_t WarmupSamples(const ScheduleOptions& options, int64_t batches_per_epoch,
                               int64_t global_batch);

  // lf(epoch): the lr factor of an epoch (Decay::kYoloV5).
  double LrFactor(int64_t epoch) const;
  // The lr after warm-up of the batch after `seen` samples, in `epoch`.
  double TargetLr(int64_t seen, int64_t epoch) const;
  int64_t warmup_samples() const { return warmup_samples_; }
  // Accumulation after warm-up: max(round(nbs / global_batch), 1).
  int64_t Accumulate(int64_t global_batch) const;
  // Weight decay scaled as YOLOv5 does:
  // weight_decay * global_batch * Accumulate(global_batch) / nbs.
  double ScaledWeightDecay(double weight_decay, int64_t global_batch) const;
  // Values for the batch trained after `seen` samples of the run, in
  // `epoch`, with micro-batches of `global_batch` samples over all ranks.
  IterationValues At(int64_t seen, int64_t epoch, int64_t global_batch) const;

  const ScheduleOptions& options() const { return options_; }

 private:
  YoloV5Schedule(const ScheduleOptions& options, double lr0, int64_t nbs,
                 int64_t warmup_samples, int64_t epoch_samples)
      : options_(options),
        lr0_(lr0),
        nbs_(nbs),
        warmup_samples_(warmup_samples),
        epoch_samples_(epoch_samples) {}

  ScheduleOptions options_;
  double lr0_;
  int64_t nbs_;
  int64_t warmup_samples_;
  int64_t epoch_samples_;
};

// Python's round(): to nearest, halves to even.
double RoundHalfEven(double x);
// numpy.interp for two points (x0 < x1), clamped outside.
double Interp(double x, double x0, double x1, double y0, double y1);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_SCHEDULE_H_
