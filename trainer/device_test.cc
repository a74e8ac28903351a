// Where the trainer trains and in what precision (device.h): train.device
// and train.amp_dtype checked and resolved, autocast scoped as
// torch.autocast is, batches and state images that work on every device.
// This machine's LibTorch is a CPU build, so the CPU side runs here for
// real; the tests that need a GPU skip with a message saying so and run on
// a machine with one (scripts/device_kit.sh).
#include <torch/cuda.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/options.h"
#include "trainer/state_image.h"
#include "trainer/trainer.h"
#include "trainer/trainer_test_util.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::ReadAll;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

bool HaveGpu() { return torch::cuda::is_available(); }

TrainOptions Train(const std::string& device, bool amp = false,
                   const std::string& amp_dtype = "float16") {
  TrainOptions t;
  t.device = device;
  t.amp = amp;
  t.amp_dtype = amp_dtype;
  return t;
}

TrainerConfig Config(const std::string& dir, const std::vector<std::string>& more = {}) {
  fs::create_directories(dir);
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_cnn.yaml\n";
  std::vector<std::string> overrides = {
      "data.synthetic=true", "+data.synthetic_train_size=512", "+data.synthetic_test_size=256",
      "data.batch_size=32",  "train.epochs=2",                 "train.output_dir=" + dir};
  overrides.insert(overrides.end(), more.begin(), more.end());
  absl::StatusOr<TrainerConfig> cfg = LoadTrainerConfig(path, overrides);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return cfg.ok() ? *cfg : TrainerConfig{};
}

// One process, as `elastrun-train` alone runs; its output in `*out`.
absl::StatusOr<TrainResult> RunOnce(const TrainerConfig& cfg, std::string* out,
                                    std::optional<std::string> resume = std::nullopt) {
  RunOptions run;
  run.out = std::tmpfile();
  run.resume = std::move(resume);
  absl::StatusOr<TrainResult> r = TrainOnGroup(cfg, run, nullptr);
  *out = ReadAll(run.out);
  std::fclose(run.out);
  return r;
}

TEST(DeviceConfigTest, BadDeviceOrAmpTypeNamesTheKey) {
  const std::string dir = TestDir();
  fs::create_directories(dir);
  const std::string path = dir + "/cfg.yaml";
  std::ofstream(path) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_mlp.yaml\n";
  auto error = [&](const std::string& o) {
    absl::StatusOr<TrainerConfig> cfg = LoadTrainerConfig(path, {o});
    return cfg.ok() ? std::string("<ok>") : std::string(cfg.status().message());
  };
  EXPECT_THAT(error("train.device=gpu"),
              HasSubstr("train.device: 'gpu' is not auto, cpu, cuda or cuda:N"));
  EXPECT_THAT(error("train.device=cuda:"), HasSubstr("train.device"));
  EXPECT_THAT(error("train.amp_dtype=fp8"),
              HasSubstr("train.amp_dtype: 'fp8' is not float16 or bfloat16"));
  EXPECT_EQ(error("train.device=cuda:1"), "<ok>");  // Checked against GPUs at run time.
  EXPECT_EQ(error("train.amp_dtype=bfloat16"), "<ok>");
}

TEST(PlacementTest, AutoIsTheLocalRanksGpuOrTheCpu) {
  absl::StatusOr<Placement> p = ResolvePlacement(Train("auto"), 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, HaveGpu() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
  EXPECT_FALSE(p->autocast);
  EXPECT_FALSE(p->loss_scaling);
  p = ResolvePlacement(Train("cpu"), 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Describe(), "cpu");
}

TEST(PlacementTest, CudaWhereNoneIsUsableIsAClearError) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is usable here: the error cannot happen";
  for (const char* device : {"cuda", "cuda:1"}) {
    absl::StatusOr<Placement> p = ResolvePlacement(Train(device), 0);
    ASSERT_FALSE(p.ok()) << device;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(p.status().message()),
                HasSubstr(std::string("train.device is '") + device +
                          "' but CUDA is not usable here (a CPU-only LibTorch, or no GPU "
                          "visible; CUDA_VISIBLE_DEVICES is "));
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("set train.device=cpu"));
  }
}

TEST(PlacementTest, LocalRanksBeyondTheGpusAreRefused) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU (run on a machine with one)";
  const int count = static_cast<int>(torch::cuda::device_count());
  absl::StatusOr<Placement> p = ResolvePlacement(Train("auto"), count);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("has no GPU of its own (" + std::to_string(count) + " visible)"));
  p = ResolvePlacement(Train("cuda:" + std::to_string(count)), 0);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("GPU(s) are visible"));
}

TEST(PlacementTest, AmpTypesDecideAutocastAndScaling) {
  absl::StatusOr<Placement> half = ResolvePlacement(Train("cpu", true, "float16"), 0);
  ASSERT_TRUE(half.ok());
  // float16 autocasts on CUDA only; on a CPU the scaler runs alone.
  EXPECT_FALSE(half->autocast);
  EXPECT_TRUE(half->loss_scaling);
  EXPECT_THAT(half->Describe(), HasSubstr("the loss scaler runs alone in fp32"));
  absl::StatusOr<Placement> bf16 = ResolvePlacement(Train("cpu", true, "bfloat16"), 0);
  ASSERT_TRUE(bf16.ok());
  EXPECT_TRUE(bf16->autocast);
  EXPECT_FALSE(bf16->loss_scaling);  // float32's range: nothing underflows.
  EXPECT_EQ(bf16->amp_dtype, at::kBFloat16);
  EXPECT_EQ(bf16->Describe(), "cpu, amp: autocast bfloat16");
}

TEST(AutocastScopeTest, CastsInsideAndRestoresAfterLikeTorchAutocast) {
  Placement p;
  p.autocast = true;
  p.amp_dtype = at::kBFloat16;
  torch::nn::Linear linear(4, 3);
  const at::Tensor x = at::randn({2, 4});
  EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
  {
    AutocastScope outer(p);
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
    {
      AutocastScope inner(p);
      EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
    }
    // The inner scope's end leaves the outer one on.
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
  {
    Placement off;  // amp off: nothing changes.
    AutocastScope none(off);
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
  }
}

TEST(DeviceDataTest, BatchesOnTheCpuAreMakeBatchs) {
  DataOptions o;
  o.synthetic = true;
  o.synthetic_train_size = 40;
  absl::StatusOr<Dataset> d = LoadDataset(o, true, 3);
  ASSERT_TRUE(d.ok());
  const std::vector<int64_t> idx = {7, 2, 31, 5};
  Batch a = MakeBatch(*d, idx, 1, 4);
  Batch b = MakeBatchOn(*d, idx, 1, 4, torch::kCPU);
  EXPECT_TRUE(at::equal(a.x, b.x));
  EXPECT_TRUE(at::equal(a.y, b.y));
  if (!HaveGpu()) return;
  Batch g = MakeBatchOn(*d, idx, 1, 4, torch::Device(torch::kCUDA, 0));
  EXPECT_TRUE(g.x.is_cuda());
  EXPECT_TRUE(at::allclose(g.x.cpu(), a.x));
  EXPECT_TRUE(at::equal(g.y.cpu(), a.y));
}

TEST(DeviceDataTest, HostCopiesKeepHostTensorsAndStrides) {
  const at::Tensor host = at::randn({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  std::vector<at::Tensor> out = ToHost({host, at::Tensor()});
  EXPECT_TRUE(out[0].is_same(host));
  EXPECT_FALSE(out[1].defined());
  if (!HaveGpu()) return;
  out = ToHost({host.to(torch::kCUDA)});
  EXPECT_TRUE(out[0].is_cpu());
  EXPECT_EQ(out[0].strides(), host.strides());
  EXPECT_TRUE(at::equal(out[0], host));
}

TEST(DeviceStateTest, AGpuGeneratorStateTravelsAndIsLeftAloneOnACpu) {
  // A state image from a GPU run holds "rng.cuda"; a CPU run restores it
  // and keeps it for a later GPU run, and setting it on a CPU is a no-op.
  torch::nn::Linear model(3, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  StateExtras extras;
  extras.rng = GeneratorStates(torch::kCPU);
  EXPECT_FALSE(extras.rng.cuda.defined());
  extras.rng.cuda = at::arange(16, at::kByte);  // Philox's seed and offset.
  const std::string bytes = StateImage::Plan(*model, optimizer, extras).ToString();
  StateExtras back;
  ASSERT_TRUE(RestoreImage(bytes, *model, optimizer, &back).ok());
  ASSERT_TRUE(back.rng.cuda.defined());
  EXPECT_TRUE(at::equal(back.rng.cuda, extras.rng.cuda));
  EXPECT_TRUE(at::equal(back.rng.cpu, extras.rng.cpu));
  SetGeneratorStates(back.rng, torch::kCPU);
  EXPECT_TRUE(at::equal(GeneratorStates(torch::kCPU).cpu, extras.rng.cpu));
}

TEST(DeviceTrainTest, Bfloat16AutocastTrainsOnCpuAndResumes) {
  const std::string dir = TestDir();
  TrainerConfig cfg = Config(dir, {"train.amp=true", "train.amp_dtype=bfloat16"});
  std::string out;
  absl::StatusOr<TrainResult> r = RunOnce(cfg, &out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(out, HasSubstr("1 rank(s) on cpu, amp: autocast bfloat16,"));
  EXPECT_GT(r->test_acc, 0.9) << out;
  // Weights stay float32 under autocast: the checkpoint resumes as any.
  cfg.train.epochs = 3;
  absl::StatusOr<TrainResult> more = RunOnce(cfg, &out, "");
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->epoch, 3);
  EXPECT_THAT(out, HasSubstr("epoch 3/3"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("epoch 1/3")));
}

TEST(DeviceTrainTest, CudaWithoutAGpuStopsEveryRankWithTheReason) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is usable here: the error cannot happen";
  // Two ranks under the launcher, as a user would start them: each fails
  // before it joins the group, naming the setting.
  const std::string dir = TestDir();
  fs::create_directories(dir);
  int status = 0;
  const std::string out = testing::RunCommand(
      std::string(ELASTRUN_LAUNCHER_BINARY) + " run --nproc-per-node 2 --max-restarts 0 " +
          ELASTRUN_TRAIN_BINARY + " --config " + ELASTRUN_CONFIGS_DIR +
          "/fashion_mnist_mlp.yaml data.synthetic=true train.device=cuda train.output_dir=" +
          dir,
      &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("train.device is 'cuda' but CUDA is not usable here")) << out;
}

TEST(DeviceTrainTest, OneRankPerGpuUnderTheLauncherTrainsOverNccl) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU (run on a machine with one)";
  const std::string dir = TestDir();
  fs::create_directories(dir);
  int status = 0;
  const std::string out = testing::RunCommand(
      std::string(ELASTRUN_LAUNCHER_BINARY) + " run --nproc-per-node gpu --max-restarts 0 " +
          ELASTRUN_TRAIN_BINARY + " --config " + ELASTRUN_CONFIGS_DIR +
          "/fashion_mnist_cnn.yaml data.synthetic=true train.epochs=1 train.output_dir=" + dir,
      &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("rank(s) on cuda:0")) << out;
  EXPECT_THAT(out, HasSubstr("final: epoch=1")) << out;
}

TEST(DeviceTrainTest, ACheckpointFromOneDeviceResumesOnTheOther) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU (run on a machine with one)";
  for (const auto& [first, second] : {std::pair{"cuda", "cpu"}, std::pair{"cpu", "cuda"}}) {
    const std::string dir = TestDir() + "/" + first;
    TrainerConfig cfg = Config(dir, {std::string("train.device=") + first, "train.epochs=1"});
    std::string out;
    absl::StatusOr<TrainResult> r = RunOnce(cfg, &out);
    ASSERT_TRUE(r.ok()) << r.status();
    cfg.train.device = second;
    cfg.train.epochs = 2;
    absl::StatusOr<TrainResult> more = RunOnce(cfg, &out, "");
    ASSERT_TRUE(more.ok()) << more.status();
    EXPECT_EQ(more->epoch, 2) << out;
    EXPECT_THAT(out, HasSubstr(std::string("1 rank(s) on ") + second));
    EXPECT_GT(more->test_acc, 0.9) << out;
  }
}

TEST(DeviceTrainTest, Float16AutocastWithLossScalingTrainsOnAGpu) {
  if (!HaveGpu()) GTEST_SKIP() << "needs a GPU (run on a machine with one)";
  const std::string dir = TestDir();
  TrainerConfig cfg = Config(dir, {"train.amp=true", "train.device=cuda"});
  std::string out;
  absl::StatusOr<TrainResult> r = RunOnce(cfg, &out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(out, HasSubstr("on cuda:0, amp: autocast float16 with dynamic loss scaling"));
  EXPECT_GT(r->test_acc, 0.9) << out;
}

}  // namespace
}  // namespace elastrun::trainer
