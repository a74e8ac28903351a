// The flat state image: what goes in comes back bitwise (parameters in
// their layouts, buffers, SGD momentum, AdamW's moments and steps, the
// position's doubles, the blobs, the generator), and bad bytes are an
// error naming what is wrong, never a crash or a half-load.
#include "trainer/state_image.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"

namespace elastrun::trainer {
namespace {

using ::testing::HasSubstr;

// One optimizer step on random data, so momentum and moments exist.
void Step(Model& model, Optimizer& optimizer) {
  at::Tensor x = torch::randn({4, 1, 28, 28});
  at::Tensor y = torch::randint(0, 10, {4});
  torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  optimizer.Step();
}

void ExpectSameTensors(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    const at::Tensor& other = pb[item.key()];
    EXPECT_TRUE(at::equal(item.value(), other)) << item.key();
    EXPECT_EQ(item.value().strides(), other.strides()) << item.key() << ": layout kept";
  }
  auto ba = a.named_buffers();
  auto bb = b.named_buffers();
  for (const auto& item : ba) EXPECT_TRUE(at::equal(item.value(), bb[item.key()])) << item.key();
}

at::Tensor GeneratorState() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

struct Trained {
  Model model;
  std::unique_ptr<Optimizer> optimizer;
};

Trained Make(OptimizerSpec::Kind kind, uint64_t seed) {
  torch::manual_seed(seed);
  Trained t{MakeCnn(CnnOptions{}), nullptr};
  OptimizerSpec spec;
  spec.kind = kind;
  auto opt = Optimizer::Create(spec, *t.model, 0.001);
  EXPECT_TRUE(opt.ok()) << opt.status();
  t.optimizer = *std::move(opt);
  return t;
}

StateExtras Extras() {
  StateExtras e;
  e.position.epoch = 3;
  e.position.iteration = 17;
  e.position.last_opt_step = 123;
  e.position.world_size = 2;
  e.position.best_acc = 0.1 + 0.2;  // Not exact in decimal: must survive.
  e.position.local_loss_sum = 1.0 / 3.0;
  e.position.tail_begin = 29;
  e.config_yaml = "model: {_target_: CNN}\n";
  e.metrics_rows = "1,2.3,2.2,0.1,0.01,1.0,500\n";
  e.rng.cpu = GeneratorState();
  return e;
}

TEST(StateImageTest, SgdStateComesBackBitwise) {
  Trained a = Make(OptimizerSpec::Kind::kSgd, 1);
  Step(a.model, *a.optimizer);
  const StateExtras extras = Extras();
  const std::string bytes =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), extras).ToString();
  ASSERT_TRUE(IsStateImage(bytes));

  Trained b = Make(OptimizerSpec::Kind::kSgd, 2);
  StateExtras back;
  ASSERT_TRUE(RestoreImage(bytes, *b.model, b.optimizer->torch_optimizer(), &back).ok());
  ExpectSameTensors(*a.model, *b.model);
  EXPECT_EQ(back.position.epoch, 3);
  EXPECT_EQ(back.position.iteration, 17);
  EXPECT_EQ(back.position.last_opt_step, 123);
  EXPECT_EQ(back.position.best_acc, 0.1 + 0.2);
  EXPECT_EQ(back.position.local_loss_sum, 1.0 / 3.0);
  EXPECT_EQ(back.position.tail_begin, 29);
  EXPECT_EQ(back.config_yaml, extras.config_yaml);
  EXPECT_EQ(back.metrics_rows, extras.metrics_rows);
  EXPECT_TRUE(at::equal(back.rng.cpu, extras.rng.cpu));
  EXPECT_FALSE(back.rng.cuda.defined());  // Taken on a CPU.

  // The same next step from both: momentum came back too.
  torch::manual_seed(9);
  Step(a.model, *a.optimizer);
  torch::manual_seed(9);
  Step(b.model, *b.optimizer);
  ExpectSameTensors(*a.model, *b.model);
}

TEST(StateImageTest, AdamWStateComesBackBitwise) {
  Trained a = Make(OptimizerSpec::Kind::kAdamW, 1);
  Step(a.model, *a.optimizer);
  Step(a.model, *a.optimizer);
  const std::string bytes =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), Extras()).ToString();
  Trained b = Make(OptimizerSpec::Kind::kAdamW, 2);
  StateExtras back;
  ASSERT_TRUE(RestoreImage(bytes, *b.model, b.optimizer->torch_optimizer(), &back).ok());
  torch::manual_seed(9);
  Step(a.model, *a.optimizer);
  torch::manual_seed(9);
  Step(b.model, *b.optimizer);
  ExpectSameTensors(*a.model, *b.model);
}

TEST(StateImageTest, AnotherModelDoesNotFit) {
  Trained cnn = Make(OptimizerSpec::Kind::kSgd, 1);
  const std::string bytes =
      StateImage::Plan(*cnn.model, cnn.optimizer->torch_optimizer(), Extras()).ToString();
  Model mlp = MakeMlp(MlpOptions{});
  auto opt = Optimizer::Create(OptimizerSpec{}, *mlp, 0.001);
  ASSERT_TRUE(opt.ok());
  StateExtras back;
  absl::Status s = RestoreImage(bytes, *mlp, (*opt)->torch_optimizer(), &back);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not fit this model"));
}

TEST(StateImageTest, DamagedBytesAreAnErrorNeverACrash) {
  Trained a = Make(OptimizerSpec::Kind::kSgd, 1);
  Step(a.model, *a.optimizer);
  const std::string bytes =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), Extras()).ToString();
  Trained b = Make(OptimizerSpec::Kind::kSgd, 2);
  StateExtras back;
  // Cut anywhere in the header and index, and at the data's end.
  const size_t index_end = bytes.find("\nt ") + 200;
  for (size_t cut = 0; cut < index_end; cut += 7) {
    absl::Status s =
        RestoreImage(bytes.substr(0, cut), *b.model, b.optimizer->torch_optimizer(), &back);
    EXPECT_FALSE(s.ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(RestoreImage(bytes.substr(0, bytes.size() - 1), *b.model,
                            b.optimizer->torch_optimizer(), &back)
                   .ok());
  std::string bad = bytes;
  bad.replace(bad.find(" 1 "), 3, " 9 ");  // Another format version.
  absl::Status s = RestoreImage(bad, *b.model, b.optimizer->torch_optimizer(), &back);
  EXPECT_THAT(std::string(s.message()), HasSubstr("format 9"));
}

}  // namespace
}  // namespace elastrun::trainer
