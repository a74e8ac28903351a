// DistributedDataParallel's options (train.ddp) on two ranks: threads with
// their own Gloo groups (trainer_test_util.h).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/ddp.h"
#include "trainer/options.h"
#include "trainer/trainer_test_util.h"
#include "worker/process_group.h"

namespace elastrun::trainer {
namespace {

using ::elastrun::trainer::testing::RunTwoRanks;
using ::testing::HasSubstr;
using worker::ProcessGroup;
namespace F = torch::nn::functional;

// Linear -> BatchNorm1d -> Linear, and a head the loss never uses.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t width = 16) {
    a = register_module("a", torch::nn::Linear(16, width));
    bn = register_module("bn", torch::nn::BatchNorm1d(width));
    b = register_module("b", torch::nn::Linear(width, 5));
    unused = register_module("unused", torch::nn::Linear(width, 5));
    // Half batches have other batch statistics than the whole one: only
    // the buffer test trains the BatchNorm.
    bn->eval();
  }
  at::Tensor forward(const at::Tensor& x) { return b->forward(bn->forward(a->forward(x).relu())); }
  torch::nn::Linear a{nullptr}, b{nullptr}, unused{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

std::vector<at::Tensor> Gradients(torch::nn::Module& m) {
  std::vector<at::Tensor> g;
  for (const at::Tensor& p : m.parameters()) {
    g.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
  return g;
}

struct Data {
  at::Tensor x, y;
};
Data MakeData() {
  torch::manual_seed(5);
  return {at::randn({8, 16}), at::randint(5, {8}, at::kLong)};
}

// kSteps SGD steps of `net` on rank `rank`'s half of `d` (the whole of it
// when ddp is null); the gradients of each step.
constexpr int kSteps = 3;
std::vector<std::vector<at::Tensor>> Train(Net& net, DistributedDataParallel* ddp, const Data& d,
                                           int rank) {
  const at::Tensor x = ddp ? d.x.slice(0, rank * 4, rank * 4 + 4) : d.x;
  const at::Tensor y = ddp ? d.y.slice(0, rank * 4, rank * 4 + 4) : d.y;
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<std::vector<at::Tensor>> grads;
  for (int s = 0; s < kSteps; ++s) {
    ZeroGrad(net->parameters());  // sgd.zero_grad() cannot zero bucket views
    if (ddp) ddp->BeforeForward(true);
    at::Tensor loss = F::cross_entropy(net->forward(x), y);
    if (ddp) ddp->BeforeBackward(loss, true);
    loss.backward();
    grads.push_back(Gradients(*net));
    sgd.step();
  }
  return grads;
}

// Runs `body` on two ranks, each with a copy of Net(width) wrapped with
// `o`; with `freeze_unused` the unused head is left out of DDP (no grad).
using Body = std::function<void(DistributedDataParallel&, Net&, int)>;
void OnTwoRanks(const DdpOptions& o, int64_t width, const Body& body, bool freeze_unused = false) {
  Net nets[2];
  for (Net& n : nets) {
    torch::manual_seed(1);
    n = Net(width);
    n->unused->weight.requires_grad_(!freeze_unused);
    n->unused->bias.requires_grad_(!freeze_unused);
  }
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    auto cpu = group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto ddp = DistributedDataParallel::Create(nets[rank].ptr(), *cpu, o);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    body(**ddp, nets[rank], rank);
  });
}

// The gradients of one process on the whole batch.
std::vector<std::vector<at::Tensor>> Reference(const Data& d) {
  torch::manual_seed(1);
  Net net;
  return Train(net, nullptr, d, 0);
}

void ExpectClose(const std::vector<std::vector<at::Tensor>>& got,
                 const std::vector<std::vector<at::Tensor>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < got.size(); ++s) {
    for (size_t i = 0; i < got[s].size(); ++i) {
      ASSERT_EQ(got[s][i].defined(), want[s][i].defined()) << what << " step " << s << " " << i;
      if (!want[s][i].defined()) continue;
      EXPECT_LE((got[s][i] - want[s][i]).abs().max().item<double>(), 1e-6)
          << what << " step " << s << " param " << i;
    }
  }
}

TEST(DdpOptionsTest, AnUnusedParameterTrainsWithFindUnusedParameters) {
  const Data d = MakeData();
  const auto want = Reference(d);
  for (bool static_graph : {false, true}) {
    DdpOptions o;
    o.find_unused_parameters = !static_graph;
    o.static_graph = static_graph;
    std::vector<std::vector<at::Tensor>> got[2];
    OnTwoRanks(o, 16, [&](DistributedDataParallel& ddp, Net& net, int rank) {
      got[rank] = Train(net, &ddp, d, rank);
    });
    for (int rank = 0; rank < 2; ++rank) {
      ExpectClose(got[rank], want,
                  std::string(static_graph ? "static_graph" : "find_unused") + " rank " +
                      std::to_string(rank));
    }
  }
}

TEST(DdpOptionsTest, AnUnusedParameterWithoutItFailsNamingTheKey) {
  const Data d = MakeData();
  std::string error[2];
  OnTwoRanks(DdpOptions{}, 16, [&](DistributedDataParallel& ddp, Net& net, int rank) {
    try {
      Train(net, &ddp, d, rank);
    } catch (const c10::Error& e) {
      error[rank] = e.what_without_backtrace();
    }
  });
  for (const std::string& e : error) {
    EXPECT_THAT(e, HasSubstr("train.ddp.find_unused_parameters: true"));
  }
}

TEST(DdpOptionsTest, StaticGraphTrainsAsTheDefault) {
  const Data d = MakeData();
  std::vector<std::vector<at::Tensor>> got[2][2];  // [static_graph][rank]
  for (bool static_graph : {false, true}) {
    DdpOptions o;
    o.static_graph = static_graph;
    // All parameters used: the default can train too.
    OnTwoRanks(
        o, 16,
        [&](DistributedDataParallel& ddp, Net& net, int rank) {
          got[static_graph][rank] = Train(net, &ddp, d, rank);
        },
        /*freeze_unused=*/true);
  }
  const auto want = Reference(d);
  for (int rank = 0; rank < 2; ++rank) {
    ExpectClose(got[1][rank], got[0][rank], "static vs default, rank " + std::to_string(rank));
    ExpectClose(got[1][rank], want, "static vs one process, rank " + std::to_string(rank));
  }
}

TEST(DdpOptionsTest, GradientAsBucketViewMakesGradientsViewsOfTheBucket) {
  const Data d = MakeData();
  const auto want = Reference(d);
  for (bool view : {false, true}) {
    DdpOptions o;
    o.find_unused_parameters = true;
    o.gradient_as_bucket_view = view;
    std::vector<std::vector<at::Tensor>> got[2];
    bool alias[2] = {false, false};
    OnTwoRanks(o, 16, [&](DistributedDataParallel& ddp, Net& net, int rank) {
      got[rank] = Train(net, &ddp, d, rank);
      // a.weight and a.bias share a bucket (the model is far under 1 MiB).
      alias[rank] = net->a->weight.grad().is_alias_of(net->a->bias.grad());
    });
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(alias[rank], view) << "rank " << rank;
      ExpectClose(got[rank], want, "view " + std::to_string(view));
    }
  }
}

TEST(DdpOptionsTest, BucketCapMbChangesTheBucketCount) {
  // Linear(16, 512), BatchNorm, Linear(512, 5) x 2: ~60 KiB of gradients.
  const Data d = MakeData();
  size_t count[2] = {0, 0};  // [25 MiB, 0.01 MiB]
  for (int small : {0, 1}) {
    TrainOptions t;
    t.ddp.find_unused_parameters = true;
    t.ddp.bucket_cap_mb = small ? 0.01 : 25;
    DdpOptions o = DdpOptionsFrom(t);
    o.first_bucket_bytes = 4096;  // Python's _DEFAULT_FIRST_BUCKET_BYTES, scaled down
    EXPECT_EQ(o.bucket_bytes, small ? size_t{10485} : size_t{25} << 20);
    OnTwoRanks(o, 512, [&](DistributedDataParallel& ddp, Net& net, int rank) {
      Train(net, &ddp, d, rank);
      if (rank == 0) count[small] = ddp.buckets().size();
    });
  }
  EXPECT_EQ(count[0], 2u);  // the first bucket, then the rest
  EXPECT_GT(count[1], count[0]);
}

TEST(DdpOptionsTest, BucketsAreRebuiltAfterTheFirstStep) {
  const Data d = MakeData();
  DdpOptions o;
  o.first_bucket_bytes = 1024;
  o.bucket_bytes = 4096;
  size_t before = 0, after = 0;
  OnTwoRanks(
      o, 64,
      [&](DistributedDataParallel& ddp, Net& net, int rank) {
        if (rank == 0) before = ddp.buckets().size();
        Train(net, &ddp, d, rank);
        if (rank == 0) after = ddp.buckets().size();
      },
      /*freeze_unused=*/true);
  EXPECT_EQ(before, 1u);  // as Python DDP: one bucket until the rebuild
  EXPECT_GT(after, 1u);
}

TEST(DdpOptionsTest, WithoutBroadcastBuffersRanksKeepTheirOwnBuffers) {
  const Data d = MakeData();
  for (bool broadcast : {true, false}) {
    DdpOptions o;
    o.find_unused_parameters = true;
    o.broadcast_buffers = broadcast;
    at::Tensor mean[2];
    OnTwoRanks(o, 16, [&](DistributedDataParallel& ddp, Net& net, int rank) {
      net->bn->train();
      Train(net, &ddp, d, rank);
      ddp.BeforeForward(true);  // where a broadcast would happen
      mean[rank] = net->bn->running_mean.clone();
    });
    EXPECT_EQ(at::equal(mean[0], mean[1]), broadcast) << "broadcast_buffers " << broadcast;
  }
}

TEST(DdpOptionsTest, ConfigKeysAndBadValues) {
  const std::string mlp = std::string(ELASTRUN_CONFIGS_DIR) + "/fashion_mnist_mlp.yaml";
  auto cfg = LoadTrainerConfig(mlp, {});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const DdpOptions defaults = DdpOptionsFrom(cfg->train);
  EXPECT_FALSE(defaults.find_unused_parameters);
  EXPECT_FALSE(defaults.static_graph);
  EXPECT_TRUE(defaults.broadcast_buffers);
  EXPECT_EQ(defaults.bucket_bytes, size_t{25} << 20);
  EXPECT_EQ(defaults.first_bucket_bytes, size_t{1} << 20);
  EXPECT_FALSE(defaults.gradient_as_bucket_view);
  EXPECT_FALSE(defaults.stop_vote);
  cfg = LoadTrainerConfig(mlp, {"train.ddp.find_unused_parameters=true",
                                "train.ddp.static_graph=true", "train.ddp.broadcast_buffers=false",
                                "train.ddp.bucket_cap_mb=0.5",
                                "train.ddp.gradient_as_bucket_view=true"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const DdpOptions o = DdpOptionsFrom(cfg->train);
  EXPECT_TRUE(o.find_unused_parameters);
  EXPECT_TRUE(o.static_graph);
  EXPECT_FALSE(o.broadcast_buffers);
  EXPECT_EQ(o.bucket_bytes, size_t{1} << 19);
  EXPECT_TRUE(o.gradient_as_bucket_view);
  for (const char* bad : {"train.ddp.bucket_cap_mb=0", "train.ddp.bucket_cap_mb=-1"}) {
    cfg = LoadTrainerConfig(mlp, {bad});
    ASSERT_FALSE(cfg.ok()) << bad;
    EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("train.ddp.bucket_cap_mb")) << bad;
  }
  cfg = LoadTrainerConfig(mlp, {"train.ddp.static_graph=maybe"});
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("train.ddp.static_graph"));
  cfg = LoadTrainerConfig(mlp, {"+train.ddp.bucket_cap=3"});
  ASSERT_FALSE(cfg.ok());
  EXPECT_THAT(std::string(cfg.status().message()), HasSubstr("bucket_cap"));
}

}  // namespace
}  // namespace elastrun::trainer
