#include "trainer/models.h"

#include "absl/strings/str_cat.h"
#include "common/config/registry.h"

namespace elastrun::trainer {

namespace nn = torch::nn;

Model MakeMlp(const MlpOptions& o) {
  Model m;
  m->push_back("flatten", nn::Flatten());
  int64_t in = o.in_features;
  for (size_t i = 0; i < o.hidden.size(); ++i) {
    m->push_back(absl::StrCat("fc", i), nn::Linear(in, o.hidden[i]));
    m->push_back(absl::StrCat("relu", i), nn::ReLU());
    if (o.dropout > 0) m->push_back(absl::StrCat("drop", i), nn::Dropout(o.dropout));
    in = o.hidden[i];
  }
  m->push_back("head", nn::Linear(in, o.num_classes));
  return m;
}

Model MakeCnn(const CnnOptions& o) {
  Model m;
  if (o.channels_last) {
    m->push_back("nhwc", nn::Functional([](const at::Tensor& x) {
                   return x.contiguous(at::MemoryFormat::ChannelsLast);
                 }));
  }
  int64_t in = o.in_channels;
  int64_t size = o.image_size;
  for (size_t i = 0; i < o.channels.size(); ++i) {
    m->push_back(absl::StrCat("conv", i),
                 nn::Conv2d(nn::Conv2dOptions(in, o.channels[i], o.kernel_size)
                                .padding(o.kernel_size / 2)
                                .bias(false)));
    m->push_back(absl::StrCat("bn", i), nn::BatchNorm2d(o.channels[i]));
    m->push_back(absl::StrCat("relu", i), nn::ReLU());
    m->push_back(absl::StrCat("pool", i), nn::MaxPool2d(2));
    in = o.channels[i];
    size /= 2;
  }
  m->push_back("flatten", nn::Flatten());
  m->push_back("fc", nn::Linear(in * size * size, o.hidden));
  m->push_back("relu", nn::ReLU());
  if (o.dropout > 0) m->push_back("drop", nn::Dropout(o.dropout));
  m->push_back("head", nn::Linear(o.hidden, o.num_classes));
  if (o.channels_last) {
    torch::NoGradGuard no_grad;
    // clone, not contiguous: a 1-input-channel weight is already "channels
    // last contiguous" in its row-major strides, and would stay row-major,
    // taking the first convolution (and everything after it up to the
    // next) off the NHWC path.
    for (at::Tensor& p : m->parameters()) {
      if (p.dim() == 4) p.set_data(p.clone(at::MemoryFormat::ChannelsLast));
    }
  }
  return m;
}

namespace {

using config::Args;
using config::Object;
using config::Schema;
using config::Type;

absl::Status CheckPositive(const Args& args, const char* name,
                           const std::vector<int64_t>& values) {
  for (int64_t v : values) {
    if (v <= 0) return args.Error(name, "every entry must be positive");
  }
  return absl::OkStatus();
}

ELASTRUN_REGISTER_TARGET(
    "MLP", "Multi-layer perceptron: Flatten, (Linear, ReLU, Dropout) per hidden width, Linear.",
    Schema()
        .Optional("in_features", Type::Int(), "784", "Inputs (channels * height * width).")
        .Optional("hidden", Type::List(Type::Int()), "[256, 256]", "Hidden widths.")
        .Optional("num_classes", Type::Int(), "10", "Outputs.")
        .Optional("dropout", Type::Double(), "0.0", "Dropout after each hidden layer."),
    [](const Args& args) -> absl::StatusOr<Object> {
      MlpOptions o;
      o.in_features = args.Int("in_features");
      o.hidden = args.IntList("hidden");
      o.num_classes = args.Int("num_classes");
      o.dropout = args.Double("dropout");
      if (o.in_features <= 0) return args.Error("in_features", "must be positive");
      if (o.num_classes <= 0) return args.Error("num_classes", "must be positive");
      if (o.dropout < 0 || o.dropout >= 1) return args.Error("dropout", "must be in [0, 1)");
      if (absl::Status s = CheckPositive(args, "hidden", o.hidden); !s.ok()) return s;
      return Object::Of(MakeMlp(o));
    });

ELASTRUN_REGISTER_TARGET(
    "CNN",
    "Small CNN: (Conv2d, BatchNorm2d, ReLU, MaxPool2d) per width, then Linear, ReLU, "
    "Dropout, Linear.",
    Schema()
        .Optional("in_channels", Type::Int(), "1", "Input channels.")
        .Optional("channels", Type::List(Type::Int()), "[32, 64]", "Conv widths.")
        .Optional("kernel_size", Type::Int(), "3", "Conv kernel (odd; same padding).")
        .Optional("image_size", Type::Int(), "28", "Input height and width.")
        .Optional("hidden", Type::Int(), "128", "Width of the hidden linear layer.")
        .Optional("num_classes", Type::Int(), "10", "Outputs.")
        .Optional("dropout", Type::Double(), "0.0", "Dropout before the head.")
        .Optional("channels_last", Type::Bool(), "true",
                  "NHWC layout for the convolutions (same math; faster CPU kernels)."),
    [](const Args& args) -> absl::StatusOr<Object> {
      CnnOptions o;
      o.channels_last = args.Bool("channels_last");
      o.in_channels = args.Int("in_channels");
      o.channels = args.IntList("channels");
      o.kernel_size = args.Int("kernel_size");
      o.image_size = args.Int("image_size");
      o.hidden = args.Int("hidden");
      o.num_classes = args.Int("num_classes");
      o.dropout = args.Double("dropout");
      if (o.in_channels <= 0) return args.Error("in_channels", "must be positive");
      if (o.channels.empty()) return args.Error("channels", "needs at least one width");
      if (absl::Status s = CheckPositive(args, "channels", o.channels); !s.ok()) return s;
      if (o.kernel_size <= 0 || o.kernel_size % 2 == 0) {
        return args.Error("kernel_size", "must be odd and positive");
      }
      if ((o.image_size >> o.channels.size()) <= 0) {
        return args.Error("channels", absl::StrCat(o.channels.size(),
                                                   " pooling stages leave nothing of a ",
                                                   o.image_size, "-pixel image"));
      }
      if (o.hidden <= 0) return args.Error("hidden", "must be positive");
      if (o.num_classes <= 0) return args.Error("num_classes", "must be positive");
      if (o.dropout < 0 || o.dropout >= 1) return args.Error("dropout", "must be in [0, 1)");
      return Object::Of(MakeCnn(o));
    });

}  // namespace
}  // namespace elastrun::trainer
