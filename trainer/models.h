// The models a config can name: `_target_: MLP` and `_target_: CNN`.
// Both are torch::nn::Sequential, input [batch, channels, height, width]
// normalized images, output logits [batch, num_classes].
#ifndef ELASTRUN_TRAINER_MODELS_H_
#define ELASTRUN_TRAINER_MODELS_H_

#include <cstdint>
#include <vector>

#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

// What a model target returns (shared handle; copies share the module).
using Model = torch::nn::Sequential;

struct MlpOptions {
  int64_t in_features = 784;
  std::vector<int64_t> hidden = {256, 256};
  int64_t num_classes = 10;
  double dropout = 0.0;
};
// Flatten, then per hidden width Linear + ReLU (+ Dropout), then Linear.
Model MakeMlp(const MlpOptions& options);

struct CnnOptions {
  int64_t in_channels = 1;
  std::vector<int64_t> channels = {32, 64};
  int64_t kernel_size = 3;
  int64_t image_size = 28;
  int64_t hidden = 128;
  int64_t num_classes = 10;
  double dropout = 0.0;
  // NHWC ("channels last") convolution weights and activations: the same
  // model and math, and oneDNN's faster CPU kernels (1.38x here for the
  // default CNN, batch 128, one thread: bench/README.md). The layout is part of how the run
  // computes, so it is part of its bits: a run resumes with the layout it
  // was built with.
  bool channels_last = true;
};
// Per width in `channels`: Conv2d (same padding, no bias) + BatchNorm2d +
// ReLU + MaxPool2d(2); then Flatten, Linear(hidden) + ReLU (+ Dropout),
// Linear(num_classes).
Model MakeCnn(const CnnOptions& options);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_MODELS_H_
