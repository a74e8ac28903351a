// The dynamic loss scaler of mixed-precision training, with the semantics
// of torch.cuda.amp.GradScaler: the loss is multiplied by scale() before
// backward; gradients are unscaled before the step; a step whose gradients
// hold an inf or nan is skipped and the scale backs off; after
// growth_interval clean steps in a row the scale grows. Torch-free: the
// caller checks the gradients (Optimizer::UnscaleGradients).
#ifndef ELASTRUN_TRAINER_LOSS_SCALER_H_
#define ELASTRUN_TRAINER_LOSS_SCALER_H_

#include <cstdint>

namespace elastrun::trainer {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, as GradScaler.
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// Not thread-safe; one per rank. With DDP every rank sees the same
// (allreduced) gradients, so every rank makes the same decisions.
class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {})
      : options_(options), scale_(options.init_scale) {}

  double scale() const { return scale_; }
  // Call once per optimizer step, after unscaling: `found_inf` says whether
  // any gradient was inf or nan. Returns whether to apply the step.
  bool Update(bool found_inf);

  // Clean steps since the last growth or back-off.
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t skipped_steps() const { return skipped_; }
  // For checkpoints.
  void Restore(double scale, int64_t growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_LOSS_SCALER_H_
