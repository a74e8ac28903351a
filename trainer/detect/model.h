// The detector's model: YOLOv5 (v6 layout) in LibTorch's C++ frontend, one
// small module per block as YOLOv5's models/common.py has them:
//   ConvBnSilu  Conv2d (no bias, same padding) + BatchNorm2d + SiLU (a
//               SyncBatchNorm2d: sync_bn.h, off until given a group)
//   Bottleneck  1x1 then 3x3 ConvBnSilu, plus the input when shapes allow
//   C3          CSP bottleneck with 3 convolutions
//   Sppf        spatial pyramid pooling, fast (three 5x5 max pools)
//   Detect      per level a 1x1 Conv2d to anchors x (5 + classes)
// and the network of models/yolov5{n,s}.yaml: a CSP backbone to stride 32
// with SPPF, a PAN neck, Detect on strides 8, 16 and 32, with depth and
// width multiples (n: 0.33 / 0.25, s: 0.33 / 0.50).
//
// Input: [batch, 3, H, W] float RGB in [0, 1], H and W multiples of 32.
// forward() returns the raw outputs of the three levels,
// [batch, anchors, H/s, W/s, 5 + classes] each (what the loss reads);
// Decode() turns them into boxes [batch, n, 5 + classes]: x, y, w, h in
// input pixels, objectness and class probabilities (what NMS reads).
#ifndef ELASTRUN_TRAINER_DETECT_MODEL_H_
#define ELASTRUN_TRAINER_DETECT_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/detect/sync_bn.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer::detect {

// The `model` section of a detector config (`_target_: YoloV5`).
struct YoloV5Options {
  int64_t num_classes = 80;
  // YOLOv5's depth_multiple and width_multiple (n: 0.33 / 0.25, s: 0.33 /
  // 0.50); `size` fills them when set.
  double depth_multiple = 0.33;
  double width_multiple = 0.25;
  int64_t in_channels = 3;
  // Anchors in input pixels: per level (strides 8, 16, 32) three (w, h)
  // pairs. YOLOv5's defaults (COCO at 640).
  std::vector<std::vector<double>> anchors = {
      {10, 13, 16, 30, 33, 23}, {30, 61, 62, 45, 59, 119}, {116, 90, 156, 198, 373, 326}};
  // Compute in NHWC (oneDNN's faster CPU convolutions); the same function.
  bool channels_last = true;
};

// The multiples of a named size: "n" (0.33, 0.25) or "s" (0.33, 0.50).
// InvalidArgument naming the sizes for anything else.
absl::Status ApplySize(const std::string& size, YoloV5Options* options);

// YOLOv5's make_divisible(x, 8) and its depth rule max(round(n x d), 1).
int64_t Channels(int64_t channels, double width_multiple);
int64_t Depth(int64_t repeats, double depth_multiple);

class ConvBnSiluImpl : public torch::nn::Module {
 public:
  ConvBnSiluImpl(int64_t in, int64_t out, int64_t kernel = 1, int64_t stride = 1,
                 int64_t padding = -1);
  at::Tensor forward(const at::Tensor& x);

 private:
  torch::nn::Conv2d conv_{nullptr};
  SyncBatchNorm2d bn_{nullptr};  // BatchNorm2d until UseSyncBatchNorm
};
TORCH_MODULE(ConvBnSilu);

class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t in, int64_t out, bool shortcut, double expansion = 0.5);
  at::Tensor forward(const at::Tensor& x);

 private:
  ConvBnSilu cv1_{nullptr}, cv2_{nullptr};
  bool add_;
};
TORCH_MODULE(Bottleneck);

class C3Impl : public torch::nn::Module {
 public:
  C3Impl(int64_t in, int64_t out, int64_t repeats, bool shortcut = true);
  at::Tensor forward(const at::Tensor& x);

 private:
  ConvBnSilu cv1_{nullptr}, cv2_{nullptr}, cv3_{nullptr};
  torch::nn::Sequential m_{nullptr};
};
TORCH_MODULE(C3);

class SppfImpl : public torch::nn::Module {
 public:
  SppfImpl(int64_t in, int64_t out, int64_t kernel = 5);
  at::Tensor forward(const at::Tensor& x);

 private:
  ConvBnSilu cv1_{nullptr}, cv2_{nullptr};
  torch::nn::MaxPool2d pool_{nullptr};
};
TORCH_MODULE(Sppf);

// The detection head. Its buffers: `anchors` [levels, 3, 2] in grid units
// of each level (input pixels / stride) and `stride` [levels]; both are
// part of the model's state (AutoAnchor may change the anchors).
class DetectImpl : public torch::nn::Module {
 public:
  DetectImpl(int64_t num_classes, const std::vector<int64_t>& in_channels,
             const std::vector<std::vector<double>>& anchors_px);
  // Raw outputs per level: [batch, anchors, ny, nx, 5 + classes].
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& x);
  // Boxes from raw outputs: [batch, n, 5 + classes], xywh in input
  // pixels, objectness and class probabilities (sigmoid).
  at::Tensor Decode(const std::vector<at::Tensor>& raw) const;
  // Sets the strides (and turns anchors from pixels into grid units),
  // puts the anchors in the strides' order (YOLOv5's check_anchor_order)
  // and initialises the biases as YOLOv5 does (8 objects per 640 image,
  // class priors 0.6 / (classes - 0.99)).
  void Setup(const std::vector<double>& strides);
  // Anchors in input pixels [levels x 3, 2] (for AutoAnchor), and setting
  // new ones (InvalidArgument unless levels x 3 positive (w, h)).
  at::Tensor AnchorsInPixels() const;
  absl::Status SetAnchorsInPixels(const at::Tensor& anchors);

  int64_t num_classes() const { return nc_; }
  int64_t num_levels() const { return static_cast<int64_t>(heads_.size()); }
  int64_t num_anchors() const { return na_; }
  const at::Tensor& anchors() const { return anchors_; }
  const at::Tensor& stride() const { return stride_; }

 private:
  int64_t nc_, na_;
  std::vector<torch::nn::Conv2d> heads_;
  at::Tensor anchors_;  // [levels, na, 2], grid units once Setup ran.
  at::Tensor stride_;   // [levels]
};
TORCH_MODULE(Detect);

class YoloV5Impl : public torch::nn::Module {
 public:
  explicit YoloV5Impl(const YoloV5Options& options);
  // Raw outputs of the three levels (training, the loss).
  std::vector<at::Tensor> forward(const at::Tensor& images);
  // Decoded predictions (evaluation): Detect::Decode of forward.
  at::Tensor Predict(const at::Tensor& images);

  Detect& detect() { return detect_; }
  const YoloV5Options& options() const { return options_; }

 private:
  YoloV5Options options_;
  // Backbone (YOLOv5's layers 0-9) and head (10-23), named by layer.
  ConvBnSilu b0_{nullptr}, b1_{nullptr}, b3_{nullptr}, b5_{nullptr}, b7_{nullptr};
  C3 b2_{nullptr}, b4_{nullptr}, b6_{nullptr}, b8_{nullptr};
  Sppf b9_{nullptr};
  ConvBnSilu h10_{nullptr}, h14_{nullptr}, h18_{nullptr}, h21_{nullptr};
  C3 h13_{nullptr}, h17_{nullptr}, h20_{nullptr}, h23_{nullptr};
  Detect detect_{nullptr};
};
TORCH_MODULE(YoloV5);

}  // namespace elastrun::trainer::detect

#endif  // ELASTRUN_TRAINER_DETECT_MODEL_H_
