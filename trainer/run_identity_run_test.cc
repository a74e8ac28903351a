// Run identity end to end: a run resumes only from its own checkpoints,
// whatever the restart count, and never from another run's in its folder.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint_file.h"
#include "trainer/options.h"
#include "trainer/trainer.h"
#include "trainer/trainer_test_util.h"
#include "worker/process_group.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::RunTwoRanks;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::elastrun::trainer::testing::ReadAll;
using ::elastrun::trainer::testing::RunCommand;

// A small MLP run on synthetic data (8 iterations per epoch), without
// dropout: ranks run as threads here, sharing one CPU generator.
TrainerConfig Config(const std::string& out_dir, const std::vector<std::string>& extra = {}) {
  fs::create_directories(out_dir);
  const std::string path = out_dir + "/cfg.yaml";
  std::ofstream(path) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_mlp.yaml\n";
  std::vector<std::string> overrides = {
      "data.synthetic=true", "+data.synthetic_train_size=256", "+data.synthetic_test_size=128",
      "data.batch_size=32",  "train.epochs=2",                 "train.output_dir=" + out_dir,
      "model.dropout=0.0"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  auto cfg = LoadTrainerConfig(path, overrides);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return *cfg;
}

// One process, as a launcher with run id `run_id` would start it.
absl::StatusOr<TrainResult> Train(const TrainerConfig& cfg, const std::string& run_id,
                                  std::optional<std::string> resume = std::nullopt,
                                  std::string* output = nullptr) {
  RunOptions run;
  run.out = std::tmpfile();
  run.run_id = run_id;
  run.resume = std::move(resume);
  absl::StatusOr<TrainResult> r = TrainOnGroup(cfg, run, nullptr);
  if (output != nullptr) *output = ReadAll(run.out);
  std::fclose(run.out);
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(RunIdentityRunTest, AnotherRunsCheckpointIsIgnoredAndLeftInPlace) {
  const std::string dir = TestDir();
  auto clean = Train(Config(dir + "/clean"), "job-2");
  ASSERT_TRUE(clean.ok()) << clean.status();
  // An older run with another seed fills the folder.
  TrainerConfig stale = Config(dir + "/run", {"train.seed=7"});
  ASSERT_TRUE(Train(stale, "job-1").ok());
  const std::vector<std::string> stale_files = ListCheckpoints(dir + "/run/checkpoints");
  ASSERT_EQ(stale_files.size(), 2u);
  const std::string stale_bytes = ReadFile(stale_files[0]);
  const std::string stale_metrics = ReadFile(dir + "/run/metrics.csv");

  // The new job (another run id and seed) in the same folder.
  std::string out;
  auto fresh = Train(Config(dir + "/run"), "job-2", std::nullopt, &out);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(out, HasSubstr("not resuming from checkpoints of another run"));
  EXPECT_THAT(out, HasSubstr(stale_files[0] + " (run 'job-1'"));
  EXPECT_THAT(out, HasSubstr("starting fresh"));
  EXPECT_THAT(out, Not(HasSubstr("resumed")));
  EXPECT_EQ(fresh->params_sha256, clean->params_sha256);
  EXPECT_EQ(fresh->test_acc, clean->test_acc);
  // The old run's files: all there, unchanged; its metrics kept aside.
  EXPECT_EQ(ReadFile(stale_files[0]), stale_bytes);
  EXPECT_TRUE(fs::exists(stale_files[1]));
  EXPECT_EQ(ListCheckpoints(dir + "/run/checkpoints").size(), 4u);
  EXPECT_THAT(out, HasSubstr("kept the folder's earlier metrics.csv as metrics.1.csv"));
  EXPECT_EQ(ReadFile(dir + "/run/metrics.1.csv"), stale_metrics);
}

TEST(RunIdentityRunTest, ForcedPathOfAnotherRunWarnsAndResumes) {
  const std::string dir = TestDir();
  ASSERT_TRUE(Train(Config(dir + "/other", {"train.seed=7", "train.epochs=1"}), "job-1").ok());
  std::string out;
  const std::string path = dir + "/other/checkpoints/last.ckpt";
  auto forced = Train(Config(dir + "/run"), "job-2", path, &out);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_THAT(out, HasSubstr("warning: rank 0: --resume " + path +
                             " is not a checkpoint of this run (run 'job-1' vs 'job-2'; config"));
  EXPECT_THAT(out, HasSubstr("resumed at epoch 2, iteration 0 from the named file of rank 0"));
  EXPECT_EQ(forced->epoch, 2);
}

// Two ranks resuming from their folders `dir0` and `dir1`, each with its
// own output; run id "job".
void ResumeOnTwoRanks(const std::string& dir0, const std::string& dir1,
                      absl::StatusOr<TrainResult> (&results)[2], std::string (&outs)[2]) {
  RunTwoRanks([&](int rank, worker::ProcessGroup& group) {
    // 2 x 16: the same global batch as 1 x 32.
    TrainerConfig mine = Config(rank == 0 ? dir0 : dir1);
    mine.data.batch_size = 16;
    RunOptions run;
    run.out = std::tmpfile();
    run.run_id = "job";
    results[rank] = TrainOnGroup(mine, run, &group);
    outs[rank] = ReadAll(run.out);
    std::fclose(run.out);
  });
}

// Only this run's checkpoints take part when the ranks pick the holder: a
// newer checkpoint of another run on rank 1 loses to rank 0's own.
TEST(RunIdentityRunTest, RanksAgreeOnTheNewestCheckpointOfThisRun) {
  const std::string dir = TestDir();
  ASSERT_TRUE(Train(Config(dir + "/r0", {"train.epochs=1", "scheduler.epochs=2"}), "job").ok());
  fs::copy(dir + "/r0", dir + "/clean0", fs::copy_options::recursive);
  ASSERT_TRUE(Train(Config(dir + "/r1", {"train.seed=7"}), "old-job").ok());
  absl::StatusOr<TrainResult> results[2];
  std::string outs[2];
  ResumeOnTwoRanks(dir + "/r0", dir + "/r1", results, outs);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  EXPECT_THAT(outs[0],
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 0"));
  EXPECT_EQ(results[0]->params_sha256, results[1]->params_sha256);
  // The same resume with no stale file anywhere ends with the same weights.
  absl::StatusOr<TrainResult> clean[2];
  ResumeOnTwoRanks(dir + "/clean0", dir + "/clean1", clean, outs);
  ASSERT_TRUE(clean[0].ok()) << clean[0].status();
  EXPECT_THAT(outs[0],
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 0"));
  EXPECT_EQ(results[0]->params_sha256, clean[0]->params_sha256);
}

// ------------------------------------------------------------ the binary

std::string Field(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + "=", out.find("final: "));
  return at == std::string::npos ? "?" : out.substr(at, out.find_first_of(" \n", at) - at);
}

std::string WriteConfig(const std::string& dir) {
  fs::create_directories(dir);
  std::ofstream(dir + "/cfg.yaml")
      << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_mlp.yaml\n"
      << "data: {synthetic: true, synthetic_train_size: 256, synthetic_test_size: 128,\n"
      << "       batch_size: 32}\n"
      << "train: {epochs: 2, log_period: 0}\n";
  return dir + "/cfg.yaml";
}

// Two separate invocations by hand with the same train.run_name: the second
// continues the first.
TEST(RunIdentityBinaryTest, RunNameResumesAcrossInvocations) {
  const std::string dir = TestDir();
  const std::string bin = std::string(ELASTRUN_TRAIN_BINARY) + " --config " + WriteConfig(dir);
  int status = 0;
  const std::string clean = RunCommand(bin + " train.output_dir=" + dir + "/clean", &status);
  ASSERT_EQ(status, 0) << clean;
  const std::string named = bin + " train.run_name=exp1 train.output_dir=" + dir + "/run";
  // Stops after epoch 1; the schedule still spans 2.
  const std::string first = RunCommand(named + " train.epochs=1 scheduler.epochs=2", &status);
  ASSERT_EQ(status, 0) << first;
  EXPECT_THAT(first, HasSubstr("starting fresh"));
  const std::string second = RunCommand(named, &status);
  ASSERT_EQ(status, 0) << second;
  EXPECT_THAT(second,
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 0"));
  EXPECT_EQ(Field(second, "params_sha256"), Field(clean, "params_sha256")) << second;
  // Another name does not take it.
  const std::string other = RunCommand(
      bin + " train.run_name=exp2 train.epochs=1 train.output_dir=" + dir + "/run", &status);
  ASSERT_EQ(status, 0) << other;
  EXPECT_THAT(other, HasSubstr("(run 'exp1'"));
  EXPECT_THAT(other, HasSubstr("starting fresh"));
}

// The node-loss case: a re-formed job starts its workers with
// TORCHELASTIC_RESTART_COUNT=0, yet they must continue the run. Two
// `elastrun run --run-id` invocations (restart count 0 both times) stand in
// for the two rounds.
TEST(RunIdentityBinaryTest, OwnCheckpointResumesWithRestartCountZero) {
  const std::string elastrun = ELASTRUN_LAUNCHER_BINARY;
  if (!fs::exists(elastrun)) GTEST_SKIP() << elastrun << " is not built";
  const std::string dir = TestDir();
  const std::string cfg = WriteConfig(dir);
  auto run = [&](const std::string& run_id, const std::string& args, int* status) {
    return RunCommand(elastrun + " run --nproc-per-node 2 --run-id " + run_id + " " +
                          ELASTRUN_TRAIN_BINARY + " --config " + cfg + " " + args,
                      status);
  };
  int status = 0;
  const std::string clean = run("clean", "train.output_dir=" + dir + "/clean", &status);
  ASSERT_EQ(status, 0) << clean;
  const std::string first =
      run("job", "train.epochs=1 scheduler.epochs=2 train.output_dir=" + dir + "/run", &status);
  ASSERT_EQ(status, 0) << first;
  const std::string second = run("job", "train.output_dir=" + dir + "/run", &status);
  ASSERT_EQ(status, 0) << second;
  EXPECT_THAT(second,
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 0"));
  EXPECT_EQ(Field(second, "params_sha256"), Field(clean, "params_sha256")) << second;
  // metrics.csv: every epoch once, in one file.
  const std::string metrics = ReadFile(dir + "/run/metrics.csv");
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 3) << metrics;
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.1.csv"));
}

}  // namespace
}  // namespace elastrun::trainer
