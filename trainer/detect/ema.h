// YOLOv5's ModelEMA (utils/torch_utils.py): an exponential moving average
// of a model's state, kept in a second instance of the model, with a decay
// that ramps up from 0 so that early updates follow the model closely:
//   updates += 1
//   d = decay * (1 - exp(-updates / tau))
//   v = d * v + (1 - d) * model_v   for every floating-point parameter and
//                                   buffer (BatchNorm running statistics
//                                   included); other buffers (BatchNorm's
//                                   num_batches_tracked) are copied.
// The copy is registered as the submodule "model" and the update count as
// the int64 scalar buffer "updates", so whatever saves this module's state
// (a checkpoint) saves the average and its count, and a ModelEma loaded
// from it continues exactly where the saved one was.
#ifndef ELASTRUN_TRAINER_DETECT_EMA_H_
#define ELASTRUN_TRAINER_DETECT_EMA_H_

#include <cstdint>
#include <memory>

#include "trainer/trainer_pch.h"

namespace elastrun::trainer::detect {

class ModelEmaImpl : public torch::nn::Module {
 public:
  // `copy` is a second instance of the averaged model's type: the same
  // parameter and buffer names and shapes (a shared_ptr because it becomes
  // a registered submodule, as the C++ frontend holds them). It is put in
  // eval mode and its parameters stop requiring gradients; call Init to
  // start it from the model's state. YOLOv5's defaults: decay 0.9999,
  // tau 2000 updates.
  explicit ModelEmaImpl(std::shared_ptr<torch::nn::Module> copy, double decay = 0.9999,
                        double tau = 2000);

  // Copies every parameter and buffer of `model` into the average (updates
  // keeps its value). Throws c10::Error naming the entry when `model` lacks
  // one of the average's entries or its shape differs.
  void Init(const torch::nn::Module& model);
  // One step of the average towards `model` (see the file comment), without
  // gradients. Throws as Init.
  void Update(const torch::nn::Module& model);

  // The decay of the last update, d(updates) (0 before any).
  double decay_now() const;
  int64_t updates() const { return updates_.item<int64_t>(); }
  // The averaged model (evaluate and save it as the trained one).
  const std::shared_ptr<torch::nn::Module>& model() const { return model_; }

  // Keeps the average in eval mode whatever `on` says: it is never trained
  // and its BatchNorm statistics must not move in its forwards.
  void train(bool on = true) override;

 private:
  std::shared_ptr<torch::nn::Module> model_;
  double decay_;
  double tau_;
  at::Tensor updates_;  // int64 scalar
};
TORCH_MODULE(ModelEma);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_EMA_H_
