// Run identity without torch: the config digest, checkpoint files of two
// runs sharing a folder, version 1 files, and an earlier run's metrics.
#include "trainer/run_identity.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint_file.h"
#include "trainer/digest.h"
#include "trainer/metrics.h"
#include "trainer/test_files.h"

namespace elastrun::trainer {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::elastrun::trainer::testing::TestDir;

constexpr char kConfig[] = R"(
model: {_target_: mlp, hidden: 32}
optimizer: {_target_: sgd, lr0: 0.01}
scheduler: {_target_: yolov5, warmup_epochs: 0, epochs: '${train.epochs}'}
data: {synthetic: true, batch_size: 16}
train: {epochs: 2, seed: 3, output_dir: runs/a}
)";

std::string DigestWith(const std::vector<std::string>& overrides) {
  absl::StatusOr<config::Node> node =
      config::LoadConfigFromString(kConfig, "test.yaml", overrides);
  EXPECT_TRUE(node.ok()) << node.status();
  return ConfigDigest(*node);
}

TEST(RunIdentityTest, DigestIgnoresResumableKeysOnly) {
  const std::string base = DigestWith({});
  EXPECT_EQ(base.size(), 32u);
  // What builds before train.device and train.amp_dtype computed for this
  // config: their checkpoints still resume after an upgrade.
  EXPECT_EQ(base, "ca58c2607c52fe68f79a07c4367946a7");
  // May change on resume.
  EXPECT_EQ(DigestWith({"train.epochs=5"}), base);  // scheduler.epochs follows
  EXPECT_EQ(DigestWith({"train.epochs=1", "scheduler.epochs=2"}), base);
  EXPECT_EQ(DigestWith({"train.output_dir=elsewhere", "+train.threads=4",
                        "+train.run_name=x", "+train.checkpoint_iters=10"}),
            base);
  // An explicit default digests as the omitted one.
  EXPECT_EQ(DigestWith({"+train.amp=false"}), base);
  // Where it trains may change too: a state resumes on any device.
  EXPECT_EQ(DigestWith({"+train.device=cuda:1"}), base);
  // Keys newer than runs already checkpointed: at their default, those
  // runs still resume.
  EXPECT_EQ(DigestWith({"+train.amp_dtype=float16"}), base);
  EXPECT_NE(DigestWith({"+train.amp_dtype=bfloat16"}), base);
  // The run itself.
  EXPECT_NE(DigestWith({"train.seed=4"}), base);
  EXPECT_NE(DigestWith({"model.hidden=64"}), base);
  EXPECT_NE(DigestWith({"optimizer.lr0=0.02"}), base);
  EXPECT_NE(DigestWith({"data.batch_size=32"}), base);
}

TEST(RunIdentityTest, RunIdChoiceAndHeaderEncoding) {
  EXPECT_EQ(ChooseRunId("", "job-1"), "job-1");
  EXPECT_EQ(ChooseRunId("mine", "job-1"), "mine");
  for (const std::string id : {"", "job-1", "a b%c\n", "ümlaut"}) {
    const std::string field = EncodeRunIdField(id);
    EXPECT_EQ(field.find_first_of(" \n"), std::string::npos) << field;
    std::string back;
    ASSERT_TRUE(DecodeRunIdField(field, &back)) << field;
    EXPECT_EQ(back, id);
  }
  std::string out;
  EXPECT_FALSE(DecodeRunIdField("a%4", &out));
  EXPECT_FALSE(DecodeRunIdField("a%zz", &out));
}

CheckpointBlob Blob(int64_t key, const RunIdentity& run) {
  CheckpointBlob b;
  b.key = key;
  b.run = run;
  b.payload = "state of " + run.run_id + " at " + std::to_string(key);
  return b;
}

TEST(RunIdentityTest, TwoRunsInOneFolderNeverTouchEachOthersFiles) {
  const std::string dir = TestDir() + "/checkpoints";
  const RunIdentity old_run{"old", "aaaa"};
  const RunIdentity new_run{"new", "bbbb"};
  for (int64_t key : {1000000, 2000000, 3000000}) {
    ASSERT_TRUE(SaveCheckpoint(dir, Blob(key, old_run), /*best=*/key == 1000000).ok());
  }
  for (int64_t key : {1000000, 2000000, 3000000}) {
    ASSERT_TRUE(SaveCheckpoint(dir, Blob(key, new_run), /*best=*/true).ok());
  }
  // Each run keeps its newest two; the same keys did not collide.
  EXPECT_EQ(ListCheckpoints(dir).size(), 4u);
  EXPECT_EQ(ReadCheckpointFile(NumberedCheckpointPath(dir, 3000000, old_run.Tag()))->payload,
            "state of old at 3000000");
  // last.ckpt and best.ckpt stay the first run's.
  EXPECT_EQ(ReadCheckpointFile(dir + "/last.ckpt")->run, old_run);
  EXPECT_EQ(ReadCheckpointFile(dir + "/best.ckpt")->key, 1000000);

  std::vector<std::string> foreign;
  auto mine = LoadNewestCheckpoint(dir, new_run, nullptr, &foreign);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->run, new_run);
  EXPECT_EQ(mine->key, 3000000);
  ASSERT_EQ(foreign.size(), 2u);
  EXPECT_THAT(foreign[0], HasSubstr(NumberedCheckpointPath(dir, 3000000, old_run.Tag())));
  EXPECT_THAT(foreign[0], HasSubstr("run 'old' vs 'new'"));
  // The same run id with another config finds nothing of its own, and names
  // all four files.
  foreign.clear();
  EXPECT_TRUE(absl::IsNotFound(
      LoadNewestCheckpoint(dir, RunIdentity{"old", "cccc"}, nullptr, &foreign).status()));
  EXPECT_EQ(foreign.size(), 4u);
  EXPECT_THAT(foreign, Contains(HasSubstr("(run 'old', config aaaa: config aaaa vs cccc")));
  EXPECT_EQ(ListCheckpoints(dir).size(), 4u);
}

TEST(RunIdentityTest, VersionOneFilesBelongToNoRun) {
  const std::string dir = TestDir();
  const std::string payload = "old payload";
  std::ofstream(dir + "/ckpt_0001000000.ckpt", std::ios::binary)
      << "ELASTRUN-CKPT 1 1000000 " << payload.size() << " " << Sha256Hex(payload) << "\n"
      << payload;
  auto read = ReadCheckpointFile(dir + "/ckpt_0001000000.ckpt");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->payload, payload);
  EXPECT_EQ(read->run, RunIdentity{});
  std::vector<std::string> foreign;
  EXPECT_FALSE(LoadNewestCheckpoint(dir, RunIdentity{"job", "dddd"}, nullptr, &foreign).ok());
  ASSERT_EQ(foreign.size(), 1u);
  EXPECT_THAT(foreign[0], HasSubstr("written before checkpoints recorded their run"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt_0001000000.ckpt"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(RunIdentityTest, FreshRunKeepsAnEarlierRunsMetrics) {
  const std::string dir = TestDir();
  // A header alone is nothing to keep.
  std::ofstream(dir + "/metrics.csv") << kMetricsHeader << "\n";
  EXPECT_EQ(*KeepEarlierMetrics(dir), "");
  const std::string rows = std::string(kMetricsHeader) + "\n1,0.5,0.5,0.8,0.01,1.0,100.0\n";
  for (int n : {1, 2}) {
    std::ofstream(dir + "/metrics.csv") << rows;
    std::ofstream(dir + "/config.yaml") << "run " << n << "\n";
    auto kept = KeepEarlierMetrics(dir);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(*kept, "metrics." + std::to_string(n) + ".csv");
    EXPECT_EQ(ReadFile(dir + "/" + *kept), rows);
    EXPECT_EQ(ReadFile(dir + "/config." + std::to_string(n) + ".yaml"),
              "run " + std::to_string(n) + "\n");
    EXPECT_FALSE(std::filesystem::exists(dir + "/metrics.csv"));
  }
  EXPECT_THAT(ReadFile(dir + "/config.1.yaml"), Not(HasSubstr("2")));
}

}  // namespace
}  // namespace elastrun::trainer
