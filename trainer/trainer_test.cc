// The torch parts of the trainer: sampler vs PyTorch's DistributedSampler,
// DDP gradients vs the one-process gradient of the global batch, models,
// parameter groups, configs and data (training runs, checkpoints and the
// binary: trainer_run_test.cc).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_file.h"
#include "trainer/data.h"
#include "trainer/ddp.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"
#include "trainer/options.h"
#include "trainer/sampler.h"
#include "trainer/trainer.h"
#include "trainer/trainer_test_util.h"
#include "worker/process_group.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using worker::ProcessGroup;
using worker::WorkerEnv;
using ::elastrun::trainer::testing::Env;
using ::elastrun::trainer::testing::FastOptions;
using ::elastrun::trainer::testing::RunTwoRanks;
using ::elastrun::trainer::testing::TestDir;

// ------------------------------------------------- sampler vs PyTorch

// Runs Debian's python3-torch (the `python3` first on PATH may lack torch)
// and returns its stdout; nullopt when it is unavailable.
std::optional<std::string> RunPython(const std::string& script) {
  const char* python = "/usr/bin/python3";
  if (!fs::exists(python)) return std::nullopt;
  const std::string path = TestDir() + "/ref.py";
  std::ofstream(path) << script;
  FILE* p = ::popen((std::string(python) + " " + path + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) return std::nullopt;
  return out;
}

// The next line of `lines` as integers (empty at the end).
std::vector<int64_t> NextInts(std::istream& lines) {
  std::string line;
  std::getline(lines, line);
  std::istringstream words(line);
  std::vector<int64_t> out;
  for (int64_t v; words >> v;) out.push_back(v);
  return out;
}

// This build's shard of rank `r` from position `done`, shuffled as the
// trainer shuffles (torch.randperm).
std::vector<int64_t> Shard(int64_t n, int world, int r, uint64_t seed, int64_t epoch,
                           bool drop_last, int64_t done) {
  SamplerOptions o;
  o.seed = seed;
  o.drop_last = drop_last;
  auto s = DistributedSampler::Create(n, world, r, o, TorchPermutation);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  s->set_epoch(epoch);
  return s->Indices(done);
}

TEST(SamplerVsPyTorchTest, ShardsEqualDistributedSampler) {
  struct Case {
    int64_t n;
    int world;
    uint64_t seed;
    int64_t epoch;
    bool drop_last;
  };
  const std::vector<Case> cases = {
      {101, 3, 7, 2, false}, {1000, 2, 0, 0, false}, {1000, 2, 0, 1, false},
      {10, 4, 123, 5, true}, {60000, 2, 0, 1, false}};
  std::string script =
      "import torch\nfrom torch.utils.data import DistributedSampler\n"
      "for n, w, seed, epoch, drop in [";
  for (const Case& c : cases) {
    script += "(" + std::to_string(c.n) + "," + std::to_string(c.world) + "," +
              std::to_string(c.seed) + "," + std::to_string(c.epoch) + "," +
              (c.drop_last ? "True" : "False") + "),";
  }
  script +=
      "]:\n"
      "  for r in range(w):\n"
      "    s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True,"
      " seed=seed, drop_last=drop)\n"
      "    s.set_epoch(epoch)\n"
      "    print(' '.join(map(str, list(s))))\n";
  std::optional<std::string> out = RunPython(script);
  if (!out) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  std::istringstream lines(*out);
  for (const Case& c : cases) {
    std::set<int64_t> seen;
    for (int r = 0; r < c.world; ++r) {
      SCOPED_TRACE(::testing::Message() << "n=" << c.n << " world=" << c.world
                                        << " seed=" << c.seed << " epoch=" << c.epoch
                                        << " rank=" << r);
      const std::vector<int64_t> want = NextInts(lines);
      EXPECT_EQ(Shard(c.n, c.world, r, c.seed, c.epoch, c.drop_last, 0), want);
      seen.insert(want.begin(), want.end());
    }
    if (!c.drop_last) {
      EXPECT_EQ(static_cast<int64_t>(seen.size()), c.n);
    }
  }
}

// The elastic deal (the rest of the epoch's order from a position, to any
// world size) against a Python transcription over torch.randperm: the
// order is PyTorch's DistributedSampler's for the seed and epoch, the rest
// G[done:] is padded with G's head (or cut) and dealt rank r, r + w, ...
TEST(SamplerVsPyTorchTest, RestOfTheEpochDealtAsThePythonReference) {
  struct Case {
    int64_t n, done;
    int world;
    uint64_t seed;
    int64_t epoch;
    bool drop_last;
  };
  const std::vector<Case> cases = {
      {101, 32, 3, 7, 2, false}, {1000, 448, 1, 0, 1, false}, {1000, 447, 2, 0, 1, false},
      {1000, 999, 3, 5, 0, false}, {10, 4, 4, 123, 5, true},  {6144, 3072, 2, 0, 1, false},
      {97, 60, 5, 3, 3, true},    {97, 60, 5, 3, 3, false},   {7, 2, 8, 1, 0, false}};
  std::string script =
      "import math, torch\n"
      "for n, done, w, seed, epoch, drop in [";
  for (const Case& c : cases) {
    script += "(" + std::to_string(c.n) + "," + std::to_string(c.done) + "," +
              std::to_string(c.world) + "," + std::to_string(c.seed) + "," +
              std::to_string(c.epoch) + "," + (c.drop_last ? "True" : "False") + "),";
  }
  script +=
      "]:\n"
      "  g = torch.Generator()\n"
      "  g.manual_seed(seed + epoch)\n"
      "  order = torch.randperm(n, generator=g).tolist()\n"
      "  rest = order[done:]\n"
      "  per = (n - done) // w if drop else math.ceil((n - done) / w)\n"
      "  total = per * w\n"
      "  rest = rest[:total] + [order[i % n] for i in range(max(0, total - len(rest)))]\n"
      "  for r in range(w):\n"
      "    print(' '.join(map(str, rest[r:total:w])))\n";
  std::optional<std::string> out = RunPython(script);
  if (!out) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  std::istringstream lines(*out);
  for (const Case& c : cases) {
    for (int r = 0; r < c.world; ++r) {
      SCOPED_TRACE(::testing::Message() << "n=" << c.n << " done=" << c.done
                                        << " world=" << c.world << " rank=" << r);
      EXPECT_EQ(Shard(c.n, c.world, r, c.seed, c.epoch, c.drop_last, c.done),
                NextInts(lines));
    }
  }
}

// ------------------------------------------------------------------ DDP


Model SmallMlp() {
  MlpOptions o;
  o.in_features = 16;
  o.hidden = {32, 24};
  o.num_classes = 5;
  return MakeMlp(o);
}

// Gradients of `model` for the mean cross-entropy of (x, y).
std::vector<at::Tensor> Gradients(Model& model) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : model->parameters()) g.push_back(p.grad().clone());
  return g;
}

TEST(DdpTest, TwoRankGradientsEqualGlobalBatchGradient) {
  torch::manual_seed(3);
  const at::Tensor x = at::randn({12, 16});
  const at::Tensor y = at::randint(5, {12}, at::kLong);
  constexpr int kSteps = 3;  // rebuild_buckets runs after the first

  // Reference: one process, the whole batch, plain SGD steps.
  std::vector<std::vector<at::Tensor>> want;
  {
    torch::manual_seed(1);
    Model model = SmallMlp();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    for (int s = 0; s < kSteps; ++s) {
      sgd.zero_grad();
      torch::nn::functional::cross_entropy(model->forward(x), y).backward();
      want.push_back(Gradients(model));
      sgd.step();
    }
  }
  std::vector<std::vector<at::Tensor>> got[2];
  size_t buckets[2] = {0, 0};
  // Built here: the global generator is not for two threads at once.
  // Different initial weights per rank: DDP must broadcast rank 0's.
  Model models[2];
  torch::manual_seed(1);
  models[0] = SmallMlp();
  torch::manual_seed(99);
  models[1] = SmallMlp();
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    Model model = models[rank];
    DdpOptions o;
    o.first_bucket_bytes = 1024;  // several buckets for a tiny model
    o.bucket_bytes = 4096;
    auto cpu_group = group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu_group.ok()) << cpu_group.status();
    auto ddp = DistributedDataParallel::Create(model.ptr(), *cpu_group, o);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const at::Tensor xs = x.slice(0, rank * 6, rank * 6 + 6);
    const at::Tensor ys = y.slice(0, rank * 6, rank * 6 + 6);
    for (int s = 0; s < kSteps; ++s) {
      sgd.zero_grad();
      (*ddp)->BeforeForward(true);
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xs), ys);
      (*ddp)->BeforeBackward(loss, true);
      loss.backward();
      got[rank].push_back(Gradients(model));
      sgd.step();
    }
    // Rebuilt after the first step (one bucket before, as Python's DDP).
    buckets[rank] = (*ddp)->buckets().size();
  });
  EXPECT_GT(buckets[0], 1u);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < want[s].size(); ++i) {
        const double diff = (got[rank][s][i] - want[s][i]).abs().max().item<double>();
        EXPECT_LE(diff, 1e-6) << "rank " << rank << " step " << s << " param " << i;
      }
    }
  }
}

// One step on `rank` of two micro-batches of 2 samples (rows rank * 4 +
// [0, 2) and [2, 4)), synced on the second; with a stop vote in the
// wrapper, micro-batch m votes vote(m).
void TwoMicroBatches(DistributedDataParallel& ddp, Model& model, const at::Tensor& x,
                     const at::Tensor& y, int rank,
                     const std::function<bool(int)>& vote = [](int) { return false; }) {
  for (int m = 0; m < 2; ++m) {
    const bool sync = m == 1;
    const int b = rank * 4 + m * 2;
    ddp.BeforeForward(sync);
    at::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(x.slice(0, b, b + 2)), y.slice(0, b, b + 2));
    if (at::Tensor term = ddp.StopTerm(vote(m)); term.defined()) loss = loss + term;
    ddp.BeforeBackward(loss, sync);
    loss.backward();
  }
}

// The stop vote rides in the gradient buckets: a vote of one rank, in any
// micro-batch of a step, reaches every rank with that step's allreduce,
// and the model's gradients are bitwise those without the vote.
TEST(DdpTest, AStopVoteOfOneRankReachesEveryRankWithTheStep) {
  torch::manual_seed(5);
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor y = at::randint(5, {8}, at::kLong);
  Model models[2][2];
  for (auto& pair : models) {
    for (Model& m : pair) {
      torch::manual_seed(1);
      m = SmallMlp();
    }
  }
  // Step 0: nobody votes; step 1: rank 1 votes in its first micro-batch
  // only; step 2: nobody again.
  bool voted[2][3] = {};
  std::vector<at::Tensor> grads[2][2];  // [with vote option][rank]
  for (int with : {0, 1}) {
    RunTwoRanks([&](int rank, ProcessGroup& group) {
      Model model = models[with][rank];
      DdpOptions o;
      o.stop_vote = with == 1;
      auto cpu_group = group.ForDevice(c10::DeviceType::CPU);
      ASSERT_TRUE(cpu_group.ok()) << cpu_group.status();
      auto ddp = DistributedDataParallel::Create(model.ptr(), *cpu_group, o);
      ASSERT_TRUE(ddp.ok()) << ddp.status();
      for (int step = 0; step < 3; ++step) {
        TwoMicroBatches(**ddp, model, x, y, rank, [&](int m) {
          return with == 1 && step == 1 && rank == 1 && m == 0;
        });
        if (with == 1) voted[rank][step] = (*ddp)->StopVoted();
      }
      grads[with][rank] = Gradients(model);
    });
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(voted[rank][0]) << rank;
    EXPECT_TRUE(voted[rank][1]) << rank;
    EXPECT_FALSE(voted[rank][2]) << "votes are cleared after a step; rank " << rank;
    ASSERT_EQ(grads[1][rank].size(), grads[0][rank].size());
    for (size_t i = 0; i < grads[0][rank].size(); ++i) {
      EXPECT_TRUE(at::equal(grads[1][rank][i], grads[0][rank][i])) << rank << " " << i;
    }
  }
}

TEST(DdpTest, NoSyncAccumulatesThenReducesTheSum) {
  torch::manual_seed(5);
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor y = at::randint(5, {8}, at::kLong);
  // Reference: sum of the mean losses of the two micro-batch pairs, averaged
  // over ranks = gradient of (loss(first half) + loss(second half)) / 2 ...
  // per rank: micro-batches rank*4 + [0,2) and rank*4 + [2,4).
  std::vector<at::Tensor> want;
  {
    torch::manual_seed(1);
    Model model = SmallMlp();
    at::Tensor total = at::zeros({});
    for (int r = 0; r < 2; ++r) {
      for (int m = 0; m < 2; ++m) {
        const int b = r * 4 + m * 2;
        total = total + torch::nn::functional::cross_entropy(
                            model->forward(x.slice(0, b, b + 2)), y.slice(0, b, b + 2));
      }
    }
    (total / 2).backward();
    want = Gradients(model);
  }
  std::vector<at::Tensor> got[2];
  Model models[2];
  for (Model& m : models) {
    torch::manual_seed(1);
    m = SmallMlp();
  }
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    Model model = models[rank];
    auto cpu_group = group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu_group.ok()) << cpu_group.status();
    auto ddp = DistributedDataParallel::Create(model.ptr(), *cpu_group);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    TwoMicroBatches(**ddp, model, x, y, rank);
    got[rank] = Gradients(model);
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LE((got[rank][i] - want[i]).abs().max().item<double>(), 1e-6) << i;
    }
  }
}

// ------------------------------------------------- models and optimizers

TEST(ModelsTest, ShapesAndYoloV5ParameterGroups) {
  CnnOptions c;
  Model cnn = MakeCnn(c);
  EXPECT_EQ(cnn->forward(at::randn({3, 1, 28, 28})).sizes(), (at::IntArrayRef{3, 10}));
  ParameterGroups g = SplitParameters(*cnn);
  // conv0, conv1 (no bias), fc, head weights decay; bn0, bn1 weights do not;
  // biases of bn0, bn1, fc, head.
  EXPECT_EQ(g.decay.size(), 4u);
  EXPECT_EQ(g.norm.size(), 2u);
  EXPECT_EQ(g.bias.size(), 4u);
  Model mlp = MakeMlp(MlpOptions{});
  EXPECT_EQ(mlp->forward(at::randn({2, 1, 28, 28})).sizes(), (at::IntArrayRef{2, 10}));
  g = SplitParameters(*mlp);
  EXPECT_EQ(g.decay.size(), 3u);
  EXPECT_EQ(g.norm.size(), 0u);
  EXPECT_EQ(g.bias.size(), 3u);
}

// The CNN computes in NHWC (oneDNN's fast CPU path): the same function as the
// row-major model with the same weights, and still NHWC after a row-major
// checkpoint is loaded into it (loading alone takes the file's layout).
TEST(ModelsTest, ChannelsLastCnnIsTheSameFunctionAndSurvivesACheckpoint) {
  torch::manual_seed(3);
  Model nhwc = MakeCnn(CnnOptions{});
  CnnOptions plain_options;
  plain_options.channels_last = false;
  Model plain = MakeCnn(plain_options);
  {
    torch::NoGradGuard no_grad;
    auto from = nhwc->parameters();
    auto to = plain->parameters();
    ASSERT_EQ(from.size(), to.size());
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  auto conv_weights_nhwc = [](Model& m) {
    int n = 0;
    for (const at::Tensor& p : m->parameters()) {
      if (p.dim() != 4) continue;
      // suggest_memory_format is what the convolution goes by.
      if (p.suggest_memory_format() != at::MemoryFormat::ChannelsLast) return -1;
      ++n;
    }
    return n;
  };
  EXPECT_EQ(conv_weights_nhwc(nhwc), 2);
  EXPECT_EQ(conv_weights_nhwc(plain), -1);
  nhwc->eval();
  plain->eval();
  const at::Tensor x = at::randn({4, 1, 28, 28});
  EXPECT_TRUE(at::allclose(nhwc->forward(x), plain->forward(x), 1e-5, 1e-5));
  // The first convolution's output is NHWC (its weight decides: the
  // one-channel input is NHWC and NCHW at once).
  at::Tensor first = nhwc->ptr(1)->as<torch::nn::Conv2d>()->forward(
      nhwc->ptr(0)->as<torch::nn::Functional>()->forward(x));
  EXPECT_EQ(first.suggest_memory_format(), at::MemoryFormat::ChannelsLast);

  // A checkpoint of the row-major model (a run with channels_last: false)
  // loads into the NHWC one as NHWC.
  OptimizerSpec spec;
  auto opt = Optimizer::Create(spec, *plain, 0.0);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const std::string bytes = SerializeState(*plain, (*opt)->torch_optimizer(), TrainPosition{}, "");
  torch::manual_seed(4);
  Model loaded = MakeCnn(CnnOptions{});
  auto loaded_opt = Optimizer::Create(spec, *loaded, 0.0);
  ASSERT_TRUE(loaded_opt.ok()) << loaded_opt.status();
  ASSERT_TRUE(RestoreState(bytes, *loaded, (*loaded_opt)->torch_optimizer(), nullptr, nullptr)
                  .ok());
  EXPECT_EQ(conv_weights_nhwc(loaded), 2);
  auto a = nhwc->parameters();
  auto b = loaded->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
}

TEST(OptimizerTest, DecayOnlyOnWeightsAndScheduleApplied) {
  Model cnn = MakeCnn(CnnOptions{});
  OptimizerSpec spec;
  auto opt = Optimizer::Create(spec, *cnn, 0.001);
  ASSERT_TRUE(opt.ok());
  auto& groups = (*opt)->torch_optimizer().param_groups();
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_THAT((*opt)->kinds(), ::testing::ElementsAre(GroupKind::kBias, GroupKind::kDecay,
                                                      GroupKind::kNorm));
  auto sgd = [&](size_t i) -> torch::optim::SGDOptions& {
    return static_cast<torch::optim::SGDOptions&>(groups[i].options());
  };
  EXPECT_EQ(sgd(0).weight_decay(), 0.0);
  EXPECT_EQ(sgd(1).weight_decay(), 0.001);
  EXPECT_EQ(sgd(2).weight_decay(), 0.0);
  EXPECT_TRUE(sgd(1).nesterov());
  IterationValues v;
  v.bias_lr = 0.09;
  v.lr = 0.002;
  v.momentum = 0.85;
  (*opt)->Apply(v);
  EXPECT_EQ(sgd(0).lr(), 0.09);
  EXPECT_EQ(sgd(1).lr(), 0.002);
  EXPECT_EQ(sgd(2).lr(), 0.002);
  EXPECT_EQ(sgd(2).momentum(), 0.85);

  spec.kind = OptimizerSpec::Kind::kAdamW;
  auto adamw = Optimizer::Create(spec, *cnn, 0.05);
  ASSERT_TRUE(adamw.ok());
  auto& ag = (*adamw)->torch_optimizer().param_groups();
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(ag[0].options()).weight_decay(), 0.0);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(ag[1].options()).weight_decay(), 0.05);
  EXPECT_EQ(std::get<0>(static_cast<torch::optim::AdamWOptions&>(ag[1].options()).betas()),
            0.937);
}

TEST(OptimizerTest, InfGradientIsFoundAndSkippedStepLeavesWeights) {
  Model mlp = SmallMlp();
  auto opt = Optimizer::Create(OptimizerSpec{}, *mlp, 0.0);
  ASSERT_TRUE(opt.ok());
  torch::nn::functional::cross_entropy(mlp->forward(at::randn({4, 16})),
                                       at::randint(5, {4}, at::kLong))
      .mul(1024)
      .backward();
  const at::Tensor g = mlp->parameters()[0].grad().clone();
  EXPECT_FALSE((*opt)->ScaleGradients(1.0 / 1024, true));
  EXPECT_TRUE(at::allclose(mlp->parameters()[0].grad(), g / 1024));
  mlp->parameters()[1].mutable_grad()[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE((*opt)->ScaleGradients(1.0, true));
  const at::Tensor before = mlp->parameters()[0].detach().clone();
  (*opt)->ZeroGrad();  // what the loop does on a skipped step
  EXPECT_TRUE(at::equal(mlp->parameters()[0], before));
}

// --------------------------------------------------------------- configs

TEST(ConfigTest, RealConfigsLoadAndTargetsAreListed) {
  for (const char* name : {"fashion_mnist_mlp.yaml", "fashion_mnist_cnn.yaml"}) {
    auto cfg = LoadTrainerConfig(std::string(ELASTRUN_CONFIGS_DIR) + "/" + name,
                                 {"train.epochs=2"});
    ASSERT_TRUE(cfg.ok()) << name << ": " << cfg.status();
    EXPECT_EQ(cfg->train.epochs, 2);
  }
  const std::string targets = config::FormatTargets();
  for (const char* t : {"MLP", "CNN", "SGD", "AdamW", "YoloV5Schedule"}) {
    EXPECT_THAT(targets, HasSubstr(t));
  }
  EXPECT_THAT(targets, HasSubstr("warmup_bias_lr"));
}

TEST(ConfigTest, ErrorsNameTheKey) {
  const std::string mlp = std::string(ELASTRUN_CONFIGS_DIR) + "/fashion_mnist_mlp.yaml";
  auto error = [&](std::vector<std::string> overrides) {
    auto cfg = LoadTrainerConfig(mlp, overrides);
    return cfg.ok() ? std::string("<ok>") : std::string(cfg.status().message());
  };
  EXPECT_THAT(error({"model.hidden=[0]"}), HasSubstr("model.hidden"));
  EXPECT_THAT(error({"+model.width=3"}), HasSubstr("width"));
  EXPECT_THAT(error({"optimizer._target_=Adam"}), HasSubstr("AdamW"));
  EXPECT_THAT(error({"+train.bogus=1"}), HasSubstr("train.bogus"));
  EXPECT_THAT(error({"data.batch_size=0"}), HasSubstr("data.batch_size"));
  // A section the trainer does not read, or YOLOv5's hyperparameters for a
  // model without them, is refused rather than ignored.
  EXPECT_THAT(error({"++optimiser.lr0=0.1"}),
              HasSubstr("optimiser: not a section of a trainer config"));
  EXPECT_THAT(error({"++hyp.lr0=0.1"}), HasSubstr("hyp: only the detector"));
}

TEST(DataTest, MissingDataFileIsAClearError) {
  DataOptions o;
  o.root = TestDir() + "/nothing";
  auto d = LoadDataset(o, true, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("nothing/train-images-idx3-ubyte.gz: no such file"));
}

// A standby loads the data before its activation: training then gets the
// same splits, taken once (its storage, not a copy), for the options and
// seed it was loaded with only.
TEST(DataTest, PreloadedSplitsAreTheSameAndTakenOnce) {
  DataOptions o;
  o.synthetic = true;
  o.synthetic_train_size = 40;
  o.synthetic_test_size = 20;
  auto fresh = LoadDataset(o, true, 9);
  ASSERT_TRUE(fresh.ok());
  PreloadDatasets(o, 9);
  DataOptions other = o;
  other.synthetic_train_size = 41;
  auto different = LoadDataset(other, true, 9);  // Not what was loaded.
  ASSERT_TRUE(different.ok());
  EXPECT_EQ(different->size(), 41);
  auto first = LoadDataset(o, true, 9);
  auto again = LoadDataset(o, true, 9);
  auto test = LoadDataset(o, false, 9);
  ASSERT_TRUE(first.ok() && again.ok() && test.ok());
  EXPECT_TRUE(at::equal(first->images, fresh->images));
  EXPECT_TRUE(at::equal(first->labels, fresh->labels));
  EXPECT_TRUE(at::equal(again->images, fresh->images));
  EXPECT_NE(first->images.data_ptr(), again->images.data_ptr()) << "taken twice";
  EXPECT_EQ(test->size(), 20);
}

TEST(DataTest, SyntheticIsDeterministicAndBatchesAreNormalized) {
  DataOptions o;
  o.synthetic = true;
  o.synthetic_train_size = 50;
  auto a = LoadDataset(o, true, 4);
  auto b = LoadDataset(o, true, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(a->images, b->images));
  EXPECT_EQ(a->images.sizes(), (at::IntArrayRef{50, 1, 28, 28}));
  Batch batch = MakeBatch(*a, {3, 1, 4}, 0, 3);
  EXPECT_EQ(batch.x.sizes(), (at::IntArrayRef{3, 1, 28, 28}));
  EXPECT_EQ(batch.y[1].item<int64_t>(), a->labels[1].item<int64_t>());
  EXPECT_NEAR(batch.x[0][0][0][0].item<double>(),
              (a->images[3][0][0][0].item<double>() / 255 - kPixelMean) / kPixelStd, 1e-5);
}

}  // namespace
}  // namespace elastrun::trainer
