// Where training state lives, end to end under `elastrun run` (real worker
// processes, real SIGKILLs, the launcher's snapshot folder): a rank killed
// at any step resumes from the newest state of the run, and the run ends
// with bitwise the weights of an uninterrupted one, gradient accumulation
// included.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

// 992 samples, 2 ranks x 16 per batch: 31 iterations per epoch, so the
// 100 warm-up iterations end in epoch 4; after them 2 batches accumulate
// per optimizer step (nbs 64 / global batch 32), and with an odd number of
// batches per epoch, every other epoch ends between two steps.
constexpr int64_t kIterationsPerEpoch = 31;

class StateRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ELASTRUN_LAUNCHER_BINARY)) {
      GTEST_SKIP() << ELASTRUN_LAUNCHER_BINARY << " is not built";
    }
    dir_ = TestDir();
    cfg_ = dir_ + "/cfg.yaml";
    std::ofstream(cfg_) << "_base_: " << ELASTRUN_CONFIGS_DIR << "/fashion_mnist_mlp.yaml\n"
                        << "data: {synthetic: true, synthetic_train_size: 992,\n"
                        << "       synthetic_test_size: 128, batch_size: 16}\n"
                        << "train: {epochs: 6, log_period: 0}\n";
  }

  // Two workers under `elastrun run [launcher_flags]`, into `out`;
  // `fail_at` "RANK:ITERATION" kills that rank there once. Returns
  // everything printed; fails the test unless the run succeeded.
  std::string Run(const std::string& out, const std::string& fail_at,
                  const std::string& overrides, const std::string& launcher_flags = "") {
    int status = 0;
    const std::string output = RunCommand(
        (fail_at.empty() ? "" : "ELASTRUN_TRAIN_FAIL_AT=" + fail_at + " ") +
            ELASTRUN_LAUNCHER_BINARY + " run --nproc-per-node 2 --max-restarts 1 " +
            launcher_flags + " " +
            ELASTRUN_TRAIN_BINARY + " --config " + cfg_ + " train.output_dir=" + dir_ + "/" +
            out + " " + overrides,
        &status);
    EXPECT_EQ(status, 0) << output;
    return output;
  }

  static std::string Params(const std::string& output) {
    std::smatch m;
    const std::regex re("final: .*(params_sha256=[0-9a-f]+)");
    return std::regex_search(output, m, re) ? m[1].str() : "no final line";
  }

  // The global iteration the run resumed at, from the trainer's line.
  static int64_t ResumedAt(const std::string& output, std::string* tier) {
    std::smatch m;
    const std::regex re("resumed at epoch (\\d+), iteration (\\d+) from the ([a-z ]+) of rank");
    if (!std::regex_search(output, m, re)) return -1;
    *tier = m[3].str();
    return (std::stoll(m[1].str()) - 1) * kIterationsPerEpoch + std::stoll(m[2].str());
  }

  std::string dir_;
  std::string cfg_;
};

// The case: accumulation, checkpoints on disk due where the ranks'
// accumulated gradients differ (taken at the next optimizer step now), a
// rank killed later. No snapshot memory: the state comes from disk.
TEST_F(StateRunTest, AccumulationResumesFromDiskBitwiseEqual) {
  const std::string flags = "train.checkpoint_iters=5";
  const std::string plain = Run("plain", "", flags, "--no-snapshots");
  const std::string killed = Run("killed", "1:140", flags, "--no-snapshots");
  EXPECT_THAT(killed, HasSubstr("injected SIGKILL at iteration 140"));
  std::string tier;
  const int64_t at = ResumedAt(killed, &tier);
  EXPECT_EQ(tier, "checkpoint on disk") << killed;
  // Checkpoints are written in the background: the newest one on disk at
  // the kill (every 5 iterations; under load a few back), never a fresh
  // start, never past the kill.
  EXPECT_GT(at, 0) << killed;
  EXPECT_LE(at, 140) << killed;
  EXPECT_EQ(Params(killed), Params(plain)) << plain << "\n---\n" << killed;
}

// A snapshot every optimizer step: a rank killed at step k resumes at k or
// k - 1 (the step before, inside an accumulation), from memory.
TEST_F(StateRunTest, SnapshotEveryStepResumesAtTheStep) {
  const std::string flags = "train.snapshot_iters=1";
  const std::string plain = Run("plain", "", flags);
  for (const int64_t k : {47, 140}) {
    const std::string killed = Run("killed" + std::to_string(k), "1:" + std::to_string(k), flags);
    std::string tier;
    const int64_t at = ResumedAt(killed, &tier);
    EXPECT_EQ(tier, "snapshot in memory") << killed;
    EXPECT_GE(at, k - 1) << killed;
    EXPECT_LE(at, k) << killed;
    EXPECT_EQ(Params(killed), Params(plain)) << plain << "\n---\n" << killed;
  }
}

// An epoch that ends between two optimizer steps: its end's checkpoint
// holds no gradients; a run resumed from it recomputes the epoch's last
// batch and ends bitwise equal.
TEST_F(StateRunTest, EpochEndInsideAnAccumulationIsRecomputed) {
  const std::string flags = "train.snapshot_iters=-1";
  const std::string plain = Run("plain", "", flags);
  // The first batch of epochs 5 and 6: one of those epochs' predecessors
  // ends between two steps.
  bool recomputed = false;
  for (const int64_t k : {4 * kIterationsPerEpoch, 5 * kIterationsPerEpoch}) {
    const std::string killed = Run("killed" + std::to_string(k), "1:" + std::to_string(k), flags);
    std::string tier;
    // The end of the epoch before, from memory (an epoch's end is captured
    // there whatever train.snapshot_iters says).
    EXPECT_EQ(ResumedAt(killed, &tier), k) << killed;
    EXPECT_EQ(tier, "snapshot in memory") << killed;
    recomputed |= killed.find("recomputed the gradients of epoch") != std::string::npos;
    EXPECT_EQ(Params(killed), Params(plain)) << plain << "\n---\n" << killed;
  }
  EXPECT_TRUE(recomputed) << "no epoch ended inside an accumulation: the test lost its case";
}

}  // namespace
}  // namespace elastrun::trainer
