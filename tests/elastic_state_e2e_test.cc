// Elastic training state across world sizes, end to end: 2 nodes x 1 rank
// of elastrun-train; one node is SIGKILLed mid-epoch, the other goes on at
// world size 1 from the sample where the group stopped; the node comes back
// and both go on at world size 2 from where world size 1 stopped. Once with
// torchrun's multi-node form of `elastrun run` on loopback, once with the
// service and two daemons. Each node writes its outputs, checkpoints and
// sample logs to its own folder ("disk"); nothing is shared between nodes.
//
// What a user would check, from the trainer's sample logs (every batch's
// sample indices, trainer.h) and its resume lines:
//  - every sample of every epoch trained, and none twice apart from the
//    global batch in flight when the node was lost (2 x 32 samples); the
//    scale-up costs none (the survivor finishes its step before it stops);
//  - no resume loads a state older than the newest one the group reached;
//  - the final test accuracy within 0.5% of an uninterrupted run's.
// Events are waited on with deadlines: the survivor's sample log for
// progress, and a hold file (ELASTRUN_TRAIN_HOLD_FILE) that keeps the
// survivor before its next batch while the node rejoins, so the run cannot
// end before the scale-up. Skipped when elastrun-train is not built.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/training.h"
#include "trainer/checkpoint_file.h"

namespace elastrun::daemon_testing {
namespace {

namespace fs = std::filesystem;
using testing::ParseSampleLog;
using testing::SampleLine;
using ::testing::HasSubstr;

constexpr int kEpochs = 3;
// Fashion-MNIST's training split (Debian's dataset-fashion-mnist): a real
// task, so that the accuracy compared is not that of a trivial one.
constexpr int64_t kSamples = 60000;
constexpr int64_t kBatch = 32;  // Per rank.
// nbs 64: one step per batch on 2 ranks, every 2 batches on 1.
constexpr int64_t kNominalBatch = 64;
// The node is killed once the survivor trained this iteration of epoch 2
// (938 iterations per epoch on 2 ranks).
constexpr int64_t kKillAfterIteration = 24;
// The survivor trains this many batches at world size 1 before the node
// comes back.
constexpr size_t kBatchesAlone = 24;

// A resume line of the trainer: "resumed at epoch E, iteration I from the
// TIER of rank R ...: sample S of N, state L of branch B, taken on W rank(s)".
struct ResumeLine {
  int64_t epoch = 0;  // From 0.
  int64_t sample = 0, lineage = 0, branch = 0, world = 0;
  std::string tier;
};

std::vector<ResumeLine> ResumeLines(const std::string& log) {
  std::vector<ResumeLine> out;
  const std::regex re(
      "resumed at epoch (\\d+), iteration \\d+ from the ([a-z ]+) of rank \\d+[^:]*: sample "
      "(\\d+) of \\d+, state (\\d+) of branch (\\d+), taken on (\\d+) rank");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.push_back({std::stoll(m[1]) - 1, std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5]),
                   std::stoll(m[6]), m[2]});
  }
  return out;
}

// "test_acc=..." of the last "final:" line in `log`, or -1.
double FinalAccuracy(const std::string& log) {
  const size_t at = log.rfind("final: ");
  if (at == std::string::npos) return -1;
  const size_t acc = log.find("test_acc=", at);
  return acc == std::string::npos ? -1 : std::stod(log.substr(acc + 9));
}

// The position (epoch x samples + samples done) after a batch of the sample
// log trained at world size `world`.
int64_t EndOf(const SampleLine& s, int64_t world) {
  return s.epoch * kSamples + std::min(kSamples, (s.iteration + 1) * kBatch * world);
}
int64_t StartOf(const SampleLine& s, int64_t world) {
  return s.epoch * kSamples + s.iteration * kBatch * world;
}

// The scenario, whatever runs the nodes: subclasses start and kill them and
// say where their logs are.
class ElasticStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = testing::BinDir() + "/elastrun-train";
    if (!testing::FileExists(train_)) {
      GTEST_SKIP() << train_ << " is not built (configure with ELASTRUN_WITH_TORCH=ON); "
                   << "the elastic state end-to-end tests are skipped";
    }
    dir_ = testing::MakeTempDir("elastic_state");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=elastic-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                           "-", getpid(), "-", dir_);
    hold_ = dir_ + "/hold";
    for (int i = 0; i < 2; ++i) fs::create_directories(Disk(i) + "/samples");
    config_ = dir_ + "/mlp.yaml";
    WriteConfig("");
  }
  // The job's config; `train` holds more `train` keys ("key: value, ").
  void WriteConfig(const std::string& train) {
    std::ofstream(config_) << "_base_: " << testing::SourceDir()
                           << "/configs/fashion_mnist_mlp.yaml\n"
                           << "data: {batch_size: " << kBatch << "}\n"
                           << "model: {dropout: 0.0}\n"
                           << "optimizer: {nbs: " << kNominalBatch << "}\n"
                           << "train: {" << train << "epochs: " << kEpochs
                           << ", log_period: 0, snapshot_iters: 1}\n";
  }
  void TearDown() override {
    ::unlink(hold_.c_str());
    // Checkpoints take megabytes: keep the folder only to look into a
    // failure (or when ELASTRUN_TEST_KEEP is set).
    if (!HasFailure() && !dir_.empty() && std::getenv("ELASTRUN_TEST_KEEP") == nullptr) {
      fs::remove_all(dir_);
    }
  }

  // Node i's own folder: its outputs, checkpoints and sample logs.
  std::string Disk(int i) const { return absl::StrCat(dir_, "/disk", i); }

  // Where node i's trainer writes its outputs and checkpoints: its own
  // disk, or one folder all nodes share.
  std::string OutputDir(int i) const {
    return shared_output_ ? dir_ + "/shared/run" : Disk(i) + "/run";
  }

  // The trainer's command line and environment for node `i`.
  std::vector<std::string> TrainArgv(int i) const {
    return {train_, "--config", config_, "train.output_dir=" + OutputDir(i)};
  }
  std::vector<std::string> TrainEnv(int i) const {
    return {"ELASTRUN_TRAIN_SAMPLE_LOG=" + Disk(i) + "/samples",
            "ELASTRUN_TRAIN_HOLD_FILE=" + hold_, "OMP_NUM_THREADS=1"};
  }

  // Every complete line of node i's sample logs.
  std::vector<SampleLine> Samples(int i) const {
    std::vector<SampleLine> all;
    for (const std::string& f : testing::ListFiles(Disk(i) + "/samples")) {
      for (SampleLine& s : ParseSampleLog(testing::ReadFile(Disk(i) + "/samples/" + f))) {
        all.push_back(std::move(s));
      }
    }
    return all;
  }

  // Node 0's lines of rounds after `round` (its attempt field).
  size_t LinesAfter(int64_t round) const {
    size_t n = 0;
    for (const SampleLine& s : Samples(0)) n += s.attempt > round;
    return n;
  }

  // The same run with no fault on 2 ranks of one `elastrun run`: the test
  // accuracy to compare with.
  double UninterruptedAccuracy() {
    auto r = testing::Run({testing::BinDir() + "/elastrun", "run", "--nproc-per-node", "2",
                           train_, "--config", config_,
                           "train.output_dir=" + dir_ + "/uninterrupted"},
                          {marker_, "OMP_NUM_THREADS=1"}, absl::Minutes(5));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return -1;
    EXPECT_EQ(r->exit_code, 0) << r->output;
    return FinalAccuracy(r->output);
  }

  // What the scenario needs from the nodes.
  virtual void StartNode(int i) = 0;
  virtual void KillNode1() = 0;
  virtual void RestartNode1() = 0;
  // Everything node 0's rank printed so far, in order.
  virtual std::string Rank0Output() = 0;
  // Waits until both nodes are done; returns the last "final:" line's log.
  virtual std::string WaitDone() = 0;

  // The scenario and its checks.
  void RunScenario() {
    ASSERT_NO_FATAL_FAILURE(StartNode(0));
    ASSERT_NO_FATAL_FAILURE(StartNode(1));
    // Both nodes well into epoch 2 (index 1) at world size 2.
    ASSERT_TRUE(PollUntil([&] {
      for (const SampleLine& s : Samples(1)) {
        if (s.epoch >= 1 && s.iteration >= kKillAfterIteration) return true;
      }
      return false;
    })) << Rank0Output();
    std::vector<SampleLine> before = Samples(0);
    ASSERT_FALSE(before.empty());
    const int64_t round_at_kill = before.back().attempt;
    ASSERT_NO_FATAL_FAILURE(KillNode1());
    // The harness's own check: the kill landed inside epoch 2.
    before = Samples(0);
    ASSERT_EQ(before.back().epoch, 1) << "the kill came too late: not in epoch 2";
    const SampleLine last_at_two = before.back();

    // The survivor goes on alone.
    ASSERT_TRUE(PollUntil([&] { return LinesAfter(round_at_kill) >= kBatchesAlone; }))
        << "the survivor did not go on at world size 1\n" << Rank0Output();
    // Hold it before its next batch while the node comes back.
    std::ofstream(hold_) << "hold\n";
    const size_t resumes_alone = ResumeLines(Rank0Output()).size();
    ASSERT_NO_FATAL_FAILURE(RestartNode1());
    ASSERT_TRUE(PollUntil([&] { return ResumeLines(Rank0Output()).size() > resumes_alone; }))
        << "no re-form after the node came back\n" << Rank0Output();
    ::unlink(hold_.c_str());
    const std::string log = WaitDone();
    if (HasFatalFailure()) return;

    // Where each round started, from rank 0's resume lines.
    const std::vector<ResumeLine> resumes = ResumeLines(log);
    ASSERT_GE(resumes.size(), 2u) << log;
    // The survivor's lines at world size 1: those of the rounds after the
    // kill and before the first round of the node that came back.
    int64_t round_up = INT64_MAX;
    for (const SampleLine& s : Samples(1)) {
      if (s.attempt > round_at_kill) round_up = std::min(round_up, s.attempt);
    }
    ASSERT_NE(round_up, INT64_MAX) << "the node that came back trained nothing";
    std::vector<SampleLine> alone;
    for (const SampleLine& s : Samples(0)) {
      if (s.attempt > round_at_kill && s.attempt < round_up) alone.push_back(s);
    }
    ASSERT_GE(alone.size(), kBatchesAlone);
    const ResumeLine& down = resumes[resumes.size() - 2];  // Going on alone.
    const ResumeLine& up = resumes.back();                 // The scale-up.
    SCOPED_TRACE(log);
    // Alone: from the state of the last step the group of 2 took.
    EXPECT_EQ(down.world, 2);
    EXPECT_EQ(down.tier, "snapshot in memory");
    const int64_t down_at = down.epoch * kSamples + down.sample;
    EXPECT_GE(down_at, StartOf(last_at_two, 2)) << "resumed from a state older than the newest";
    EXPECT_LE(down_at, EndOf(last_at_two, 2));
    EXPECT_EQ(StartOf(alone.front(), 1), down_at) << "world 1 did not start where 2 stopped";
    // Back to 2: from the survivor's newest state at world size 1, never
    // from the rejoining node's state of before the kill (an older branch).
    EXPECT_EQ(up.world, 1);
    EXPECT_GT(up.branch, down.branch);
    const int64_t up_at = up.epoch * kSamples + up.sample;
    EXPECT_GE(up_at, EndOf(alone.back(), 1) - kNominalBatch)
        << "resumed from a state older than the newest";
    EXPECT_LE(up_at, EndOf(alone.back(), 1));
    EXPECT_GT(up.lineage, down.lineage);

    // Every sample of every epoch once, apart from the global batch in
    // flight when the node was killed: the scale-up stops the survivor
    // after the step it is in (stop_signal.h), so it redoes nothing.
    std::map<int64_t, std::multiset<int64_t>> trained;
    for (int i = 0; i < 2; ++i) {
      for (const SampleLine& s : Samples(i)) {
        trained[s.epoch].insert(s.samples.begin(), s.samples.end());
      }
    }
    ASSERT_EQ(trained.size(), static_cast<size_t>(kEpochs));
    int64_t twice = 0;
    for (const auto& [epoch, samples] : trained) {
      const std::set<int64_t> distinct(samples.begin(), samples.end());
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), kSamples)
          << "epoch " << epoch + 1 << ": samples skipped";
      twice += static_cast<int64_t>(samples.size() - distinct.size());
    }
    EXPECT_LE(twice, kBatch * 2) << "samples trained twice";
    RecordProperty("samples_trained_twice", static_cast<int>(twice));

    // As good as a run without faults.
    const double acc = FinalAccuracy(log);
    const double clean = UninterruptedAccuracy();
    ASSERT_GT(clean, 0);
    EXPECT_NEAR(acc, clean, 0.005) << "faulted " << acc << " vs uninterrupted " << clean;
  }

  std::string train_, dir_, marker_, config_, hold_;
  bool shared_output_ = false;
};

// torchrun's multi-node form: the same `elastrun run` command on two
// "nodes" on loopback; node 0 hosts the rendezvous (never the one killed:
// the run's rendezvous lives there, as with torchrun's c10d host).
class MultinodeFormTest : public ElasticStateTest {
 protected:
  void SetUp() override {
    ElasticStateTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const int port = testing::FreeLoopbackPort();
    ASSERT_GT(port, 0);
    endpoint_ = absl::StrCat("127.0.0.1:", port);
    token_file_ = testing::WriteOwnerOnlyFile(dir_ + "/token", absl::StrCat("t-", getpid()));
  }
  void TearDown() override {
    nodes_[0].reset();
    nodes_[1].reset();
    for (pid_t pid : testing::ProcessesWithEnv(marker_)) kill(pid, SIGKILL);
    ElasticStateTest::TearDown();
  }

  void StartNode(int i) override {
    std::vector<std::string> argv = {
        testing::BinDir() + "/elastrun", "run", "--nnodes", "1:2", "--nproc-per-node", "1",
        "--max-restarts", "5", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint_,
        "--rdzv-id", "elastic-state", "--rdzv-conf",
        absl::StrCat("is_host=", i == 0 ? 1 : 0, ",token_file=", token_file_),
        "--log-dir", absl::StrCat(Disk(i), "/logs"), "--shutdown-timeout", "5"};
    for (const std::string& a : TrainArgv(i)) argv.push_back(a);
    std::vector<std::string> env = TrainEnv(i);
    env.push_back(marker_);
    auto node = testing::Subprocess::Start(argv, env);
    ASSERT_TRUE(node.ok()) << node.status();
    nodes_[i] = *std::move(node);
  }
  void KillNode1() override {
    ASSERT_GT(testing::KillNode(*nodes_[1]), 0) << nodes_[1]->Output();
    ASSERT_TRUE(nodes_[1]->Wait(kDeadline).ok());
  }
  void RestartNode1() override { StartNode(1); }
  std::string Rank0Output() override { return nodes_[0]->Output(); }
  std::string WaitDone() override {
    for (int i : {0, 1}) {
      absl::StatusOr<int> st = nodes_[i]->Wait(absl::Minutes(5));
      EXPECT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(nodes_[i]->exit_code(), 0) << "node " << i << ":\n" << nodes_[i]->Output();
    }
    return nodes_[0]->Output();
  }

  std::string endpoint_, token_file_;
  std::unique_ptr<testing::Subprocess> nodes_[2];
};

// Both nodes write into one output folder, a checkpoint every 10
// iterations: node 1 is SIGKILLed while it may be writing one. Nothing of
// a writer is left behind (temporaries of the dead one are removed when
// the node starts again; the others are renamed or removed by their live
// writers), and the checkpoints left verify.
TEST_F(MultinodeFormTest, NodeLostAndBackTrainsEverySampleOnce) {
  shared_output_ = true;
  WriteConfig("checkpoint_iters: 10, ");
  RunScenario();
  const std::string checkpoints = OutputDir(0) + "/checkpoints";
  const std::vector<std::string> files = testing::ListFiles(checkpoints);
  EXPECT_THAT(files, ::testing::Contains("last.ckpt"));
  for (const std::string& dir : {OutputDir(0), checkpoints}) {
    for (const std::string& f : testing::ListFiles(dir)) {
      EXPECT_FALSE(absl::StrContains(f, ".tmp.") || absl::StrContains(f, ".link."))
          << dir << "/" << f << " was left behind";
    }
  }
  for (const std::string& f : files) {
    if (!absl::EndsWith(f, ".ckpt")) continue;
    absl::StatusOr<trainer::CheckpointBlob> blob =
        trainer::ReadCheckpointFile(checkpoints + "/" + f);
    EXPECT_TRUE(blob.ok()) << blob.status();
  }
}

// The service and two daemons; the job is submitted with `elastrun submit
// --nnodes 1:2`. Each daemon's working folder is its node's disk.
class ServiceFormTest : public ElasticStateTest {
 protected:
  void SetUp() override {
    ElasticStateTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
  }
  void TearDown() override {
    if (cluster_) cluster_->StopAll();
    ElasticStateTest::TearDown();
  }

  void StartNode(int i) override {
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon({"env", "-C", Disk(i)}));
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == i + 1; }))
        << cluster_->DaemonOutput();
    if (i == 1) Submit();
  }
  void Submit() {
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun", "submit",
                                     "--rendezvous", cluster_->address(), "--name", "elastic",
                                     "--nnodes", "1:2", "--nproc-per-node", "1",
                                     "--max-restarts", "5", "--working-dir", "",
                                     "--export", "NONE"};
    // Relative paths: each node's own disk (its daemon's working folder).
    for (const std::string& e :
         {std::string("ELASTRUN_TRAIN_SAMPLE_LOG=samples"),
          "ELASTRUN_TRAIN_HOLD_FILE=" + hold_, std::string("OMP_NUM_THREADS=1")}) {
      argv.insert(argv.end(), {"--env", e});
    }
    argv.insert(argv.end(), {"--", train_, "--config", config_, "train.output_dir=run"});
    auto r = testing::Run(argv, {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()},
                          kDeadline);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->exit_code, 0) << r->output;
    job_ = std::string(absl::StripAsciiWhitespace(r->output));
  }
  void KillNode1() override {
    testing::Subprocess& daemon = cluster_->daemon(1);
    ASSERT_GT(testing::KillNode(daemon), 0) << cluster_->DaemonOutput();
    ASSERT_TRUE(daemon.Wait(kDeadline).ok());
  }
  void RestartNode1() override {
    ASSERT_NO_FATAL_FAILURE(cluster_->RestartDaemon(1, {"env", "-C", Disk(1)}));
  }
  // Rank 0's output of every round, in order: rank 0 is on node 0 (its
  // group rank is kept), which keeps each round's log in its folder.
  std::string Rank0Output() override {
    const v1::JobStatus st = cluster_->Get(job_);
    std::string out;
    for (const v1::RoundRecord& round : st.history()) {
      for (const v1::NodeAssignment& n : round.assignment().nodes()) {
        if (n.group_rank() != 0) continue;
        const std::string at = absl::StrCat(dir_, "/", n.node_id(), "/", job_, "/attempt_",
                                            round.id(), "/0/");
        out += testing::ReadFile(at + "stdout.log") + testing::ReadFile(at + "stderr.log");
      }
    }
    return out;
  }
  std::string WaitDone() override {
    const v1::JobStatus st = cluster_->WaitFinished(job_);
    EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
        << st.DebugString() << cluster_->DaemonOutput();
    EXPECT_EQ(st.world_size(), 2) << "the last round ran without the node that came back";
    return Rank0Output();
  }

  std::unique_ptr<Cluster> cluster_;
  std::string job_;
};

TEST_F(ServiceFormTest, NodeLostAndBackTrainsEverySampleOnce) { RunScenario(); }

// A stop the launcher asks for (SIGTERM to every worker, as at a re-form or
// a restart) costs no training: each rank finishes the optimizer step in
// progress (2 micro-batches per step here), takes its snapshot and only
// then ends; the next attempt resumes exactly after the last batch trained,
// so no sample of the epoch is trained twice.
TEST(PlannedStopTest, SigtermFinishesTheStepInProgress) {
  const std::string train = testing::BinDir() + "/elastrun-train";
  if (!testing::FileExists(train)) GTEST_SKIP() << train << " is not built";
  const std::string dir = testing::MakeTempDir("planned_stop");
  const std::string marker = absl::StrCat("ELASTRUN_TEST_MARKER=planned-stop-", getpid());
  fs::create_directories(dir + "/samples");
  std::ofstream(dir + "/cfg.yaml") << "_base_: " << testing::SourceDir()
                                   << "/configs/fashion_mnist_mlp.yaml\n"
                                   << "data: {synthetic: true, synthetic_train_size: 61440,\n"
                                   << "       synthetic_test_size: 256, batch_size: 16}\n"
                                   << "train: {epochs: 1, log_period: 0}\n";
  auto run = testing::Subprocess::Start(
      {testing::BinDir() + "/elastrun", "run", "--nproc-per-node", "2", "--max-restarts", "1",
       train, "--config", dir + "/cfg.yaml", "train.output_dir=" + dir + "/run"},
      {marker, "ELASTRUN_TRAIN_SAMPLE_LOG=" + dir + "/samples", "OMP_NUM_THREADS=1"});
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(PollUntil([&] {
    return ParseSampleLog(testing::ReadFile(dir + "/samples/rank1.log")).size() >= 200;
  })) << (*run)->Output();
  // Both workers of attempt 0: the marked processes with a RANK.
  std::set<pid_t> marked;
  for (pid_t pid : testing::ProcessesWithEnv(marker)) marked.insert(pid);
  std::vector<pid_t> workers;
  for (const char* rank : {"RANK=0", "RANK=1"}) {
    for (pid_t pid : testing::ProcessesWithEnv(rank)) {
      if (marked.count(pid)) workers.push_back(pid);
    }
  }
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t pid : workers) kill(pid, SIGTERM);
  ASSERT_TRUE((*run)->Wait(absl::Minutes(3)).ok());
  const std::string out = (*run)->Output();
  ASSERT_EQ((*run)->exit_code(), 0) << out;
  EXPECT_THAT(out, HasSubstr("stopping as asked (SIGTERM) after step")) << out;
  EXPECT_THAT(out, HasSubstr("from the snapshot in memory")) << out;
  std::multiset<int64_t> trained;
  size_t batches = 0;
  for (const char* f : {"/samples/rank0.log", "/samples/rank1.log"}) {
    for (const SampleLine& s : ParseSampleLog(testing::ReadFile(dir + f))) {
      trained.insert(s.samples.begin(), s.samples.end());
      ++batches;
    }
  }
  const std::set<int64_t> distinct(trained.begin(), trained.end());
  EXPECT_EQ(distinct.size(), 61440u);
  EXPECT_EQ(trained.size(), distinct.size()) << "a sample trained twice after the stop";
  if (!HasFailure()) fs::remove_all(dir);
}

// Hang detection with elastrun-train's ranks: every rank reports its step,
// so a stopped rank is named with the step it reached; and ranks busy
// between steps (held here, as in a long evaluation or resume) send beats,
// so hang detection does not fire on them.
class TrainerHangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = testing::BinDir() + "/elastrun-train";
    if (!testing::FileExists(train_)) GTEST_SKIP() << train_ << " is not built";
    dir_ = testing::MakeTempDir("trainer_hang");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=trainer-hang-", getpid(), "-", dir_);
    fs::create_directories(dir_ + "/samples");
    std::ofstream(dir_ + "/cfg.yaml") << "_base_: " << testing::SourceDir()
                                      << "/configs/fashion_mnist_mlp.yaml\n"
                                      << "data: {synthetic: true, synthetic_train_size: 20480,\n"
                                      << "       synthetic_test_size: 256, batch_size: 16}\n"
                                      << "train: {epochs: 1, log_period: 0}\n";
  }
  void TearDown() override {
    run_.reset();
    for (pid_t pid : testing::ProcessesWithEnv(marker_)) kill(pid, SIGKILL);
    if (!HasFailure() && !dir_.empty()) fs::remove_all(dir_);
  }

  void Start(const std::string& hang_timeout) {
    auto run = testing::Subprocess::Start(
        {testing::BinDir() + "/elastrun", "run", "--nproc-per-node", "2", "--max-restarts", "1",
         "--hang-timeout", hang_timeout, train_, "--config", dir_ + "/cfg.yaml",
         "train.output_dir=" + dir_ + "/run"},
        {marker_, "ELASTRUN_TRAIN_SAMPLE_LOG=" + dir_ + "/samples",
         "ELASTRUN_TRAIN_HOLD_FILE=" + dir_ + "/hold", "OMP_NUM_THREADS=1"});
    ASSERT_TRUE(run.ok()) << run.status();
    run_ = *std::move(run);
    ASSERT_TRUE(PollUntil([&] {
      return ParseSampleLog(testing::ReadFile(dir_ + "/samples/rank1.log")).size() >= 50;
    })) << run_->Output();
  }
  // The worker of `rank` in the first attempt.
  pid_t Worker(int rank) {
    std::set<pid_t> marked;
    for (pid_t pid : testing::ProcessesWithEnv(marker_)) marked.insert(pid);
    for (pid_t pid : testing::ProcessesWithEnv(absl::StrCat("RANK=", rank))) {
      if (marked.count(pid)) return pid;
    }
    return -1;
  }

  std::string train_, dir_, marker_;
  std::unique_ptr<testing::Subprocess> run_;
};

TEST_F(TrainerHangTest, AStoppedRankIsNamedWithTheStepItReached) {
  ASSERT_NO_FATAL_FAILURE(Start("2s"));
  const pid_t rank1 = Worker(1);
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGSTOP);
  ASSERT_TRUE(run_->Wait(absl::Minutes(3)).ok());
  const std::string out = run_->Output();
  EXPECT_EQ(run_->exit_code(), 0) << out;
  // A rank that reported steps (not "before reporting a step").
  EXPECT_THAT(out, ::testing::ContainsRegex("rank 1 hung at step [1-9][0-9]*")) << out;
}

TEST_F(TrainerHangTest, RanksBusyBetweenStepsAreNotHung) {
  ASSERT_NO_FATAL_FAILURE(Start("1s"));
  std::ofstream(dir_ + "/hold") << "hold\n";
  // Three hang timeouts with no step on any rank: the subject of the test
  // is this stretch of time, nothing is waited for.
  absl::SleepFor(absl::Seconds(3));
  ::unlink((dir_ + "/hold").c_str());
  ASSERT_TRUE(run_->Wait(absl::Minutes(3)).ok());
  const std::string out = run_->Output();
  EXPECT_EQ(run_->exit_code(), 0) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("hung"))) << out;
  EXPECT_THAT(out, ::testing::Not(HasSubstr("restarting"))) << out;
}

}  // namespace
}  // namespace elastrun::daemon_testing
