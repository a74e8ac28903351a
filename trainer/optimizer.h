// The optimizers a config can name (`_target_: SGD`, `_target_: AdamW`),
// with YOLOv5's three parameter groups:
//   group 0: biases                  (no weight decay; warm-up lr from warmup_bias_lr)
//   group 1: other weights           (weight decay)
//   group 2: weights of *Norm layers (no weight decay)
// A target returns an OptimizerSpec; the optimizer is built once the model
// and the schedule (which scales the weight decay) exist.
#ifndef ELASTRUN_TRAINER_OPTIMIZER_H_
#define ELASTRUN_TRAINER_OPTIMIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/schedule.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

struct OptimizerSpec {
  enum class Kind { kSgd, kAdamW };
  Kind kind = Kind::kSgd;
  double lr0 = 0.01;
  // SGD momentum; AdamW's beta1 (as YOLOv5).
  double momentum = 0.937;
  bool nesterov = true;      // SGD only.
  double beta2 = 0.999;      // AdamW only.
  double eps = 1e-8;         // AdamW only.
  // Before YOLOv5's scaling by global_batch * accumulate / nbs.
  double weight_decay = 5e-4;
  // Nominal batch: gradients accumulate to about this many samples.
  int64_t nbs = 64;
};

enum class GroupKind { kBias = 0, kDecay = 1, kNorm = 2 };

// Parameters of `model` in YOLOv5's groups, each in module order:
// a parameter named "bias" -> kBias; "weight" of a module whose class name
// contains "Norm" -> kNorm; anything else -> kDecay.
struct ParameterGroups {
  std::vector<at::Tensor> bias, decay, norm;
};
ParameterGroups SplitParameters(torch::nn::Module& model);

// A torch optimizer over the (non-empty) groups, driven by the schedule.
// Not thread-safe.
class Optimizer {
 public:
  // weight_decay: the scaled value for the kDecay group.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerSpec& spec,
                                                           torch::nn::Module& model,
                                                           double weight_decay);

  // Sets each group's lr (bias_lr for kBias) and, for SGD, momentum.
  void Apply(const IterationValues& values);
  // Multiplies every gradient by `factor` (1 / (micro-batches x loss
  // scale): the mean over the accumulated micro-batches, unscaled). With
  // `check_finite`, returns whether any gradient holds an inf or nan.
  bool ScaleGradients(double factor, bool check_finite);
  // optimizer.step(), then zero_grad().
  void Step();
  // zero_grad() alone: a step skipped by the loss scaler.
  void ZeroGrad();

  // lr of the weight groups (what metrics report).
  double lr() const { return lr_; }
  const std::vector<GroupKind>& kinds() const { return kinds_; }
  torch::optim::Optimizer& torch_optimizer() { return *optimizer_; }

 private:
  Optimizer(OptimizerSpec spec, std::unique_ptr<torch::optim::Optimizer> optimizer,
            std::vector<GroupKind> kinds)
      : spec_(spec), optimizer_(std::move(optimizer)), kinds_(std::move(kinds)) {}

  OptimizerSpec spec_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<GroupKind> kinds_;  // Of each param group, in order.
  double lr_ = 0;
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_OPTIMIZER_H_
