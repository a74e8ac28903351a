// ModelEma against a Python transcription of YOLOv5's ModelEMA
// (utils/torch_utils.py) run by python3-torch on the same sequence of
// model states, and its resumption from a saved state.
#include "trainer/detect/ema.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace elastrun::trainer::detect {
namespace {

// A Linear and a BatchNorm1d: parameters, float buffers and an int buffer.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
    // Python's .double(): floating entries only (Module::to(dtype) would
    // make num_batches_tracked a double too).
    torch::NoGradGuard no_grad;
    for (at::Tensor& t : parameters()) t.set_data(t.to(at::kDouble));
    for (at::Tensor& t : buffers()) {
      if (at::isFloatingType(t.scalar_type())) t.set_data(t.to(at::kDouble));
    }
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

torch::OrderedDict<std::string, at::Tensor> State(const torch::nn::Module& m) {
  auto state = m.named_parameters();
  for (const auto& b : m.named_buffers()) state.insert(b.key(), b.value());
  return state;
}

// Moves the model somewhere new, as a training step would.
void RandomStep(Net& net, int64_t step) {
  torch::NoGradGuard no_grad;
  for (auto& e : State(*net)) {
    if (at::isFloatingType(e.value().scalar_type())) {
      e.value().add_(at::randn(e.value().sizes(), at::kDouble));
    } else {
      e.value().fill_(step);
    }
  }
}

constexpr char kReference[] = R"PY(
import math, sys
from copy import deepcopy
import numpy as np
import torch
import torch.nn as nn

# YOLOv5's utils/torch_utils.py ModelEMA (de_parallel is the identity here).
class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=2000, updates=0):
        self.ema = deepcopy(model).eval()
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

d = sys.argv[1]
decay, tau, steps = open(f"{d}/args").read().split()
steps = int(steps)
net = Net().double()
def load(k):
    sd = net.state_dict()
    with torch.no_grad():
        for name, v in sd.items():
            a = np.fromfile(f"{d}/s{k}_{name}", dtype="float64")
            v.copy_(torch.from_numpy(a).view(v.shape).to(v.dtype))
load(0)
ema = ModelEMA(net, float(decay), float(tau))
for k in range(1, steps + 1):
    load(k)
    ema.update(net)
for name, v in ema.ema.state_dict().items():
    v.double().numpy().tofile(f"{d}/ema_{name}")
print(ema.updates, repr(ema.decay(ema.updates)), file=open(f"{d}/py_out", "w"))
)PY";

bool HaveTorchPython() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' > /dev/null 2>&1") == 0;
}

void WriteState(const std::string& dir, int k, const torch::nn::Module& m) {
  for (const auto& e : State(m)) {
    const at::Tensor c = e.value().detach().to(at::kDouble).contiguous();
    std::ofstream(dir + "/s" + std::to_string(k) + "_" + e.key(), std::ios::binary)
        .write(static_cast<const char*>(c.data_ptr()),
               static_cast<std::streamsize>(c.numel() * sizeof(double)));
  }
}

void CompareWithPython(double decay, double tau, int steps) {
  SCOPED_TRACE("decay " + std::to_string(decay) + " tau " + std::to_string(tau));
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("yolov5_ema_" + std::to_string(::getpid()) + "_" +
                            std::to_string(static_cast<int>(tau))))
                              .string();
  std::filesystem::create_directories(dir);
  torch::manual_seed(static_cast<uint64_t>(tau));
  Net net;
  ModelEma ema(Net().ptr(), decay, tau);
  WriteState(dir, 0, *net);
  ema->Init(*net);
  for (int k = 1; k <= steps; ++k) {
    RandomStep(net, k);
    WriteState(dir, k, *net);
    ema->Update(*net);
  }
  std::ofstream(dir + "/args") << decay << " " << tau << " " << steps;
  std::ofstream(dir + "/ref.py") << kReference;
  const int rc = std::system(
      ("/usr/bin/python3 " + dir + "/ref.py " + dir + " > " + dir + "/out 2>&1").c_str());
  std::ifstream out_file(dir + "/out");
  const std::string out((std::istreambuf_iterator<char>(out_file)), {});
  ASSERT_EQ(rc, 0) << out;
  int64_t py_updates = 0;
  double py_decay = 0;
  std::ifstream(dir + "/py_out") >> py_updates >> py_decay;
  EXPECT_EQ(ema->updates(), py_updates);
  EXPECT_EQ(ema->decay_now(), py_decay);
  const auto model_state = State(*net);
  for (const auto& e : State(*ema->model())) {
    const at::Tensor& v = e.value();
    if (!at::isFloatingType(v.scalar_type())) {
      // YOLOv5 leaves num_batches_tracked at the copy's; this copies it.
      EXPECT_TRUE(at::equal(v, model_state[e.key()])) << e.key();
      continue;
    }
    at::Tensor want = at::empty(v.sizes(), at::kDouble);
    std::ifstream(dir + "/ema_" + e.key(), std::ios::binary)
        .read(static_cast<char*>(want.data_ptr()), static_cast<std::streamsize>(want.numel() * 8));
    EXPECT_TRUE(at::equal(v, want)) << e.key() << ": max diff "
                                    << (v - want).abs().max().item<double>();
    EXPECT_FALSE(v.requires_grad()) << e.key();
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

TEST(ModelEmaTest, EqualsYoloV5sModelEmaBitwise) {
  if (!HaveTorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available";
  CompareWithPython(0.9999, 2000, 6);
  CompareWithPython(0.9, 3, 8);  // decays that mix the two visibly
}

TEST(ModelEmaTest, DecayRampsUpAndTheCopyStaysInEval) {
  ModelEma ema(Net().ptr(), 0.9999, 2000);
  EXPECT_EQ(ema->decay_now(), 0.0);
  EXPECT_FALSE(ema->model()->is_training());
  ema->train();
  EXPECT_FALSE(ema->model()->is_training());
  Net net;
  for (int i = 0; i < 3; ++i) ema->Update(*net);
  EXPECT_EQ(ema->updates(), 3);
  EXPECT_DOUBLE_EQ(ema->decay_now(), 0.9999 * (1 - std::exp(-3.0 / 2000)));
  // The state a checkpoint saves: the copy's entries and the count.
  const auto buffers = ema->named_buffers();
  EXPECT_NE(buffers.find("updates"), nullptr);
  EXPECT_NE(buffers.find("model.bn.running_mean"), nullptr);
  EXPECT_NE(ema->named_parameters().find("model.fc.weight"), nullptr);
}

TEST(ModelEmaTest, ALoadedStateContinuesIdentically) {
  torch::manual_seed(7);
  Net net;
  ModelEma a(Net().ptr(), 0.9, 5);
  a->Init(*net);
  for (int k = 1; k <= 3; ++k) {
    RandomStep(net, k);
    a->Update(*net);
  }
  std::stringstream saved;
  torch::save(a, saved);
  ModelEma b(Net().ptr(), 0.9, 5);
  torch::load(b, saved);
  EXPECT_EQ(b->updates(), 3);
  EXPECT_EQ(b->decay_now(), a->decay_now());
  for (int k = 4; k <= 6; ++k) {
    RandomStep(net, k);
    a->Update(*net);
    b->Update(*net);
  }
  EXPECT_EQ(b->updates(), 6);
  const auto want = State(*a);
  for (const auto& e : State(*b)) {
    EXPECT_TRUE(at::equal(e.value(), want[e.key()])) << e.key();
  }
}

TEST(ModelEmaTest, AModelOfAnotherShapeIsNamed) {
  ModelEma ema(Net().ptr());
  torch::nn::Linear other(4, 3);
  try {
    ema->Init(*other);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fc.weight'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace elastrun::trainer::detect
