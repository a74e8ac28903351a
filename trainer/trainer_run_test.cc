// The trainer end to end: training runs on 1 and 2 ranks, checkpoints and
// resume (bitwise), the elastrun-train binary, and an elastic run with a
// killed rank under `elastrun run`.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
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
#include "trainer/state_image.h"
#include "trainer/temp_files.h"
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
using ::elastrun::trainer::testing::ReadAll;
using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::RunTwoRanks;
using ::elastrun::trainer::testing::TestDir;

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

// A node whose writer was killed while it wrote a checkpoint (a SIGKILL
// mid-persist) left a partial temporary beside its checkpoints: the next
// start removes it; a live writer's stays.
TEST(CheckpointTest, ADeadWritersPartialCheckpointIsRemovedAtTheNextStart) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir + "/a", "mlp");
  cfg.train.epochs = 1;
  const std::string ckpts = CheckpointDir(cfg.train.output_dir);
  fs::create_directories(ckpts);
  // The writer's temporary, named as TemporaryName names it, with the
  // writer's own pid (filled in by the child).
  const std::string prefix =
      ckpts + "/ckpt_0000000000000000007_ab.ckpt.tmp." + HostToken() + "-";
  const std::string suffix = "-00000000deadbeef";
  const pid_t writer = fork();
  if (writer == 0) {
    // Plain system calls and the stack only: this process has threads, the
    // child may not take a lock one of them held (malloc's included).
    char name[4096];
    if (prefix.size() + suffix.size() + 24 > sizeof name) ::_exit(1);
    std::memcpy(name, prefix.data(), prefix.size());
    char digits[24];
    int n = 0;
    for (pid_t pid = ::getpid(); pid > 0; pid /= 10) digits[n++] = static_cast<char>('0' + pid % 10);
    size_t at = prefix.size();
    while (n > 0) name[at++] = digits[--n];
    std::memcpy(name + at, suffix.c_str(), suffix.size() + 1);
    const int fd = ::open(name, O_WRONLY | O_CREAT | O_EXCL, 0644);
    const char half[] = "ELASTRUN-CKPT 2 7 1000000 ";
    if (fd >= 0 && ::write(fd, half, sizeof half - 1) > 0) ::raise(SIGKILL);
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(writer, &status, 0), writer);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer was not killed mid-write";
  const std::string partial = prefix + std::to_string(writer) + suffix;
  ASSERT_TRUE(fs::exists(partial));
  const std::string live = TemporaryName(ckpts + "/last.ckpt", "link");
  std::ofstream(live) << "a writer of this process, still at work";
  ASSERT_TRUE(TrainQuietly(cfg, std::nullopt).ok());
  EXPECT_FALSE(fs::exists(partial)) << partial << " was left behind";
  EXPECT_TRUE(fs::exists(live));
}

// best.ckpt follows the best epoch even when no periodic checkpoint is due
// then (here none is).
TEST(CheckpointTest, BestCheckpointIsWrittenWhenAnEpochIsBestWhateverIsDue) {
  const std::string dir = TestDir();
  TrainerConfig cfg = SyntheticConfig(dir + "/a", "mlp");
  cfg.train.epochs = 3;
  cfg.train.checkpoint_period = 0;  // No periodic checkpoint at all.
  ASSERT_TRUE(TrainQuietly(cfg, std::nullopt).ok());
  // The best epoch: the first with the highest test accuracy.
  std::ifstream metrics(cfg.train.output_dir + "/metrics.csv");
  std::string line;
  std::getline(metrics, line);  // header
  int64_t best_epoch = 0;
  double best_acc = -1;
  while (std::getline(metrics, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    ASSERT_GE(f.size(), 4u) << line;
    if (std::stod(f[3]) > best_acc) {
      best_acc = std::stod(f[3]);
      best_epoch = std::stoll(f[0]);
    }
  }
  absl::StatusOr<CheckpointBlob> best =
      ReadCheckpointFile(CheckpointDir(cfg.train.output_dir) + "/best.ckpt");
  ASSERT_TRUE(best.ok()) << best.status();
  StateExtras extras;
  ASSERT_TRUE(ReadImageExtras(best->payload, &extras).ok());
  EXPECT_EQ(extras.position.epoch, best_epoch) << "best.ckpt is not the best epoch's state";
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
  EXPECT_THAT(out,
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 0"));
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
  // Newest: end of epoch 1 (state 17: 16 steps, then the epoch's end),
  // then iteration 15 of epoch 1 (state 15, after its step).
  std::vector<std::string> all = ListCheckpoints(ckpts);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_THAT(all[0], HasSubstr("ckpt_0000000000000000017_"));
  EXPECT_THAT(all[1], HasSubstr("ckpt_0000000000000000015_"));
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
  EXPECT_THAT(out,
              HasSubstr("resumed at epoch 1, iteration 15 from the checkpoint on disk of rank 0"));
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
  EXPECT_THAT(outs[0],
              HasSubstr("resumed at epoch 2, iteration 0 from the checkpoint on disk of rank 1"));
  EXPECT_EQ(results[0]->params_sha256, results[1]->params_sha256);
}

// ------------------------------------------------------------ the binary

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
// the run resumes from the newest state (the snapshot in memory of the step
// it died at) and ends with exactly the weights of an uninterrupted run,
// and no sample of the epoch goes into those weights twice (or not at all).
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
                     << "train: {epochs: 2, checkpoint_iters: 3, snapshot_iters: 1,\n"
                     << "        log_period: 0}\n";
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
  // Global iteration 12 = iteration 4 of epoch 2: the snapshot of the step
  // before it (every step; accumulate 1) is newer than the checkpoint at 3.
  const std::string killed =
      RunCommand("ELASTRUN_TRAIN_SAMPLE_LOG=" + dir + "/b_samples " +
                     "ELASTRUN_TRAIN_FAIL_AT=1:12 " + run + "--max-restarts 1 " +
                     ELASTRUN_TRAIN_BINARY + " --config " + cfg + " train.output_dir=" + dir +
                     "/b",
                 &status);
  ASSERT_EQ(status, 0) << killed;
  EXPECT_THAT(killed, HasSubstr("injected SIGKILL at iteration 12"));
  EXPECT_THAT(killed,
              HasSubstr("resumed at epoch 2, iteration 4 from the snapshot in memory of rank 0"));
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
  // trained before the state that attempt 1 resumed from, then what
  // attempt 1 trained; attempt 1 trains nothing of epoch 1 and starts epoch
  // 2 where it died (iteration 4), not at its beginning.
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
    EXPECT_EQ(resumed_at, 4) << "rank " << r;
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
