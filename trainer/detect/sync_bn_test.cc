// SyncBatchNorm2d against torch::nn::BatchNorm2d: two ranks (threads with
// their own Gloo groups), each with part of a batch, give the outputs,
// running statistics and gradients of one BatchNorm2d over the whole
// batch; without a group, with a group of one rank or in eval() it is
// BatchNorm2d bitwise.
#include "trainer/detect/sync_bn.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/detect/model.h"
#include "trainer/trainer_test_util.h"

namespace elastrun::trainer::detect {
namespace {

using testing::RunTwoRanks;
using worker::ProcessGroup;

constexpr int64_t kChannels = 5;

torch::nn::BatchNorm2dOptions Options() {
  return torch::nn::BatchNorm2dOptions(kChannels).eps(1e-3).momentum(0.03);
}

// Random affine parameters (not 1 and 0) and running statistics.
template <typename Layer>
void Randomize(Layer& bn, at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  bn.to(dtype);
  bn.weight.copy_(at::rand({kChannels}, dtype) + 0.5);
  bn.bias.copy_(at::randn({kChannels}, dtype));
  bn.running_mean.copy_(at::randn({kChannels}, dtype));
  bn.running_var.copy_(at::rand({kChannels}, dtype) + 0.5);
}

void CopyState(const torch::nn::BatchNorm2dImpl& from, SyncBatchNorm2dImpl& to) {
  torch::NoGradGuard no_grad;
  to.to(from.weight.scalar_type());
  to.weight.copy_(from.weight);
  to.bias.copy_(from.bias);
  to.running_mean.copy_(from.running_mean);
  to.running_var.copy_(from.running_var);
  to.num_batches_tracked.copy_(from.num_batches_tracked);
}

// What one layer produced over kSteps forward/backward steps: outputs and
// input gradients per step, then the final state and summed gradients.
struct Record {
  std::vector<at::Tensor> outputs, input_grads;
  at::Tensor running_mean, running_var, num_batches_tracked, weight_grad, bias_grad;
};

constexpr int kSteps = 3;

// Steps `forward` on inputs[s] with loss sum(y * upstream[s]).
template <typename Layer>
Record Run(Layer& bn, const std::vector<at::Tensor>& inputs,
           const std::vector<at::Tensor>& upstream) {
  Record r;
  for (size_t s = 0; s < inputs.size(); ++s) {
    at::Tensor x = inputs[s].clone().requires_grad_(true);
    at::Tensor y = bn.forward(x);
    (y * upstream[s]).sum().backward();
    r.outputs.push_back(y.detach());
    r.input_grads.push_back(x.grad());
  }
  r.running_mean = bn.running_mean.clone();
  r.running_var = bn.running_var.clone();
  r.num_batches_tracked = bn.num_batches_tracked.clone();
  r.weight_grad = bn.weight.grad().clone();
  r.bias_grad = bn.bias.grad().clone();
  return r;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Rank 0 takes the first `split` samples of each batch, rank 1 the rest.
void CompareTwoRanksWithOneProcess(at::ScalarType dtype, int64_t batch, int64_t split,
                                   bool channels_last, double tol) {
  SCOPED_TRACE(std::string(c10::toString(dtype)) + " split " + std::to_string(split) +
               (channels_last ? " channels_last" : ""));
  torch::manual_seed(3);
  std::vector<at::Tensor> inputs, upstream;
  for (int s = 0; s < kSteps; ++s) {
    at::Tensor x = at::randn({batch, kChannels, 6, 7}, dtype) * 2 + 0.7;
    if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    inputs.push_back(x);
    upstream.push_back(at::randn({batch, kChannels, 6, 7}, dtype));
  }
  torch::nn::BatchNorm2d reference(Options());
  Randomize(*reference, dtype);
  SyncBatchNorm2d ranks[2] = {SyncBatchNorm2d(Options()), SyncBatchNorm2d(Options())};
  for (SyncBatchNorm2d& bn : ranks) CopyState(*reference, *bn);
  const Record want = Run(*reference, inputs, upstream);

  Record got[2];
  int set[2] = {0, 0};
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    auto cpu = group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    set[rank] = UseSyncBatchNorm(*ranks[rank], *cpu);
    const int64_t begin = rank == 0 ? 0 : split, end = rank == 0 ? split : batch;
    std::vector<at::Tensor> xs, gs;
    for (int s = 0; s < kSteps; ++s) {
      xs.push_back(inputs[s].slice(0, begin, end));
      gs.push_back(upstream[s].slice(0, begin, end));
    }
    got[rank] = Run(*ranks[rank], xs, gs);
    // DDP would average these; the sum is the whole batch's gradient.
    ASSERT_TRUE(group.AllReduce(got[rank].weight_grad).ok());
    ASSERT_TRUE(group.AllReduce(got[rank].bias_grad).ok());
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(set[rank], 1);
    const int64_t begin = rank == 0 ? 0 : split, end = rank == 0 ? split : batch;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_LE(MaxDiff(got[rank].outputs[s], want.outputs[s].slice(0, begin, end)), tol) << s;
      EXPECT_LE(MaxDiff(got[rank].input_grads[s], want.input_grads[s].slice(0, begin, end)),
                tol)
          << s;
    }
    EXPECT_LE(MaxDiff(got[rank].running_mean, want.running_mean), tol);
    EXPECT_LE(MaxDiff(got[rank].running_var, want.running_var), tol);
    EXPECT_TRUE(at::equal(got[rank].num_batches_tracked, want.num_batches_tracked));
    // Sums over the whole batch: relative to their size.
    EXPECT_LE(MaxDiff(got[rank].weight_grad, want.weight_grad),
              tol * (1 + want.weight_grad.abs().max().item<double>()));
    EXPECT_LE(MaxDiff(got[rank].bias_grad, want.bias_grad),
              tol * (1 + want.bias_grad.abs().max().item<double>()));
  }
}

TEST(SyncBatchNormTest, TwoRanksEqualOneBatchNormOverTheWholeBatch) {
  CompareTwoRanksWithOneProcess(at::kFloat, 8, 4, false, 1e-6);
  CompareTwoRanksWithOneProcess(at::kFloat, 8, 4, true, 1e-6);
  CompareTwoRanksWithOneProcess(at::kDouble, 8, 4, false, 1e-13);
  // Ranks with batches of different sizes weigh their statistics by count.
  CompareTwoRanksWithOneProcess(at::kDouble, 8, 3, true, 1e-13);
  CompareTwoRanksWithOneProcess(at::kFloat, 7, 1, false, 1e-6);
}

// Bitwise BatchNorm2d: `configure` sets a group (or none) and the mode.
void ExpectBitwiseBatchNorm2d(const std::function<void(SyncBatchNorm2d&)>& configure,
                              bool training) {
  torch::manual_seed(4);
  std::vector<at::Tensor> inputs, upstream;
  for (int s = 0; s < kSteps; ++s) {
    inputs.push_back(at::randn({4, kChannels, 5, 3}));
    upstream.push_back(at::randn({4, kChannels, 5, 3}));
  }
  torch::nn::BatchNorm2d reference(Options());
  Randomize(*reference, at::kFloat);
  SyncBatchNorm2d bn(Options());
  CopyState(*reference, *bn);
  reference->train(training);
  bn->train(training);
  configure(bn);
  const Record want = Run(*reference, inputs, upstream);
  const Record got = Run(*bn, inputs, upstream);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_TRUE(at::equal(got.outputs[s], want.outputs[s])) << s;
    EXPECT_TRUE(at::equal(got.input_grads[s], want.input_grads[s])) << s;
  }
  EXPECT_TRUE(at::equal(got.running_mean, want.running_mean));
  EXPECT_TRUE(at::equal(got.running_var, want.running_var));
  EXPECT_TRUE(at::equal(got.num_batches_tracked, want.num_batches_tracked));
  EXPECT_TRUE(at::equal(got.weight_grad, want.weight_grad));
  EXPECT_TRUE(at::equal(got.bias_grad, want.bias_grad));
}

TEST(SyncBatchNormTest, WithoutAGroupOrWithOneRankItIsBatchNorm2dBitwise) {
  ExpectBitwiseBatchNorm2d([](SyncBatchNorm2d&) {}, true);
  ExpectBitwiseBatchNorm2d([](SyncBatchNorm2d&) {}, false);
  worker::WorkerEnv env = testing::Env(0, 1, 0);
  auto store = worker::ConnectStore(env, testing::FastOptions());
  ASSERT_TRUE(store.ok()) << store.status();
  auto group = ProcessGroup::Create(env, *store, testing::FastOptions());
  ASSERT_TRUE(group.ok()) << group.status();
  auto cpu = (*group)->ForDevice(c10::DeviceType::CPU);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ExpectBitwiseBatchNorm2d([&](SyncBatchNorm2d& bn) { bn->SetProcessGroup(*cpu); }, true);
}

TEST(SyncBatchNormTest, InEvalItIsBatchNorm2dBitwiseWithNoCollectives) {
  // Two ranks whose evaluation differs in length: no collective may run.
  RunTwoRanks([&](int rank, ProcessGroup& group) {
    auto cpu = group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    if (rank == 0) {
      ExpectBitwiseBatchNorm2d([&](SyncBatchNorm2d& bn) { bn->SetProcessGroup(*cpu); }, false);
    }
  });
}

TEST(SyncBatchNormTest, UseSyncBatchNormReachesEveryLayerOfTheDetector) {
  YoloV5Options o;
  o.num_classes = 3;
  YoloV5 model(o);
  int bn_layers = 0;
  for (const auto& named : model->named_modules()) {
    if (named.key().size() >= 3 && named.key().substr(named.key().size() - 3) == ".bn") {
      ++bn_layers;
      EXPECT_NE(dynamic_cast<SyncBatchNorm2dImpl*>(named.value().get()), nullptr) << named.key();
    }
  }
  EXPECT_GT(bn_layers, 50);
  const auto params = model->named_parameters();
  EXPECT_NE(params.find("b0.bn.weight"), nullptr);
  EXPECT_NE(model->named_buffers().find("b0.bn.num_batches_tracked"), nullptr);
  EXPECT_EQ(UseSyncBatchNorm(*model, {}), bn_layers);
  SyncBatchNorm2d alone(4);
  EXPECT_EQ(UseSyncBatchNorm(*alone, {}), 1);
}

}  // namespace
}  // namespace elastrun::trainer::detect
