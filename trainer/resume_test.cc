// Resume on two ranks (threads with their own Gloo groups), each with its
// own checkpoint folder as two nodes have: the ranks restore one state,
// the newest by (branch, lineage), and never two different states under
// one key.
#include "trainer/resume.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint_file.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"
#include "trainer/state_image.h"
#include "trainer/trainer_test_util.h"

namespace elastrun::trainer {
namespace {

using ::elastrun::trainer::testing::RunTwoRanks;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

struct Trained {
  Model model;
  std::unique_ptr<Optimizer> optimizer;
};

// The same small MLP on every call with the same seed; `steps` SGD steps on
// data drawn from `data_seed`, so two calls that differ only there hold the
// same weights' shapes and different values.
Trained Make(uint64_t data_seed, int steps) {
  torch::manual_seed(1);
  MlpOptions o;
  o.in_features = 8;
  o.hidden = {6};
  o.num_classes = 3;
  Trained t{MakeMlp(o), nullptr};
  OptimizerSpec spec;
  spec.momentum = 0.9;
  t.optimizer = *Optimizer::Create(spec, *t.model, 0.0);
  torch::manual_seed(data_seed);
  for (int i = 0; i < steps; ++i) {
    torch::nn::functional::cross_entropy(t.model->forward(torch::randn({4, 8})),
                                         torch::randint(0, 3, {4}))
        .backward();
    t.optimizer->Step();
  }
  return t;
}

const RunIdentity kRun{"resume-test", "digest"};

// Writes `t`'s state at (branch, lineage) as a checkpoint of kRun in `dir`.
void WriteState(Trained& t, int64_t branch, int64_t lineage, const std::string& dir) {
  StateExtras extras;
  extras.position.branch = branch;
  extras.position.lineage = lineage;
  extras.position.epoch = 1;
  CheckpointBlob blob;
  blob.key = CheckpointKey(extras.position);
  blob.run = kRun;
  blob.payload = StateImage::Plan(*t.model, t.optimizer->torch_optimizer(), extras).ToString();
  ASSERT_TRUE(SaveCheckpoint(CheckpointDir(dir), blob, /*best=*/false).ok());
}

std::vector<at::Tensor> Weights(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

struct RankResult {
  Resumed resumed;
  std::vector<at::Tensor> weights;
  std::string out;  // What the rank printed on run.out.
};

// Resumes on both ranks, rank r from folder dirs[r].
std::vector<RankResult> ResumeOnTwoRanks(const std::string (&dirs)[2]) {
  std::vector<RankResult> results(2);
  RunTwoRanks([&](int rank, worker::ProcessGroup& group) {
    Trained fresh = Make(99, 0);
    TrainerConfig cfg;
    cfg.train.output_dir = dirs[rank];
    RunOptions run;
    run.resume = "";
    char* text = nullptr;
    size_t size = 0;
    run.out = open_memstream(&text, &size);
    absl::StatusOr<Resumed> r = Resume(run, kRun, cfg, 2, rank, &group, *fresh.model,
                                       fresh.optimizer->torch_optimizer(), nullptr);
    std::fclose(run.out);
    results[static_cast<size_t>(rank)].out.assign(text, size);
    std::free(text);
    ASSERT_TRUE(r.ok()) << r.status();
    results[static_cast<size_t>(rank)].resumed = *r;
    results[static_cast<size_t>(rank)].weights = Weights(*fresh.model);
  });
  return results;
}

// Node 0 holds `on0`'s state at (branch0, lineage0), node 1 `on1`'s at
// (branch1, lineage1); both ranks resume.
std::vector<RankResult> ResumeFrom(Trained& on0, int64_t branch0, int64_t lineage0,
                                   Trained& on1, int64_t branch1, int64_t lineage1) {
  const std::string base = TestDir();
  const std::string dirs[2] = {base + "/node0", base + "/node1"};
  WriteState(on0, branch0, lineage0, dirs[0]);
  WriteState(on1, branch1, lineage1, dirs[1]);
  return ResumeOnTwoRanks(dirs);
}

void ExpectWeights(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << i;
}

// Both nodes hold a state under the same key, but rank 1's optimizer state
// drifted (another history): rank 1 must not restore its own.
TEST(ResumeTest, EqualKeysWithDifferentContentRestoreTheHoldersState) {
  Trained a = Make(5, 3);
  Trained b = Make(6, 3);
  std::vector<RankResult> r = ResumeFrom(a, 0, 40, b, 0, 40);
  for (const RankResult& rank : r) {
    EXPECT_TRUE(rank.resumed.resumed);
    EXPECT_FALSE(rank.resumed.everyone);
    EXPECT_EQ(rank.resumed.source, 0);
    ExpectWeights(rank.weights, Weights(*a.model));
  }
  EXPECT_THAT(r[0].out, HasSubstr("rank 1's state of key 40 differs from rank 0's"));
}

// The same state on both nodes: each restores its own copy.
TEST(ResumeTest, TheSameStateEverywhereIsEachRanksOwn) {
  Trained a = Make(5, 3);
  std::vector<RankResult> r = ResumeFrom(a, 2, 40, a, 2, 40);
  for (const RankResult& rank : r) {
    EXPECT_TRUE(rank.resumed.everyone);
    ExpectWeights(rank.weights, Weights(*a.model));
  }
  EXPECT_EQ(r[0].out.find("differs"), std::string::npos) << r[0].out;
}

// A node that comes back with a state of before it was lost (branch 0, a
// higher lineage) never wins over a survivor's state of a later branch.
TEST(ResumeTest, ALaterBranchWinsOverAHigherLineage) {
  Trained survivor = Make(5, 4);
  Trained returning = Make(6, 6);
  std::vector<RankResult> r = ResumeFrom(survivor, 1, 30, returning, 0, 500);
  for (const RankResult& rank : r) {
    EXPECT_EQ(rank.resumed.source, 0);
    EXPECT_EQ(rank.resumed.extras.position.branch, 1);
    EXPECT_EQ(rank.resumed.extras.position.lineage, 30);
    ExpectWeights(rank.weights, Weights(*survivor.model));
  }
}

// Checkpoint files are named and pruned by that order: the newest branch's
// stay, whatever the lineage of older ones.
TEST(ResumeTest, PruningKeepsTheNewestByBranchThenLineage) {
  const std::string dir = TestDir() + "/node0";
  Trained t = Make(5, 1);
  ASSERT_NO_FATAL_FAILURE(WriteState(t, 0, 900, dir));
  ASSERT_NO_FATAL_FAILURE(WriteState(t, 0, 950, dir));
  ASSERT_NO_FATAL_FAILURE(WriteState(t, 1, 10, dir));
  ASSERT_NO_FATAL_FAILURE(WriteState(t, 1, 20, dir));
  std::vector<int64_t> keys;
  for (const std::string& path : ListCheckpoints(CheckpointDir(dir))) {
    keys.push_back(ReadCheckpointHeader(path)->key);
  }
  TrainPosition p;
  p.branch = 1;
  p.lineage = 20;
  const int64_t newest = CheckpointKey(p);
  p.lineage = 10;
  EXPECT_THAT(keys, ::testing::ElementsAre(newest, CheckpointKey(p)));
}

}  // namespace
}  // namespace elastrun::trainer
