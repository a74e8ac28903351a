// End-to-end training under faults (issue 10): the real elastrun-rendezvous,
// three real elastrund daemons on loopback and elastrun-train workers, jobs
// submitted with the `elastrun` CLI. Each daemon runs in a folder of its own
// (its "local disk"; workers inherit it as their working folder), and the
// job names relative paths, so every node writes its outputs, checkpoints
// and sample logs to its own disk: no folder is shared between nodes.
// Skipped when elastrun-train is not built (ELASTRUN_WITH_TORCH=OFF).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/training.h"

namespace elastrun::daemon_testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kNodes = 3;
constexpr int kEpochs = 3;
// 6144 samples in batches of 16 per rank: 128 iterations per epoch on 3
// ranks (192 on 2), a few milliseconds each, so an epoch lasts long enough
// for the kill to land inside it.
constexpr int kItersPerEpochOn3 = 128;
// Rank 0's node is killed once rank 0 trained this iteration of epoch 2.
constexpr int kKillAfterIteration = 32;

using testing::ParseSampleLog;
using testing::SampleLine;

// The number at the end of a Cluster node id ("node2" -> 2).
int NodeIndex(const std::string& node_id) {
  int i = -1;
  EXPECT_TRUE(absl::SimpleAtoi(absl::StripPrefix(node_id, "node"), &i)) << node_id;
  return i;
}

// The node that holds group rank 0 in `a` (-1: none).
int Rank0Node(const v1::Assignment& a) {
  for (const v1::NodeAssignment& n : a.nodes()) {
    if (n.group_rank() == 0) return NodeIndex(n.node_id());
  }
  return -1;
}

// "params_sha256=..." of the last "final:" line in `log`, or "".
std::string FinalParams(const std::string& log) {
  const size_t final_at = log.rfind("final: ");
  if (final_at == std::string::npos) return "";
  const size_t at = log.find("params_sha256=", final_at);
  if (at == std::string::npos) return "";
  return log.substr(at, log.find_first_of(" \n", at) - at);
}

class TrainingE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = testing::BinDir() + "/elastrun-train";
    if (!testing::FileExists(train_)) {
      GTEST_SKIP() << train_ << " is not built (configure with ELASTRUN_WITH_TORCH=ON); "
                   << "the training end-to-end tests are skipped";
    }
    dir_ = testing::MakeTempDir("training_e2e");
    marker_ =
        absl::StrCat("ELASTRUN_TEST_MARKER=training-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), "-",
                     getpid(), "-", dir_);
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    for (int i = 0; i < kNodes; ++i) {
      fs::create_directories(Disk(i) + "/samples");
      // The daemon's working folder is its workers' (the job sets none).
      ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon({"env", "-C", Disk(i)}));
    }
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == kNodes; }))
        << "daemons did not register" << cluster_->DaemonOutput();
    config_ = dir_ + "/mlp.yaml";
    std::ofstream(config_) << "_base_: " << testing::SourceDir()
                           << "/configs/fashion_mnist_mlp.yaml\n"
                           << "data: {synthetic: true, synthetic_train_size: 6144,\n"
                           << "       synthetic_test_size: 256, batch_size: 16}\n"
                           << "model: {dropout: 0.0}\n"
                           << "train: {epochs: " << kEpochs << ", log_period: 0}\n";
  }
  void TearDown() override {
    if (!cluster_) return;
    cluster_->StopAll();
    // Checkpoints take megabytes: keep the folder only to look into a failure.
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Node i's own folder: its daemon's and workers' working folder.
  std::string Disk(int i) const { return absl::StrCat(dir_, "/disk", i); }

  // `elastrun submit` of a --nnodes 2:3 job of elastrun-train writing to
  // the relative `output_dir` (so: on each node's own disk) and logging its
  // samples to samples/rank<RANK>.log there. Returns the job id.
  std::string Submit(const std::string& name, const std::string& output_dir) {
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun", "submit",
                                     "--rendezvous", cluster_->address()};
    argv.insert(argv.end(), {"--name", name, "--nnodes", "2:3", "--nproc-per-node", "1"});
    // Each node's own folder (its daemon's) and environment, not the test's.
    argv.insert(argv.end(), {"--working-dir", "", "--export", "NONE"});
    argv.insert(argv.end(), {"--max-restarts", "3", "--env", "OMP_NUM_THREADS=1"});
    argv.insert(argv.end(), {"--env", "ELASTRUN_TRAIN_SAMPLE_LOG=samples", "--", train_});
    argv.insert(argv.end(), {"--config", config_, "train.output_dir=" + output_dir});
    auto r = testing::Run(argv, {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()},
                          kDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->output;
    return std::string(absl::StripAsciiWhitespace(r->output));
  }

  // The output of `job`'s worker on `node` in round `round` (stdout, then
  // stderr), as that node's daemon kept it.
  std::string NodeLog(const std::string& job, int64_t round, int node) const {
    const std::string at =
        absl::StrCat(dir_, "/node", node, "/", job, "/attempt_", round, "/0/");
    return testing::ReadFile(at + "stdout.log") + testing::ReadFile(at + "stderr.log");
  }
  std::string Rank0Log(const std::string& job, const v1::RoundRecord& round) const {
    return NodeLog(job, round.id(), Rank0Node(round.assignment()));
  }

  // SIGKILLs daemon `i` and its workers' process groups, as a node that
  // loses power: nothing of it gets to stop cleanly or say goodbye.
  void KillNode(int i) {
    testing::Subprocess& daemon = cluster_->daemon(static_cast<size_t>(i));
    ASSERT_GT(testing::KillNode(daemon), 0) << "node" << i << "'s daemon has no workers";
    ASSERT_TRUE(daemon.Wait(kDeadline).ok());
  }

  std::string train_, dir_, marker_, config_;
  std::unique_ptr<Cluster> cluster_;
};

// Issue 10's first "must show": rank 0's node is lost mid-epoch 2 of a
// 3-node --nnodes 2:3 job; the two survivors re-form and continue from the
// newest checkpoint, without training any batch of epoch 1 again.
TEST_F(TrainingE2eTest, Rank0NodeLostMidEpoch2ContinuesFromNewestCheckpoint) {
  const std::string job = Submit("lose-rank0", "run");
  ASSERT_FALSE(job.empty());
  v1::JobStatus st;
  ASSERT_TRUE(PollUntil([&] {
    st = cluster_->Get(job);
    return st.history_size() > 0 && st.history(0).assignment().nodes_size() == kNodes;
  })) << st.DebugString();
  const int lost = Rank0Node(st.history(0).assignment());
  ASSERT_GE(lost, 0) << st.DebugString();

  // Wait until rank 0 is well into epoch 2 (epoch index 1).
  const std::string rank0_samples = Disk(lost) + "/samples/rank0.log";
  ASSERT_TRUE(PollUntil([&] {
    std::vector<SampleLine> lines = ParseSampleLog(testing::ReadFile(rank0_samples));
    return !lines.empty() && lines.back().epoch >= 1 &&
           lines.back().iteration >= kKillAfterIteration;
  })) << cluster_->Get(job).DebugString()
      << cluster_->DaemonOutput();
  ASSERT_NO_FATAL_FAILURE(KillNode(lost));

  // The harness's own check: the kill landed inside epoch 2.
  const std::vector<SampleLine> before = ParseSampleLog(testing::ReadFile(rank0_samples));
  ASSERT_FALSE(before.empty());
  ASSERT_EQ(before.back().epoch, 1) << "the kill came too late: not in epoch 2";
  ASSERT_LT(before.back().iteration, kItersPerEpochOn3 - 1)
      << "the kill came too late: at the end of epoch 2";
  // Where each survivor's sample logs stood at the kill: what follows was
  // trained after it.
  std::map<std::string, size_t> offsets;
  for (int i = 0; i < kNodes; ++i) {
    if (i == lost) continue;
    for (const std::string& f : testing::ListFiles(Disk(i) + "/samples")) {
      const std::string path = Disk(i) + "/samples/" + f;
      offsets[path] = testing::ReadFile(path).size();
    }
  }

  st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << cluster_->DaemonOutput();
  EXPECT_EQ(st.world_size(), 2);
  ASSERT_GE(st.round(), 1);
  // Whether the survivors' workers saw the broken collective before the
  // service saw the broken stream decides which.
  EXPECT_THAT(st.history(0).end_reason(), ::testing::AnyOf("node lost", "failure"));
  const v1::RoundRecord& last = st.history(st.history_size() - 1);
  ASSERT_EQ(last.assignment().nodes_size(), 2) << last.DebugString();
  for (const v1::NodeAssignment& n : last.assignment().nodes()) {
    EXPECT_NE(NodeIndex(n.node_id()), lost) << "the lost node ran the last round";
  }
  const int new_rank0 = Rank0Node(last.assignment());
  ASSERT_GE(new_rank0, 0);

  // The new rank 0 says it resumed (which tier and step: the wording is the
  // trainer's), and finished.
  const std::string log = Rank0Log(job, last);
  EXPECT_THAT(log, ContainsRegex("resumed")) << log;
  EXPECT_THAT(log, HasSubstr(absl::StrCat("final: epoch=", kEpochs))) << log;

  // The survivors' sample logs after the kill: training went on, through the
  // last epoch, and no batch of epoch 1 (finished before the kill) again.
  std::vector<SampleLine> after;
  for (int i = 0; i < kNodes; ++i) {
    if (i == lost) continue;
    for (const std::string& f : testing::ListFiles(Disk(i) + "/samples")) {
      const std::string path = Disk(i) + "/samples/" + f;
      const std::string text = testing::ReadFile(path);
      const size_t from = offsets.count(path) ? offsets[path] : 0;
      for (const SampleLine& s :
           ParseSampleLog(text.substr(std::min(from, text.size())))) {
        after.push_back(s);
      }
    }
  }
  ASSERT_FALSE(after.empty()) << "no sample trained after the kill";
  int64_t epoch1_batches = 0, last_epoch = -1;
  for (const SampleLine& s : after) {
    epoch1_batches += s.epoch == 0;
    last_epoch = std::max(last_epoch, s.epoch);
  }
  EXPECT_EQ(last_epoch, kEpochs - 1);
  EXPECT_EQ(epoch1_batches, 0)
      << "batches of epoch 1, finished before rank 0's node was lost, were trained again "
         "after it: the job started over instead of resuming\n"
      << log;

  // metrics.csv on the new rank 0's disk: every epoch once, in order.
  const std::string metrics = testing::ReadFile(Disk(new_rank0) + "/run/metrics.csv");
  std::vector<std::string> rows = absl::StrSplit(metrics, '\n', absl::SkipEmpty());
  ASSERT_FALSE(rows.empty()) << "no metrics.csv on node" << new_rank0;
  EXPECT_TRUE(absl::StartsWith(rows[0], "epoch,")) << metrics;
  std::vector<std::string> epochs;
  for (size_t r = 1; r < rows.size(); ++r)
    epochs.push_back(rows[r].substr(0, rows[r].find(',')));
  EXPECT_THAT(epochs, ::testing::ElementsAre("1", "2", "3")) << metrics;
}

// A file's bytes and modification time (ns).
struct FileState {
  std::string bytes;
  int64_t mtime_ns = 0;
  bool operator==(const FileState& o) const {
    return bytes == o.bytes && mtime_ns == o.mtime_ns;
  }
};

std::map<std::string, FileState> FilesUnder(const std::string& dir) {
  std::map<std::string, FileState> files;
  for (const std::string& f : testing::ListFiles(dir)) {
    const std::string path = dir + "/" + f;
    struct stat s {};
    if (::stat(path.c_str(), &s) != 0 || !S_ISREG(s.st_mode)) continue;
    files[f] = {testing::ReadFile(path),
                int64_t{s.st_mtim.tv_sec} * 1000000000 + s.st_mtim.tv_nsec};
  }
  return files;
}

// Issue 10: a node that still holds a checkpoint of another, longer run
// (other seed, more epochs) must not win the resume: the job trains from
// scratch, leaves that run's files alone and ends with a clean run's weights.
TEST_F(TrainingE2eTest, StaleCheckpointOfAnotherRunOnOneNodeIsIgnored) {
  // The same job on clean disks first: the weights to expect.
  const std::string clean_job = Submit("clean", "clean-run");
  ASSERT_FALSE(clean_job.empty());
  v1::JobStatus clean = cluster_->WaitFinished(clean_job);
  ASSERT_EQ(clean.state(), v1::JOB_STATE_SUCCEEDED)
      << clean.DebugString() << cluster_->DaemonOutput();
  const std::string clean_params = FinalParams(Rank0Log(clean_job, clean.history(0)));
  ASSERT_FALSE(clean_params.empty()) << Rank0Log(clean_job, clean.history(0));

  // Another run, by hand, into node 1's output folder: seed 7, 4 epochs (so
  // newer than anything the job will write).
  constexpr int kStaleNode = 1;
  const std::string stale_dir = Disk(kStaleNode) + "/run";
  auto stale = testing::Run(
      {train_, "--config", config_, "train.output_dir=" + stale_dir, "train.seed=7",
       "train.epochs=4", "train.run_name=older-run", "data.synthetic_train_size=1024"},
      {marker_, "OMP_NUM_THREADS=1"}, kDeadline);
  ASSERT_TRUE(stale.ok()) << stale.status();
  ASSERT_EQ(stale->exit_code, 0) << stale->output;
  const std::map<std::string, FileState> stale_files =
      FilesUnder(stale_dir + "/checkpoints");
  ASSERT_FALSE(stale_files.empty()) << stale->output;

  const std::string job = Submit("stale", "run");
  ASSERT_FALSE(job.empty());
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << cluster_->DaemonOutput();
  EXPECT_EQ(st.world_size(), kNodes);
  EXPECT_EQ(st.round(), 0) << "a job without faults needed another round";
  const std::string log = Rank0Log(job, st.history(0));
  EXPECT_THAT(log, Not(ContainsRegex("resumed"))) << log;
  EXPECT_EQ(FinalParams(log), clean_params) << log;

  // The other run's checkpoints: all there, same bytes, same mtime; the
  // node that holds them named them when it passed them over. (Only the
  // checkpoints: config.yaml and metrics.csv in an output folder are rank
  // 0's outputs of whichever run writes there; an earlier metrics.csv is
  // kept aside as metrics.N.csv when node 1 becomes rank 0.)
  const std::map<std::string, FileState> now = FilesUnder(stale_dir + "/checkpoints");
  for (const auto& [name, before] : stale_files) {
    auto it = now.find(name);
    ASSERT_NE(it, now.end()) << name << " of the other run is gone";
    EXPECT_TRUE(it->second == before) << name << " of the other run was changed";
  }
  const std::string stale_node_logs = NodeLog(job, 0, kStaleNode);
  bool named = false;
  for (const auto& [name, state] : stale_files) {
    named = named || absl::StrContains(stale_node_logs, name);
  }
  EXPECT_TRUE(named) << "node" << kStaleNode
                     << " did not name the other run's checkpoints:\n"
                     << stale_node_logs;
}

}  // namespace
}  // namespace elastrun::daemon_testing
