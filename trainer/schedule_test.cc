// CosineAnnealingWarmRestarts against torch.optim.lr_scheduler's, run by
// python3-torch at fractional epochs, and behind YOLOv5's warm-up.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/schedule.h"

namespace elastrun::trainer {
namespace {

bool HaveTorchPython() {
  return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
}

// torch's lr after scheduler.step(e) for each e of `epochs`.
std::vector<double> TorchLrs(const std::vector<double>& epochs, double lr0, int64_t t_0,
                             int64_t t_mult, double eta_min) {
  std::ostringstream script;
  script.precision(17);
  script << "import warnings, torch\nwarnings.simplefilter('ignore')\n"
         << "p = [torch.nn.Parameter(torch.zeros(1))]\n"
         << "opt = torch.optim.SGD(p, lr=" << lr0 << ")\n"
         << "s = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=" << t_0
         << ", T_mult=" << t_mult << ", eta_min=" << eta_min << ")\n"
         << "for e in [";
  for (double e : epochs) script << e << ", ";
  script << "]:\n    s.step(e)\n    print(repr(opt.param_groups[0]['lr']))\n";
  const std::string command = "/usr/bin/python3 -c \"" + script.str() + "\"";
  FILE* p = ::popen(command.c_str(), "r");
  std::vector<double> lrs;
  double v;
  while (p != nullptr && std::fscanf(p, "%lf", &v) == 1) lrs.push_back(v);
  if (p != nullptr) ::pclose(p);
  return lrs;
}

TEST(CosineRestartsTest, EqualsTorchsSchedulerAtFractionalEpochs) {
  if (!HaveTorchPython()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  std::vector<double> epochs;
  for (int i = 0; i <= 160; ++i) epochs.push_back(i * 0.137);  // into the 4th period of 3, 6, 12
  for (double e : {3.0, 9.0, 21.0, 2.999999, 8.5}) epochs.push_back(e);
  struct Case {
    int64_t t_0, t_mult;
    double eta_min;
  };
  for (const Case& c : {Case{3, 2, 1e-4}, Case{3, 1, 0.0}, Case{2, 3, 0.002}}) {
    SCOPED_TRACE(std::to_string(c.t_0) + " " + std::to_string(c.t_mult));
    const std::vector<double> want = TorchLrs(epochs, 0.01, c.t_0, c.t_mult, c.eta_min);
    ASSERT_EQ(want.size(), epochs.size());
    for (size_t i = 0; i < epochs.size(); ++i) {
      EXPECT_NEAR(CosineRestartsLr(epochs[i], 0.01, c.t_0, c.t_mult, c.eta_min), want[i], 1e-15)
          << "epoch " << epochs[i];
    }
  }
}

TEST(CosineRestartsTest, FollowsYoloV5sWarmUpAtTheSampleTrained) {
  ScheduleOptions o;
  o.decay = ScheduleOptions::Decay::kCosineRestarts;
  o.t_0 = 2;
  o.t_mult = 2;
  o.eta_min = 1e-4;
  constexpr int64_t kEpoch = 1000, kBatch = 10;
  const int64_t warmup = YoloV5Schedule::WarmupSamples(o, kEpoch / kBatch, kBatch);
  ASSERT_EQ(warmup, 300 * kBatch);  // 3 epochs of 100 batches
  auto s = YoloV5Schedule::Create(o, 0.01, 64, warmup, kEpoch);
  ASSERT_TRUE(s.ok()) << s.status();
  // Warm-up: from 0 towards the restarts' lr at the same sample.
  const IterationValues mid = s->At(1500, 1, kBatch);
  EXPECT_DOUBLE_EQ(mid.lr, 0.5 * CosineRestartsLr(1.5, 0.01, 2, 2, 1e-4));
  EXPECT_DOUBLE_EQ(mid.momentum, 0.8 + 0.5 * (0.937 - 0.8));
  // After it: the restarts' lr at the fractional epoch, whatever `epoch` says.
  for (int64_t seen : {3001, 4321, 5999, 6000, 13999, 14000}) {
    const IterationValues v = s->At(seen, seen / kEpoch, kBatch);
    const double want = CosineRestartsLr(static_cast<double>(seen) / kEpoch, 0.01, 2, 2, 1e-4);
    EXPECT_EQ(v.lr, want) << seen;
    EXPECT_EQ(v.bias_lr, want) << seen;
    EXPECT_EQ(v.momentum, 0.937);
  }
  // A restart at 6 epochs (2 + 4): back to lr0.
  EXPECT_DOUBLE_EQ(s->At(6000, 6, kBatch).lr, 0.01);
  EXPECT_LT(s->At(5999, 5, kBatch).lr, 2e-4);
}

TEST(CosineRestartsTest, BadSettingsAreNamed) {
  ScheduleOptions o;
  o.decay = ScheduleOptions::Decay::kCosineRestarts;
  o.epochs = 0;  // not used by restarts
  EXPECT_FALSE(YoloV5Schedule::Create(o, 0.01, 64, 0, 0).ok());  // no epoch size
  EXPECT_TRUE(YoloV5Schedule::Create(o, 0.01, 64, 0, 100).ok());
  o.t_0 = 0;
  auto s = YoloV5Schedule::Create(o, 0.01, 64, 0, 100);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("T_0"), std::string::npos);
}

}  // namespace
}  // namespace elastrun::trainer
