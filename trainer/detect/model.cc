#include "trainer/detect/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/registry.h"

namespace elastrun::trainer::detect {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

absl::Status ApplySize(const std::string& size, YoloV5Options* o) {
  if (size == "n") {
    o->depth_multiple = 0.33;
    o->width_multiple = 0.25;
  } else if (size == "s") {
    o->depth_multiple = 0.33;
    o->width_multiple = 0.50;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model size '", size, "' is not one of: n, s"));
  }
  return absl::OkStatus();
}

int64_t Channels(int64_t channels, double width_multiple) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(channels) * width_multiple / 8.0)) *
         8;
}

int64_t Depth(int64_t repeats, double depth_multiple) {
  if (repeats <= 1) return repeats;
  // Python's round(): half to even (nearbyint in the default mode).
  return std::max<int64_t>(
      static_cast<int64_t>(std::nearbyint(static_cast<double>(repeats) * depth_multiple)), 1);
}

// ---------------------------------------------------------------- blocks

ConvBnSiluImpl::ConvBnSiluImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                               int64_t padding) {
  conv_ = register_module(
      "conv", nn::Conv2d(nn::Conv2dOptions(in, out, kernel)
                             .stride(stride)
                             .padding(padding < 0 ? kernel / 2 : padding)
                             .bias(false)));
  // YOLOv5's initialize_weights: eps 1e-3, momentum 0.03.
  bn_ = register_module(
      "bn", SyncBatchNorm2d(nn::BatchNorm2dOptions(out).eps(1e-3).momentum(0.03)));
}

at::Tensor ConvBnSiluImpl::forward(const at::Tensor& x) {
  return F::silu(bn_->forward(conv_->forward(x)));
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t out, bool shortcut, double expansion)
    : add_(shortcut && in == out) {
  const auto hidden = static_cast<int64_t>(static_cast<double>(out) * expansion);
  cv1_ = register_module("cv1", ConvBnSilu(in, hidden, 1, 1));
  cv2_ = register_module("cv2", ConvBnSilu(hidden, out, 3, 1));
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  at::Tensor y = cv2_->forward(cv1_->forward(x));
  return add_ ? x + y : y;
}

C3Impl::C3Impl(int64_t in, int64_t out, int64_t repeats, bool shortcut) {
  const int64_t hidden = out / 2;
  cv1_ = register_module("cv1", ConvBnSilu(in, hidden, 1, 1));
  cv2_ = register_module("cv2", ConvBnSilu(in, hidden, 1, 1));
  cv3_ = register_module("cv3", ConvBnSilu(2 * hidden, out, 1, 1));
  m_ = register_module("m", nn::Sequential());
  for (int64_t i = 0; i < repeats; ++i) m_->push_back(Bottleneck(hidden, hidden, shortcut, 1.0));
}

at::Tensor C3Impl::forward(const at::Tensor& x) {
  return cv3_->forward(at::cat({m_->forward(cv1_->forward(x)), cv2_->forward(x)}, 1));
}

SppfImpl::SppfImpl(int64_t in, int64_t out, int64_t kernel) {
  const int64_t hidden = in / 2;
  cv1_ = register_module("cv1", ConvBnSilu(in, hidden, 1, 1));
  cv2_ = register_module("cv2", ConvBnSilu(hidden * 4, out, 1, 1));
  pool_ = register_module(
      "pool", nn::MaxPool2d(nn::MaxPool2dOptions(kernel).stride(1).padding(kernel / 2)));
}

at::Tensor SppfImpl::forward(const at::Tensor& x) {
  at::Tensor a = cv1_->forward(x);
  at::Tensor b = pool_->forward(a);
  at::Tensor c = pool_->forward(b);
  return cv2_->forward(at::cat({a, b, c, pool_->forward(c)}, 1));
}

// ---------------------------------------------------------------- Detect

DetectImpl::DetectImpl(int64_t num_classes, const std::vector<int64_t>& in_channels,
                       const std::vector<std::vector<double>>& anchors_px)
    : nc_(num_classes), na_(static_cast<int64_t>(anchors_px.at(0).size() / 2)) {
  const int64_t nl = static_cast<int64_t>(in_channels.size());
  for (int64_t i = 0; i < nl; ++i) {
    heads_.push_back(register_module(absl::StrCat("m", i),
                                     nn::Conv2d(nn::Conv2dOptions(in_channels[i],
                                                                  na_ * (5 + nc_), 1))));
  }
  std::vector<double> flat;
  for (const auto& level : anchors_px) flat.insert(flat.end(), level.begin(), level.end());
  anchors_ = register_buffer(
      "anchors", at::tensor(flat, at::kFloat).view({nl, na_, 2}));
  stride_ = register_buffer("stride", at::zeros({nl}, at::kFloat));
}

std::vector<at::Tensor> DetectImpl::forward(const std::vector<at::Tensor>& x) {
  std::vector<at::Tensor> out;
  out.reserve(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    at::Tensor y = heads_[i]->forward(x[i]);
    const int64_t bs = y.size(0), ny = y.size(2), nx = y.size(3);
    out.push_back(y.view({bs, na_, 5 + nc_, ny, nx}).permute({0, 1, 3, 4, 2}).contiguous());
  }
  return out;
}

at::Tensor DetectImpl::Decode(const std::vector<at::Tensor>& raw) const {
  std::vector<at::Tensor> levels;
  for (size_t i = 0; i < raw.size(); ++i) {
    const at::Tensor y = raw[i].sigmoid();
    const int64_t bs = y.size(0), ny = y.size(2), nx = y.size(3);
    const auto options = at::TensorOptions().dtype(y.scalar_type()).device(y.device());
    std::vector<at::Tensor> yx = at::meshgrid({at::arange(ny, options), at::arange(nx, options)},
                                              "ij");
    // Cell corners shifted by half a cell: xy = (2 sigmoid - 0.5 + cell) x stride.
    const at::Tensor grid = at::stack({yx[1], yx[0]}, 2).view({1, 1, ny, nx, 2}) - 0.5;
    const double s = stride_[static_cast<int64_t>(i)].item<double>();
    const at::Tensor anchor_grid =
        (anchors_[static_cast<int64_t>(i)] * s).to(y.device()).view({1, na_, 1, 1, 2});
    const at::Tensor xy = (y.slice(4, 0, 2) * 2 + grid) * s;
    const at::Tensor wh = (y.slice(4, 2, 4) * 2).pow(2) * anchor_grid;
    levels.push_back(at::cat({xy, wh, y.slice(4, 4)}, 4).view({bs, -1, 5 + nc_}));
  }
  return at::cat(levels, 1);
}

void DetectImpl::Setup(const std::vector<double>& strides) {
  torch::NoGradGuard no_grad;
  const int64_t nl = num_levels();
  stride_.copy_(at::tensor(strides, at::kFloat));
  // YOLOv5's check_anchor_order: anchor areas in the order of the strides.
  const at::Tensor area = anchors_.prod(-1).mean(-1).view({-1});
  const double da = (area[nl - 1] - area[0]).item<double>();
  const double ds = strides.back() - strides.front();
  if (da != 0 && (da > 0) != (ds > 0)) anchors_.copy_(anchors_.flip({0}));
  anchors_.div_(stride_.view({-1, 1, 1}));
  for (int64_t i = 0; i < nl; ++i) {
    at::Tensor b = heads_[static_cast<size_t>(i)]->bias.view({na_, -1});
    const double s = strides[static_cast<size_t>(i)];
    b.select(1, 4).add_(std::log(8.0 / std::pow(640.0 / s, 2)));
    b.slice(1, 5, 5 + nc_).add_(std::log(0.6 / (static_cast<double>(nc_) - 0.99)));
  }
}

at::Tensor DetectImpl::AnchorsInPixels() const {
  return (anchors_ * stride_.view({-1, 1, 1})).view({-1, 2});
}

absl::Status DetectImpl::SetAnchorsInPixels(const at::Tensor& anchors) {
  const int64_t nl = num_levels();
  if (anchors.dim() != 2 || anchors.size(0) != nl * na_ || anchors.size(1) != 2 ||
      !(anchors > 0).all().item<bool>()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "anchors must be ", nl * na_, " positive (w, h) pairs, got shape [",
        absl::StrJoin(anchors.sizes(), ","), "]"));
  }
  torch::NoGradGuard no_grad;
  anchors_.copy_(anchors.to(anchors_.options()).view({nl, na_, 2}) /
                 stride_.view({-1, 1, 1}));
  return absl::OkStatus();
}

// ---------------------------------------------------------------- YoloV5

YoloV5Impl::YoloV5Impl(const YoloV5Options& o) : options_(o) {
  auto ch = [&](int64_t c) { return Channels(c, o.width_multiple); };
  auto n = [&](int64_t r) { return Depth(r, o.depth_multiple); };
  b0_ = register_module("b0", ConvBnSilu(o.in_channels, ch(64), 6, 2, 2));
  b1_ = register_module("b1", ConvBnSilu(ch(64), ch(128), 3, 2));
  b2_ = register_module("b2", C3(ch(128), ch(128), n(3)));
  b3_ = register_module("b3", ConvBnSilu(ch(128), ch(256), 3, 2));
  b4_ = register_module("b4", C3(ch(256), ch(256), n(6)));
  b5_ = register_module("b5", ConvBnSilu(ch(256), ch(512), 3, 2));
  b6_ = register_module("b6", C3(ch(512), ch(512), n(9)));
  b7_ = register_module("b7", ConvBnSilu(ch(512), ch(1024), 3, 2));
  b8_ = register_module("b8", C3(ch(1024), ch(1024), n(3)));
  b9_ = register_module("b9", Sppf(ch(1024), ch(1024), 5));
  h10_ = register_module("h10", ConvBnSilu(ch(1024), ch(512), 1, 1));
  h13_ = register_module("h13", C3(ch(512) * 2, ch(512), n(3), false));
  h14_ = register_module("h14", ConvBnSilu(ch(512), ch(256), 1, 1));
  h17_ = register_module("h17", C3(ch(256) * 2, ch(256), n(3), false));
  h18_ = register_module("h18", ConvBnSilu(ch(256), ch(256), 3, 2));
  h20_ = register_module("h20", C3(ch(256) * 2, ch(512), n(3), false));
  h21_ = register_module("h21", ConvBnSilu(ch(512), ch(512), 3, 2));
  h23_ = register_module("h23", C3(ch(512) * 2, ch(1024), n(3), false));
  detect_ = register_module(
      "detect", Detect(o.num_classes, std::vector<int64_t>{ch(256), ch(512), ch(1024)}, o.anchors));
  // Strides from a forward pass (eval: no BatchNorm statistics change).
  const bool was_training = is_training();
  eval();
  std::vector<double> strides;
  {
    torch::NoGradGuard no_grad;
    constexpr int64_t kProbe = 256;
    for (const at::Tensor& level : forward(at::zeros({1, o.in_channels, kProbe, kProbe}))) {
      strides.push_back(static_cast<double>(kProbe) / static_cast<double>(level.size(2)));
    }
  }
  train(was_training);
  detect_->Setup(strides);
  if (o.channels_last) {
    // NHWC weights as well as activations, as Python's
    // model.to(memory_format=torch.channels_last): oneDNN reorders no
    // weight per step, and every gradient comes in its parameter's layout
    // (a 1x1 kernel's NHWC gradient otherwise differs from its row-major
    // parameter in the strides of its size-1 dimensions, which DDP's
    // reducer copies and warns about). clone, not contiguous: a tensor that
    // is already "channels last contiguous" in row-major strides would
    // stay row-major.
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : parameters()) {
      if (p.dim() == 4) p.set_data(p.clone(at::MemoryFormat::ChannelsLast));
    }
  }
}

std::vector<at::Tensor> YoloV5Impl::forward(const at::Tensor& images) {
  auto up = [](const at::Tensor& x) {
    return F::interpolate(x, F::InterpolateFuncOptions()
                                 .scale_factor(std::vector<double>{2, 2})
                                 .mode(torch::kNearest));
  };
  const at::Tensor x = options_.channels_last
                           ? images.contiguous(at::MemoryFormat::ChannelsLast)
                           : images;
  const at::Tensor p3 = b4_->forward(b3_->forward(b2_->forward(b1_->forward(b0_->forward(x)))));
  const at::Tensor p4 = b6_->forward(b5_->forward(p3));
  const at::Tensor x10 = h10_->forward(b9_->forward(b8_->forward(b7_->forward(p4))));
  const at::Tensor x14 = h14_->forward(h13_->forward(at::cat({up(x10), p4}, 1)));
  const at::Tensor o3 = h17_->forward(at::cat({up(x14), p3}, 1));
  const at::Tensor o4 = h20_->forward(at::cat({h18_->forward(o3), x14}, 1));
  const at::Tensor o5 = h23_->forward(at::cat({h21_->forward(o4), x10}, 1));
  return detect_->forward({o3, o4, o5});
}

at::Tensor YoloV5Impl::Predict(const at::Tensor& images) {
  return detect_->Decode(forward(images));
}

namespace {

using config::Args;
using config::Object;
using config::Schema;
using config::Type;

ELASTRUN_REGISTER_TARGET(
    "YoloV5",
    "YOLOv5 (v6 layout): CSP backbone with SPPF, PAN neck, Detect on strides 8, 16, 32, "
    "3 anchors each.",
    Schema()
        .Required("num_classes", Type::Int(), "Classes (usually ${data.nc}).")
        .Optional("size", Type::String(), "n", "n (depth 0.33, width 0.25) or s (0.33, 0.50).")
        .Optional("in_channels", Type::Int(), "3", "Input channels.")
        .Optional("anchors", Type::List(Type::List(Type::Double())),
                  "[[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], "
                  "[116, 90, 156, 198, 373, 326]]",
                  "Per level (strides 8, 16, 32) three (w, h) pairs in input pixels.")
        .Optional("channels_last", Type::Bool(), "true",
                  "Compute in NHWC (faster CPU convolutions; the same function)."),
    [](const Args& args) -> absl::StatusOr<Object> {
      YoloV5Options o;
      o.num_classes = args.Int("num_classes");
      if (o.num_classes < 1) return args.Error("num_classes", "must be at least 1");
      if (absl::Status s = ApplySize(args.String("size"), &o); !s.ok()) {
        return args.Error("size", std::string(s.message()));
      }
      o.in_channels = args.Int("in_channels");
      o.channels_last = args.Bool("channels_last");
      o.anchors.clear();
      for (const config::Node& level : args.Value("anchors").items()) {
        std::vector<double> pairs;
        for (const config::Node& v : level.items()) pairs.push_back(v.as_double());
        if (pairs.size() != 6) return args.Error("anchors", "needs 3 (w, h) pairs per level");
        for (double v : pairs) {
          if (!(v > 0)) return args.Error("anchors", "sizes must be positive");
        }
        o.anchors.push_back(std::move(pairs));
      }
      if (o.anchors.size() != 3) return args.Error("anchors", "needs 3 levels");
      return Object::Of(YoloV5(o));
    });

}  // namespace
}  // namespace elastrun::trainer::detect
