// The detector's model against YOLOv5: its parameter counts, shapes,
// strides, anchors and initial biases, and its function against a Python
// transcription of YOLOv5's modules (models/common.py, models/yolo.py) run
// by Debian's python3-torch on the same weights and input.
#include "trainer/detect/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::trainer::detect {
namespace {

int64_t Parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const at::Tensor& p : m.parameters()) n += p.numel();
  return n;
}

YoloV5Options Options(const std::string& size, int64_t nc) {
  YoloV5Options o;
  EXPECT_TRUE(ApplySize(size, &o).ok());
  o.num_classes = nc;
  return o;
}

// YOLOv5's own summaries for nc = 80: "YOLOv5n summary: ... 1872157
// parameters", "YOLOv5s summary: ... 7235389 parameters".
TEST(YoloV5Test, ParameterCountsAreYoloV5s) {
  YoloV5 n(Options("n", 80));
  YoloV5 s(Options("s", 80));
  EXPECT_EQ(Parameters(*n), 1872157);
  EXPECT_EQ(Parameters(*s), 7235389);
  YoloV5Options bad;
  EXPECT_FALSE(ApplySize("x", &bad).ok());
}

TEST(YoloV5Test, MultiplesFollowYoloV5sRules) {
  EXPECT_EQ(Channels(64, 0.25), 16);
  EXPECT_EQ(Channels(1024, 0.25), 256);
  EXPECT_EQ(Channels(100, 0.5), 56);  // ceil(50 / 8) * 8
  EXPECT_EQ(Depth(3, 0.33), 1);
  EXPECT_EQ(Depth(6, 0.33), 2);
  EXPECT_EQ(Depth(9, 0.33), 3);
  EXPECT_EQ(Depth(1, 0.33), 1);
}

TEST(YoloV5Test, OutputsStridesAnchorsAndDecodedBoxes) {
  YoloV5 m(Options("n", 10));
  const at::Tensor x = at::rand({2, 3, 320, 256});
  const std::vector<at::Tensor> raw = m->forward(x);
  ASSERT_EQ(raw.size(), 3u);
  const int64_t sizes[3][2] = {{40, 32}, {20, 16}, {10, 8}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(raw[i].sizes(), (at::IntArrayRef{2, 3, sizes[i][0], sizes[i][1], 15})) << i;
  }
  Detect& d = m->detect();
  EXPECT_TRUE(at::equal(d->stride(), at::tensor({8.f, 16.f, 32.f})));
  // Anchors kept in grid units; in pixels they are the configured ones.
  EXPECT_FLOAT_EQ(d->anchors()[0][0][0].item<float>(), 10.f / 8);
  EXPECT_FLOAT_EQ(d->anchors()[2][2][1].item<float>(), 326.f / 32);
  EXPECT_FLOAT_EQ(d->AnchorsInPixels()[8][0].item<float>(), 373.f);
  m->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor boxes = m->Predict(x);
  EXPECT_EQ(boxes.sizes(), (at::IntArrayRef{2, 3 * (40 * 32 + 20 * 16 + 10 * 8), 15}));
  // Scores are probabilities; centres within a cell's reach of the image.
  EXPECT_TRUE((boxes.slice(2, 4) >= 0).all().item<bool>());
  EXPECT_TRUE((boxes.slice(2, 4) <= 1).all().item<bool>());
  EXPECT_TRUE((boxes.select(2, 0) > -16).all().item<bool>());
  EXPECT_TRUE((boxes.select(2, 0) < 256 + 16).all().item<bool>());
}

TEST(YoloV5Test, BiasesStartFromYoloV5sPriors) {
  YoloV5 m(Options("n", 10));
  // A fresh model's objectness logit starts near log(8 / (640 / s)^2) plus
  // the conv's own small initial bias.
  for (const auto& item : m->named_parameters()) {
    if (item.key() != "detect.m0.bias") continue;
    const at::Tensor b = item.value().view({3, 15});
    const double want = std::log(8.0 / std::pow(640.0 / 8, 2));
    EXPECT_NEAR(b[0][4].item<double>(), want, 0.5);
    EXPECT_NEAR(b[0][5].item<double>(), std::log(0.6 / (10 - 0.99)), 0.5);
  }
}

TEST(YoloV5Test, AnchorsCanBeReplacedAndAreChecked) {
  YoloV5 m(Options("n", 10));
  at::Tensor a = m->detect()->AnchorsInPixels() * 0.5;
  ASSERT_TRUE(m->detect()->SetAnchorsInPixels(a).ok());
  EXPECT_TRUE(at::allclose(m->detect()->AnchorsInPixels(), a));
  EXPECT_FALSE(m->detect()->SetAnchorsInPixels(at::ones({8, 2})).ok());
  EXPECT_FALSE(m->detect()->SetAnchorsInPixels(-at::ones({9, 2})).ok());
}

// Anchors given smallest-last are put in the strides' order (YOLOv5's
// check_anchor_order).
TEST(YoloV5Test, AnchorsInReverseOrderAreFlipped) {
  YoloV5Options o = Options("n", 3);
  std::reverse(o.anchors.begin(), o.anchors.end());
  YoloV5 m(o);
  EXPECT_FLOAT_EQ(m->detect()->AnchorsInPixels()[0][0].item<float>(), 10.f);
}

// ---------------------------------------------------------- vs Python

// A Python transcription of YOLOv5's modules (Conv, Bottleneck, C3, SPPF,
// Detect and the yolov5n graph), loading this model's weights by name from
// raw float32 files, run on the same input: the raw outputs and the
// decoded boxes must agree.
constexpr char kReference[] = R"PY(
import math, sys, torch, torch.nn as nn
d = sys.argv[1]
def load(name, shape):
    import numpy
    return torch.from_numpy(numpy.fromfile(f"{d}/{name}", dtype=numpy.float32).reshape(shape))
class Conv(nn.Module):
    def __init__(s, c1, c2, k=1, st=1, p=None):
        super().__init__()
        s.conv = nn.Conv2d(c1, c2, k, st, k // 2 if p is None else p, bias=False)
        s.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        s.act = nn.SiLU()
    def forward(s, x): return s.act(s.bn(s.conv(x)))
class Bottleneck(nn.Module):
    def __init__(s, c1, c2, shortcut=True, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        s.cv1, s.cv2, s.add = Conv(c1, c_, 1, 1), Conv(c_, c2, 3, 1), shortcut and c1 == c2
    def forward(s, x): return x + s.cv2(s.cv1(x)) if s.add else s.cv2(s.cv1(x))
class C3(nn.Module):
    def __init__(s, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = int(c2 * 0.5)
        s.cv1, s.cv2, s.cv3 = Conv(c1, c_, 1, 1), Conv(c1, c_, 1, 1), Conv(2 * c_, c2, 1)
        s.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, e=1.0) for _ in range(n)))
    def forward(s, x): return s.cv3(torch.cat((s.m(s.cv1(x)), s.cv2(x)), 1))
class SPPF(nn.Module):
    def __init__(s, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        s.cv1, s.cv2 = Conv(c1, c_, 1, 1), Conv(c_ * 4, c2, 1, 1)
        s.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)
    def forward(s, x):
        x = s.cv1(x); y1 = s.m(x); y2 = s.m(y1)
        return s.cv2(torch.cat((x, y1, y2, s.m(y2)), 1))
def ch(c): return math.ceil(c * 0.25 / 8) * 8
nc, na, no = 10, 3, 15
L = {0: Conv(3, ch(64), 6, 2, 2), 1: Conv(ch(64), ch(128), 3, 2), 2: C3(ch(128), ch(128), 1),
     3: Conv(ch(128), ch(256), 3, 2), 4: C3(ch(256), ch(256), 2), 5: Conv(ch(256), ch(512), 3, 2),
     6: C3(ch(512), ch(512), 3), 7: Conv(ch(512), ch(1024), 3, 2), 8: C3(ch(1024), ch(1024), 1),
     9: SPPF(ch(1024), ch(1024), 5), 10: Conv(ch(1024), ch(512), 1, 1),
     13: C3(ch(512) * 2, ch(512), 1, False), 14: Conv(ch(512), ch(256), 1, 1),
     17: C3(ch(256) * 2, ch(256), 1, False), 18: Conv(ch(256), ch(256), 3, 2),
     20: C3(ch(256) * 2, ch(512), 1, False), 21: Conv(ch(512), ch(512), 3, 2),
     23: C3(ch(512) * 2, ch(1024), 1, False)}
heads = [nn.Conv2d(c, na * no, 1) for c in (ch(256), ch(512), ch(1024))]
names = {}
for line in open(f"{d}/names"):
    name, shape = line.split(" ", 1)
    names[name] = [int(v) for v in shape.split()]
def ours(i): return ("b" if i < 10 else "h") + str(i)
with torch.no_grad():
    for i, m in L.items():
        for k, t in list(m.named_parameters()) + list(m.named_buffers()):
            key = ours(i) + "." + k
            if key not in names:
                if "num_batches_tracked" in key: continue
                print("missing", key); sys.exit(3)
            t.copy_(load(key, names[key]).reshape(t.shape))
    for i, h in enumerate(heads):
        h.weight.copy_(load(f"detect.m{i}.weight", names[f"detect.m{i}.weight"]))
        h.bias.copy_(load(f"detect.m{i}.bias", names[f"detect.m{i}.bias"]))
    anchors = load("detect.anchors", names["detect.anchors"])
    stride = torch.tensor([8., 16., 32.])
    for m in list(L.values()) + heads: m.eval()
    x = load("input", names["input"])
    y = {}
    up = nn.Upsample(scale_factor=2, mode="nearest")
    t = x
    for i in range(10): t = L[i](t); y[i] = t
    t = L[10](t); y[10] = t
    t = L[13](torch.cat((up(t), y[6]), 1)); t = L[14](t); y[14] = t
    t = L[17](torch.cat((up(t), y[4]), 1)); y[17] = t
    t = L[20](torch.cat((L[18](t), y[14]), 1)); y[20] = t
    t = L[23](torch.cat((L[21](t), y[10]), 1)); y[23] = t
    z = []
    for i, f in enumerate((17, 20, 23)):
        p = heads[i](y[f])
        bs, _, ny, nx = p.shape
        p = p.view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        p.numpy().astype("float32").tofile(f"{d}/py_raw{i}")
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(1, na, ny, nx, 2).float() - 0.5
        ag = (anchors[i] * stride[i]).view(1, na, 1, 1, 2).expand(1, na, ny, nx, 2)
        s = p.sigmoid()
        xy = (s[..., :2] * 2 + grid) * stride[i]
        wh = (s[..., 2:4] * 2) ** 2 * ag
        z.append(torch.cat((xy, wh, s[..., 4:]), 4).view(bs, -1, no))
    torch.cat(z, 1).numpy().astype("float32").tofile(f"{d}/py_boxes")
print("ok")
)PY";

std::optional<std::string> TorchPython() {
  std::FILE* p = ::popen("/usr/bin/python3 -c 'import torch, numpy' 2>&1", "r");
  if (p == nullptr) return std::nullopt;
  char buf[256];
  std::string out;
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  if (::pclose(p) != 0) return std::nullopt;
  return std::string("/usr/bin/python3");
}

void WriteTensor(const std::string& dir, const std::string& name, const at::Tensor& t,
                 std::ofstream& names) {
  const at::Tensor c = t.detach().to(at::kFloat).contiguous();
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()),
             static_cast<std::streamsize>(c.numel() * sizeof(float)));
  names << name;
  for (int64_t s : c.sizes()) names << " " << s;
  names << "\n";
}

at::Tensor ReadTensor(const std::string& path, at::IntArrayRef shape) {
  at::Tensor t = at::empty(shape, at::kFloat);
  std::ifstream(path, std::ios::binary)
      .read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
  return t;
}

TEST(YoloV5Test, SameFunctionAsAPythonTranscriptionOfYoloV5) {
  if (!TorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("yolov5_ref_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  torch::manual_seed(3);
  YoloV5Options o = Options("n", 10);
  o.channels_last = false;
  YoloV5 m(o);
  // Random BatchNorm statistics, so eval mode tests them too.
  {
    torch::NoGradGuard no_grad;
    for (auto& item : m->named_buffers()) {
      if (item.key().find("running_mean") != std::string::npos) item.value().normal_(0, 0.1);
      if (item.key().find("running_var") != std::string::npos) item.value().uniform_(0.5, 1.5);
    }
  }
  m->eval();
  const at::Tensor x = at::rand({2, 3, 128, 96});
  {
    std::ofstream names(dir + "/names");
    for (const auto& item : m->named_parameters()) WriteTensor(dir, item.key(), item.value(), names);
    for (const auto& item : m->named_buffers()) {
      if (item.key().find("num_batches_tracked") != std::string::npos) continue;
      WriteTensor(dir, item.key(), item.value(), names);
    }
    WriteTensor(dir, "input", x, names);
  }
  const std::string script = dir + "/ref.py";
  std::ofstream(script) << kReference;
  const int rc = std::system(("/usr/bin/python3 " + script + " " + dir + " > " + dir +
                              "/out.txt 2>&1").c_str());
  std::ifstream out_file(dir + "/out.txt");
  const std::string out((std::istreambuf_iterator<char>(out_file)), {});
  ASSERT_EQ(rc, 0) << out;
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> raw = m->forward(x);
  for (size_t i = 0; i < raw.size(); ++i) {
    const at::Tensor ref = ReadTensor(dir + "/py_raw" + std::to_string(i), raw[i].sizes());
    EXPECT_TRUE(at::allclose(raw[i], ref, 1e-4, 1e-4))
        << "level " << i << ": max diff " << (raw[i] - ref).abs().max().item<double>();
  }
  const at::Tensor boxes = m->detect()->Decode(raw);
  const at::Tensor ref = ReadTensor(dir + "/py_boxes", boxes.sizes());
  EXPECT_TRUE(at::allclose(boxes, ref, 1e-4, 1e-3))
      << "max diff " << (boxes - ref).abs().max().item<double>();
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace elastrun::trainer::detect
