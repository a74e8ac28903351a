// The flat state image: what goes in comes back bitwise (parameters in
// their layouts, buffers, SGD momentum, AdamW's moments and steps, the
// position's doubles, the blobs, the generator), and bad bytes are an
// error naming what is wrong, never a crash or a half-load.
#include "trainer/state_image.h"

#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

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
  e.position.samples_done = 544;
  e.position.lineage = 123;
  e.position.branch = 4;
  e.position.step_epoch = 3;
  e.position.step_done = 512;
  e.position.world_size = 2;
  e.position.warmup_samples = 3200;
  e.position.best_acc = 0.1 + 0.2;  // Not exact in decimal: must survive.
  e.position.local_loss_sum = 1.0 / 3.0;
  e.position.tail_from = 29;
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
  EXPECT_EQ(back.position.samples_done, 544);
  EXPECT_EQ(back.position.lineage, 123);
  EXPECT_EQ(back.position.branch, 4);
  EXPECT_EQ(back.position.step_epoch, 3);
  EXPECT_EQ(back.position.step_done, 512);
  EXPECT_EQ(back.position.warmup_samples, 3200);
  EXPECT_EQ(back.position.best_acc, 0.1 + 0.2);
  EXPECT_EQ(back.position.local_loss_sum, 1.0 / 3.0);
  EXPECT_EQ(back.position.tail_from, 29);
  EXPECT_EQ(back.position.legacy_iteration, -1);
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
  bad.replace(bad.find(" 2 "), 3, " 9 ");  // Another format version.
  absl::Status s = RestoreImage(bad, *b.model, b.optimizer->torch_optimizer(), &back);
  EXPECT_THAT(std::string(s.message()), HasSubstr("format 9"));
}

// The image with its index text changed by `edit` (the header and the
// padding made to fit; the data section as it was).
std::string WithIndex(const std::string& image,
                      const std::function<std::string(std::string)>& edit,
                      const std::string& format = "2") {
  const size_t nl = image.find('\n');
  const size_t index_size = std::stoul(image.substr(image.rfind(' ', nl) + 1, nl));
  const size_t data_start = (nl + 1 + index_size + 63) / 64 * 64;
  const std::string index = edit(image.substr(nl + 1, index_size));
  std::string out = "ELASTRUN-STATE " + format + " " + std::to_string(index.size()) + "\n" + index;
  out.resize((out.size() + 63) / 64 * 64, '\0');
  return out + image.substr(data_start);
}

// Replaces the first index record starting with `prefix` by `record`.
std::function<std::string(std::string)> Replace(const std::string& prefix,
                                                const std::string& record) {
  return [=](std::string index) {
    const size_t at = index.find(prefix);
    EXPECT_NE(at, std::string::npos) << prefix;
    if (at == std::string::npos) return index;
    return index.replace(at, index.find('\n', at) - at, record);
  };
}

// The record line of tensor `name`.
std::string Record(const std::string& image, const std::string& name) {
  const size_t at = image.find("\nt " + name + " ") + 1;
  return image.substr(at, image.find('\n', at) - at);
}

std::vector<at::Tensor> Copies(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  for (const at::Tensor& b : m.buffers()) out.push_back(b.detach().clone());
  return out;
}

void ExpectUnchanged(torch::nn::Module& m, const std::vector<at::Tensor>& before) {
  std::vector<at::Tensor> now = Copies(m);
  ASSERT_EQ(now.size(), before.size());
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(at::equal(now[i], before[i])) << i;
}

// A crafted image (an index whose shapes or strides claim more than the
// bytes hold, a tensor of another type, a duplicate record) is refused
// before any tensor is touched: the model keeps every value it had.
TEST(StateImageTest, CraftedImageIsRefusedAndTheModelUntouched) {
  Trained a = Make(OptimizerSpec::Kind::kSgd, 1);
  Step(a.model, *a.optimizer);
  const std::string good =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), Extras()).ToString();
  Trained b = Make(OptimizerSpec::Kind::kSgd, 2);
  Step(b.model, *b.optimizer);
  const std::vector<at::Tensor> before = Copies(*b.model);
  // The last parameter's record: the others would already be copied if
  // records were applied one by one.
  std::string last_name;
  for (const auto& item : b.model->named_parameters()) last_name = "m." + item.key();
  const std::string record = Record(good, last_name);
  std::vector<std::string> f = absl::StrSplit(record, ' ');
  const size_t dims = std::stoul(f[3]);
  struct Case {
    const char* what;
    std::string image;
    const char* message;
  };
  std::vector<std::string> bigger = f;
  bigger[4] = std::to_string(std::stoll(f[4]) * 1000);  // Sizes beyond its bytes.
  std::vector<std::string> strided = f;
  strided[4 + dims] = std::to_string(std::stoll(f[4 + dims]) * 1000);  // Strides beyond.
  std::vector<std::string> typed = f;
  typed[2] = std::to_string(static_cast<int>(at::kDouble));  // Twice the bytes per element.
  std::vector<std::string> exotic = f;
  exotic[2] = std::to_string(static_cast<int>(at::kComplexFloat));
  const std::vector<Case> cases = {
      {"sizes", WithIndex(good, Replace(record, absl::StrJoin(bigger, " "))), "do not match"},
      {"strides", WithIndex(good, Replace(record, absl::StrJoin(strided, " "))),
       "do not match"},
      {"dtype", WithIndex(good, Replace(record, absl::StrJoin(typed, " "))), "do not match"},
      {"exotic dtype", WithIndex(good, Replace(record, absl::StrJoin(exotic, " "))),
       "bad tensor record"},
      {"duplicate", WithIndex(good, [&](std::string index) { return index + record + "\n"; }),
       "appears twice"},
      {"truncated data", good.substr(0, good.size() - 4), "lies outside"},
  };
  for (const Case& c : cases) {
    StateExtras back;
    absl::Status s = RestoreImage(c.image, *b.model, b.optimizer->torch_optimizer(), &back);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.what << ": " << s;
    EXPECT_FALSE(ContentDigest(c.image).ok()) << c.what;
    ExpectUnchanged(*b.model, before);
  }
  // A well-formed image of another shape: refused before any copy too.
  std::vector<std::string> other = f;
  other[4] = std::to_string(std::stoll(f[4]) - 1);
  other[5 + 2 * dims] = std::to_string(std::stoll(f[5 + 2 * dims]) -
                                       std::stoll(f[4 + dims]) * 4);  // One row less.
  StateExtras back;
  absl::Status s = RestoreImage(WithIndex(good, Replace(record, absl::StrJoin(other, " "))),
                                *b.model, b.optimizer->torch_optimizer(), &back);
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not fit this model")) << s;
  ExpectUnchanged(*b.model, before);
}

// Two ranks' images of one step differ in what is each rank's own (loss
// sums, buffers, generator) but have one content digest; a changed weight
// or position is another digest.
TEST(StateImageTest, ContentDigestCoversTheSharedStateOnly) {
  Trained a = Make(OptimizerSpec::Kind::kSgd, 1);
  Step(a.model, *a.optimizer);
  StateExtras e = Extras();
  const std::string one = StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), e).ToString();
  e.position.local_loss_sum = 7;
  e.position.local_seen = 100;
  e.rng.cpu = at::Tensor();
  for (const at::Tensor& b : a.model->buffers()) b.detach().add_(1);
  const std::string other =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), e).ToString();
  ASSERT_NE(one, other);
  EXPECT_EQ(*ContentDigest(one), *ContentDigest(other));
  e.position.lineage += 1;
  const std::string later =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), e).ToString();
  EXPECT_NE(*ContentDigest(one), *ContentDigest(later));
  {
    torch::NoGradGuard no_grad;
    a.model->parameters()[0].view(-1)[0] += 1e-6;
  }
  e.position.lineage -= 1;
  const std::string drifted =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), e).ToString();
  EXPECT_NE(*ContentDigest(one), *ContentDigest(drifted));
}

// An older build's image (format 1: the position in batches per rank) is
// still read, into the legacy fields the trainer converts.
TEST(StateImageTest, FormatOneIsReadIntoTheLegacyPosition) {
  Trained a = Make(OptimizerSpec::Kind::kSgd, 1);
  Step(a.model, *a.optimizer);
  const std::string now =
      StateImage::Plan(*a.model, a.optimizer->torch_optimizer(), Extras()).ToString();
  const std::string old = WithIndex(
      now,
      [](std::string index) {
        index = Replace("p samples_done ", "p iteration 17")(index);
        index = Replace("p lineage ", "p last_opt_step 123")(index);
        return Replace("p tail_from ", "p tail_begin 5")(index);
      },
      "1");
  Trained b = Make(OptimizerSpec::Kind::kSgd, 2);
  StateExtras back;
  ASSERT_TRUE(RestoreImage(old, *b.model, b.optimizer->torch_optimizer(), &back).ok());
  EXPECT_EQ(back.position.legacy_iteration, 17);
  EXPECT_EQ(back.position.legacy_last_opt_step, 123);
  EXPECT_EQ(back.position.legacy_tail_begin, 5);
  EXPECT_EQ(back.position.epoch, 3);
  ExpectSameTensors(*a.model, *b.model);
}

}  // namespace
}  // namespace elastrun::trainer
