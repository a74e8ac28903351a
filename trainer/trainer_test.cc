// The torch parts of the trainer: sampler vs PyTorch's DistributedSampler,
// DDP gradients vs the one-process gradient of the global batch, models,
// parameter groups, configs, and a short training run on 1 and 2 ranks.
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
#include "worker/process_group.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using worker::ProcessGroup;
using worker::WorkerEnv;

std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(ELASTRUN_TRAINER_TEST_DIR) /
                 info->test_suite_name() / info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

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
      std::string line;
      ASSERT_TRUE(std::getline(lines, line));
      std::istringstream words(line);
      std::vector<int64_t> want;
      for (int64_t v; words >> v;) want.push_back(v);
      SamplerOptions o;
      o.seed = c.seed;
      o.drop_last = c.drop_last;
      auto s = DistributedSampler::Create(c.n, c.world, r, o, TorchPermutation);
      ASSERT_TRUE(s.ok());
      s->set_epoch(c.epoch);
      EXPECT_EQ(s->Indices(), want);
      seen.insert(want.begin(), want.end());
    }
    if (!c.drop_last) {
      EXPECT_EQ(static_cast<int64_t>(seen.size()), c.n);
    }
  }
}

// ------------------------------------------------------------------ DDP

WorkerEnv Env(int rank, int world, int port) {
  WorkerEnv env;
  env.rank = env.local_rank = env.role_rank = rank;
  env.world_size = env.local_world_size = env.role_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

worker::ProcessGroupOptions FastOptions() {
  worker::ProcessGroupOptions o;
  o.store_timeout = absl::Seconds(30);
  o.collective_timeout = absl::Seconds(60);
  return o;
}

// Runs body(rank, group) on two ranks, as two threads with their own Gloo
// groups over a TCPStore on a free loopback port.
void RunTwoRanks(const std::function<void(int, ProcessGroup&)>& body) {
  WorkerEnv env0 = Env(0, 2, 0);
  auto server = worker::ConnectStore(env0, FastOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->getPort();
  env0.master_port = port;
  auto run = [&](const WorkerEnv& env) {
    absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
        env.rank == 0 ? absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>>(*server)
                      : worker::ConnectStore(env, FastOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    auto group = ProcessGroup::Create(env, *store, FastOptions());
    ASSERT_TRUE(group.ok()) << group.status();
    body(env.rank, **group);
  };
  std::thread peer([&] { run(Env(1, 2, port)); });
  run(env0);
  peer.join();
}

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
    auto ddp = DistributedDataParallel::Create(model.ptr(), group.gloo(), o);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    buckets[rank] = (*ddp)->buckets().size();
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
    auto ddp = DistributedDataParallel::Create(model.ptr(), group.gloo());
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    for (int m = 0; m < 2; ++m) {
      const bool sync = m == 1;
      const int b = rank * 4 + m * 2;
      (*ddp)->BeforeForward(sync);
      at::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(x.slice(0, b, b + 2)), y.slice(0, b, b + 2));
      (*ddp)->BeforeBackward(loss, sync);
      loss.backward();
    }
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
}

TEST(DataTest, MissingDataFileIsAClearError) {
  DataOptions o;
  o.root = TestDir() + "/nothing";
  auto d = LoadDataset(o, true, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("nothing/train-images-idx3-ubyte.gz: no such file"));
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

// -------------------------------------------------------------- training

TrainerConfig SyntheticConfig(const std::string& out_dir, const std::string& model) {
  fs::create_directories(out_dir);
  const std::string path = out_dir + "/cfg.yaml";
  std::ofstream(path) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_" << model
                      << ".yaml\n";
  auto cfg = LoadTrainerConfig(
      path, {"data.synthetic=true", "+data.synthetic_train_size=512",
             "+data.synthetic_test_size=256", "data.batch_size=32", "train.epochs=2",
             "train.output_dir=" + out_dir, "model.dropout=0.0"});
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return *cfg;
}

TEST(TrainTest, OneProcessLearnsSyntheticDataAndWritesTheRunFolder) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir, "mlp");
  RunOptions run;
  run.out = std::tmpfile();
  auto r = TrainOnGroup(cfg, run, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch, 2);
  EXPECT_GT(r->test_acc, 0.9);
  EXPECT_EQ(r->params_sha256.size(), 64u);
  std::ifstream metrics(dir + "/metrics.csv");
  std::string header;
  std::getline(metrics, header);
  EXPECT_THAT(header, HasSubstr("epoch,train_loss"));
  auto saved = config::LoadConfig(dir + "/config.yaml");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(*saved, cfg.resolved);
  std::rewind(run.out);
  char line[512];
  std::string all;
  while (std::fgets(line, sizeof line, run.out)) all += line;
  std::fclose(run.out);
  EXPECT_THAT(all, HasSubstr("final: epoch=2 test_acc="));
  EXPECT_THAT(all, HasSubstr("params_sha256=" + r->params_sha256));
}

TEST(TrainTest, AmpLossScalingTrainsOnCpu) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir, "mlp");
  cfg.train.amp = true;
  RunOptions run;
  run.out = std::tmpfile();
  auto r = TrainOnGroup(cfg, run, nullptr);
  std::fclose(run.out);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->test_acc, 0.9);
}

TEST(TrainTest, TwoRanksEndWithIdenticalParameters) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir, "cnn");
  cfg.train.epochs = 1;
  absl::StatusOr<TrainResult> results[2];
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    RunOptions run;
    run.out = std::tmpfile();
    results[rank] = TrainOnGroup(cfg, run, &group);
    std::fclose(run.out);
  });
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_EQ(results[0]->params_sha256, results[1]->params_sha256);
  EXPECT_EQ(results[0]->test_acc, results[1]->test_acc);
  // Learning itself is checked on one process: here the two threads share
  // the global generator while building their models, so the starting
  // weights (rank 0's, broadcast) vary from run to run.
}

// ----------------------------------------------------- checkpoint / resume

std::string ReadAll(FILE* f) {
  std::rewind(f);
  std::string all;
  char line[512];
  while (std::fgets(line, sizeof line, f)) all += line;
  return all;
}

absl::StatusOr<TrainResult> TrainQuietly(const TrainerConfig& cfg,
                                         std::optional<std::string> resume,
                                         std::string* output = nullptr) {
  RunOptions run;
  run.out = std::tmpfile();
  run.resume = std::move(resume);
  absl::StatusOr<TrainResult> r = TrainOnGroup(cfg, run, nullptr);
  if (output != nullptr) *output = ReadAll(run.out);
  std::fclose(run.out);
  return r;
}

TEST(CheckpointTest, ResumeAfterAnEpochIsBitwiseIdentical) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir + "/a", "mlp");
  cfg.resolved.Find("model")->Set("dropout", config::Node::Double(0.1));  // RNG in play
  auto uninterrupted = TrainQuietly(cfg, std::nullopt);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();

  cfg.train.output_dir = dir + "/b";
  TrainerConfig first = cfg;
  first.train.epochs = 1;  // stops after epoch 1 (the schedule still spans 2)
  ASSERT_TRUE(TrainQuietly(first, std::nullopt).ok());
  std::string out;
  auto resumed = TrainQuietly(cfg, "", &out);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(out, HasSubstr("resumed from rank 0's checkpoint: epoch 2, iteration 0"));
  EXPECT_EQ(resumed->params_sha256, uninterrupted->params_sha256);
  EXPECT_EQ(resumed->test_acc, uninterrupted->test_acc);
  // metrics.csv: epoch 1 from the first run, epoch 2 appended.
  std::ifstream metrics(dir + "/b/metrics.csv");
  std::string all((std::istreambuf_iterator<char>(metrics)), {});
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 3) << all;
}

TEST(CheckpointTest, MidEpochResumeAndCorruptNewestFallsBack) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir + "/a", "cnn");
  auto uninterrupted = TrainQuietly(cfg, std::nullopt);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();

  // 16 iterations per epoch; mid-epoch checkpoints every 5.
  cfg.train.output_dir = dir + "/b";
  cfg.train.checkpoint_iters = 5;
  TrainerConfig first = cfg;
  first.train.epochs = 1;
  ASSERT_TRUE(TrainQuietly(first, std::nullopt).ok());
  const std::string ckpts = CheckpointDir(cfg.train.output_dir);
  // Newest: end of epoch 1 (key 1000000), then iteration 15 of epoch 1.
  std::vector<std::string> all = ListCheckpoints(ckpts);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_THAT(all[1], HasSubstr("ckpt_0000000015.ckpt"));
  // Corrupt the newest: the run must fall back to iteration 15, re-train
  // the last batch of epoch 1 and end where the uninterrupted run did.
  {
    std::fstream f(all[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x7f');
  }
  // Copies for the checks after the run (which rotates the folder).
  fs::copy_file(all[0], dir + "/corrupt.ckpt");
  fs::copy_file(all[1], dir + "/mid.ckpt");
  std::string out;
  auto resumed = TrainQuietly(cfg, "", &out);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_THAT(out, HasSubstr("resumed from rank 0's checkpoint: epoch 1, iteration 15"));
  EXPECT_EQ(resumed->params_sha256, uninterrupted->params_sha256);

  // An explicit path that is corrupt is an error naming it.
  auto bad = TrainQuietly(cfg, dir + "/corrupt.ckpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("checksum mismatch"));
  // A checkpoint of another model does not load.
  TrainerConfig other = SyntheticConfig(dir + "/c", "mlp");
  auto wrong = TrainQuietly(other, dir + "/mid.ckpt");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("does not fit"));
}

TEST(CheckpointTest, TwoRanksResumeFromTheRankThatHasTheFile) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir + "/a", "mlp");
  auto uninterrupted = TrainQuietly(cfg, std::nullopt);
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  // Epoch 1 on one process writes the checkpoint; then two ranks resume,
  // each with its own output folder, and only rank 1's holds the file.
  cfg.train.output_dir = dir + "/b1";
  TrainerConfig first = cfg;
  first.train.epochs = 1;
  first.data.batch_size = 32;
  ASSERT_TRUE(TrainQuietly(first, std::nullopt).ok());
  absl::StatusOr<TrainResult> results[2];
  std::string outs[2];
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    TrainerConfig mine = cfg;
    mine.train.output_dir = dir + (rank == 0 ? "/b0" : "/b1");
    mine.data.batch_size = 16;  // 2 x 16: the same global batch as 1 x 32
    RunOptions run;
    run.out = std::tmpfile();
    run.resume = "";
    results[rank] = TrainOnGroup(mine, run, &group);
    outs[rank] = ReadAll(run.out);
    std::fclose(run.out);
  });
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_THAT(outs[0], HasSubstr("resumed from rank 1's checkpoint: epoch 2"));
  EXPECT_EQ(results[0]->params_sha256, results[1]->params_sha256);
}

// ------------------------------------------------------------ the binary

std::string RunCommand(const std::string& command, int* status) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

TEST(BinaryTest, PrintConfigListTargetsAndErrors) {
  const std::string bin = ELASTRUN_TRAIN_BINARY;
  const std::string mlp = std::string(ELASTRUN_CONFIGS_DIR) + "/fashion_mnist_mlp.yaml";
  int status = 0;
  std::string out = RunCommand(bin + " --config " + mlp + " train.epochs=3 --print-config", &status);
  EXPECT_EQ(status, 0) << out;
  auto parsed = config::ParseYaml(out, "printed");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << out;
  EXPECT_EQ(parsed->Find("scheduler")->Find("epochs")->as_int(), 3);
  out = RunCommand(bin + " --config " + mlp + " optimizer.lr=1 --print-config", &status);
  EXPECT_NE(status, 0);
  EXPECT_THAT(out, HasSubstr("did you mean: optimizer.lr0?"));
  out = RunCommand(bin + " --list-targets", &status);
  EXPECT_EQ(status, 0);
  EXPECT_THAT(out, HasSubstr("YoloV5Schedule"));
  out = RunCommand(bin + " --bogus", &status);
  EXPECT_EQ(status, 2 << 8);  // exit code 2: a usage error
  EXPECT_EQ(out, "elastrun-train: unknown flag --bogus\nRun 'elastrun-train --help' for usage.\n");
  out = RunCommand(bin + " --version", &status);
  EXPECT_EQ(status, 0);
  EXPECT_THAT(out, ::testing::StartsWith("elastrun-train 0.2.0"));
}

// The batches of a run, from the trainer's sample log (RunOptions::sample_log):
// (attempt, epoch, iteration) -> sample indices, per rank.
using SampleLog = std::map<std::tuple<int, int64_t, int64_t>, std::vector<int64_t>>;

SampleLog ReadSampleLog(const std::string& path) {
  SampleLog log;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int attempt = 0;
    int64_t epoch = 0, iteration = 0, index = 0;
    fields >> attempt >> epoch >> iteration;
    std::vector<int64_t>& batch = log[{attempt, epoch, iteration}];
    EXPECT_TRUE(batch.empty()) << path << ": batch logged twice: " << line;
    while (fields >> index) batch.push_back(index);
  }
  return log;
}

// A rank killed in the middle of epoch 2 under `elastrun run --max-restarts 1`:
// the run resumes from the newest checkpoint and ends with exactly the
// weights of an uninterrupted run with the same checkpoints, and no sample
// of the epoch goes into those weights twice (or not at all).
TEST(ElasticTest, KilledRankResumesToBitwiseIdenticalWeights) {
  const std::string elastrun = ELASTRUN_LAUNCHER_BINARY;
  if (!fs::exists(elastrun)) GTEST_SKIP() << elastrun << " is not built";
  const std::string dir = TestDir();
  const std::string cfg = dir + "/cfg.yaml";
  // 512 samples, 2 x 32 per batch: 8 iterations per epoch; checkpoints at
  // iterations 3 and 6 of each epoch and at its end.
  std::ofstream(cfg) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_mlp.yaml\n"
                     << "data: {synthetic: true, synthetic_train_size: 512,\n"
                     << "       synthetic_test_size: 256, batch_size: 32}\n"
                     << "train: {epochs: 2, checkpoint_iters: 3, log_period: 0}\n";
  auto final_line = [](const std::string& out) {
    const size_t at = out.find("final: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  const std::string run = elastrun + " run --nproc-per-node 2 ";
  int status = 0;
  fs::create_directories(dir + "/a_samples");
  fs::create_directories(dir + "/b_samples");
  const std::string plain =
      RunCommand("ELASTRUN_TRAIN_SAMPLE_LOG=" + dir + "/a_samples " + run +
                     ELASTRUN_TRAIN_BINARY + " --config " + cfg + " train.output_dir=" + dir + "/a",
                 &status);
  ASSERT_EQ(status, 0) << plain;
  // Global iteration 12 = iteration 4 of epoch 2, after the checkpoint at 3.
  const std::string killed =
      RunCommand("ELASTRUN_TRAIN_SAMPLE_LOG=" + dir + "/b_samples " +
                     "ELASTRUN_TRAIN_FAIL_AT=1:12 " + run + "--max-restarts 1 " +
                     ELASTRUN_TRAIN_BINARY + " --config " + cfg + " train.output_dir=" + dir +
                     "/b",
                 &status);
  ASSERT_EQ(status, 0) << killed;
  EXPECT_THAT(killed, HasSubstr("injected SIGKILL at iteration 12"));
  EXPECT_THAT(killed, HasSubstr("resumed from rank 0's checkpoint: epoch 2, iteration 3"));
  ASSERT_THAT(final_line(plain), HasSubstr("params_sha256="));
  // Weights and accuracy exactly; the loss up to the order of its sums.
  auto field = [&](const std::string& line, const std::string& key) {
    const size_t at = line.find(key + "=");
    return at == std::string::npos ? std::string("?")
                                   : line.substr(at, line.find(' ', at) - at);
  };
  const std::string a = final_line(plain), b = final_line(killed);
  EXPECT_EQ(field(b, "params_sha256"), field(a, "params_sha256")) << plain << "\n---\n" << killed;
  EXPECT_EQ(field(b, "test_acc"), field(a, "test_acc"));
  EXPECT_EQ(field(b, "epoch"), field(a, "epoch"));
  EXPECT_NEAR(std::stod(field(b, "train_loss").substr(11)),
              std::stod(field(a, "train_loss").substr(11)), 2e-4);

  // The samples. Epoch 2 (index 1) of the interrupted run is what attempt 0
  // trained before the checkpoint that attempt 1 resumed from, then what
  // attempt 1 trained; attempt 1 trains nothing of epoch 1 and starts epoch
  // 2 at that checkpoint (iteration 3), not at its beginning.
  std::set<int64_t> epoch2;
  for (int r = 0; r < 2; ++r) {
    const std::string name = "/rank" + std::to_string(r) + ".log";
    const SampleLog uninterrupted = ReadSampleLog(dir + "/a_samples" + name);
    const SampleLog resumed = ReadSampleLog(dir + "/b_samples" + name);
    ASSERT_EQ(uninterrupted.size(), 16u) << "rank " << r << ": 2 epochs x 8 batches";
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> lineage;
    int64_t resumed_at = -1;
    for (const auto& [key, batch] : resumed) {
      const auto [attempt, epoch, iteration] = key;
      if (attempt != 1) continue;
      EXPECT_EQ(epoch, 1) << "rank " << r << ": attempt 1 trained a batch of epoch " << epoch + 1;
      if (resumed_at < 0) resumed_at = iteration;
      lineage[{epoch, iteration}] = batch;
    }
    EXPECT_EQ(resumed_at, 3) << "rank " << r;
    for (const auto& [key, batch] : resumed) {
      const auto [attempt, epoch, iteration] = key;
      if (attempt == 0 && (epoch == 0 || iteration < resumed_at)) lineage[{epoch, iteration}] = batch;
    }
    // Batch for batch what the uninterrupted run trained.
    ASSERT_EQ(lineage.size(), uninterrupted.size()) << "rank " << r;
    for (const auto& [key, batch] : uninterrupted) {
      const auto [attempt, epoch, iteration] = key;
      EXPECT_EQ(attempt, 0);
      const std::vector<int64_t>& trained = lineage[std::make_pair(epoch, iteration)];
      EXPECT_EQ(trained, batch) << "rank " << r << ", epoch " << epoch + 1 << ", iteration "
                                << iteration;
      if (epoch != 1) continue;
      for (int64_t sample : trained) {
        EXPECT_TRUE(epoch2.insert(sample).second)
            << "sample " << sample << " trained twice in epoch 2 (rank " << r << ")";
      }
    }
  }
  EXPECT_EQ(epoch2.size(), 512u) << "every sample of epoch 2, once";
  EXPECT_EQ(*epoch2.begin(), 0);
  EXPECT_EQ(*epoch2.rbegin(), 511);
}

}  // namespace
}  // namespace elastrun::trainer
