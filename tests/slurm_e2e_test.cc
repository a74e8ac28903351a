// deploy/slurm/'s sbatch scripts on a real Slurm: munged, slurmctld and two
// slurmds (one per network namespace) started by the test (SlurmCluster).
// The cluster script (elastrun-cluster.sbatch) runs shell-worker jobs and
// elastrun-train on both nodes, stops everything on scancel, and survives a
// `scontrol requeue`: the trainer resumes from its checkpoint. The
// torchrun-form script (elastrun-torchrun.sbatch) starts the same
// `elastrun run` on every node; where `elastrun run` has the multi-node
// form it runs a 2-node job and a requeued trainer that resumes. Skipped,
// saying what failed, where Slurm cannot start (not installed, no network
// namespaces, daemons that do not come up).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/slurm_cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::BinDir;
using testing::SlurmCluster;
using testing::SourceDir;

constexpr absl::Duration kDeadline = absl::Seconds(180);
constexpr int kNodes = 2;

// The processes whose environment holds `marker` and whose program is
// `comm` (any, when empty).
std::vector<pid_t> Processes(const std::string& marker, const std::string& comm = "") {
  std::vector<pid_t> out;
  for (pid_t pid : testing::ProcessesWithEnv(marker)) {
    std::string name = testing::ReadFile(absl::StrCat("/proc/", pid, "/comm"));
    if (comm.empty() || absl::StripTrailingAsciiWhitespace(name) == comm) out.push_back(pid);
  }
  return out;
}

class SlurmE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("slurm_e2e");
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=slurm-", getpid(), "-", dir_);
    auto cluster = SlurmCluster::Start(dir_ + "/slurm", kNodes, {});
    if (!cluster.ok()) {
      GTEST_SKIP() << "Slurm cannot start here, the Slurm tests are skipped: "
                   << cluster.status().message();
    }
    cluster_ = *std::move(cluster);
    cluster_->set_job_marker(marker_);
    std::filesystem::create_directories(dir_ + "/tmp");
  }
  void TearDown() override {
    cluster_.reset();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // sbatch -N NODES deploy/slurm/SCRIPT ARGS...; the job's id ("" on
  // failure). The job's output goes to Output(job); its environment is the
  // test's plus `env`, the binaries' folder, a TMPDIR of its own and the
  // marker of everything it starts.
  std::string Sbatch(int nodes, const std::string& script, const std::vector<std::string>& args,
                     std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {"sbatch", "--parsable", "-N", absl::StrCat(nodes), "-o",
                                     dir_ + "/slurm-%j.out", "-D", dir_,
                                     SourceDir() + "/deploy/slurm/" + script};
    argv.insert(argv.end(), args.begin(), args.end());
    env.insert(env.end(), {marker_, "ELASTRUN_BIN_DIR=" + BinDir(), "TMPDIR=" + dir_ + "/tmp",
                           "PATH=" + BinDir() + ":" + std::getenv("PATH")});
    testing::RunResult r = cluster_->Command(argv, env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? std::string(absl::StripAsciiWhitespace(r.output)) : "";
  }
  std::string Output(const std::string& job) const {
    return testing::ReadFile(absl::StrCat(dir_, "/slurm-", job, ".out"));
  }
  // Waits for the end of `job`; its state.
  std::string Finished(const std::string& job) const {
    const std::string state = cluster_->WaitFinished(job, kDeadline);
    EXPECT_FALSE(state.empty()) << "job " << job << " did not finish in " << kDeadline
                                << "; state " << cluster_->JobState(job) << "\n"
                                << Output(job);
    return state;
  }
  // Nothing the job started still runs (Slurm reaps a job's processes only
  // after KillWait: the script must have stopped them itself by then).
  void ExpectNothingLeft() const {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    std::vector<pid_t> left = Processes(marker_);
    while (!left.empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      left = Processes(marker_);
    }
    std::string names;
    for (pid_t pid : left) {
      absl::StrAppend(&names, pid, " ", testing::ReadFile(absl::StrCat("/proc/", pid, "/comm")));
    }
    EXPECT_TRUE(left.empty()) << "left running: " << names;
  }
  // An elastrun-train config: the MLP on `train_size` synthetic samples,
  // `epochs` epochs, a checkpoint every 10 iterations into `output`.
  static void WriteTrainerConfig(const std::string& path, int train_size, int epochs,
                                 const std::string& output) {
    std::ofstream(path) << "_base_: " << SourceDir() << "/configs/fashion_mnist_mlp.yaml\n"
                        << "data: {synthetic: true, synthetic_train_size: " << train_size
                        << ",\n       synthetic_test_size: 256, batch_size: 16}\n"
                        << "train: {epochs: " << epochs << ", log_period: 0, "
                        << "checkpoint_iters: 10, output_dir: " << output << "}\n";
  }
  bool HasTrainer() const { return testing::FileExists(BinDir() + "/elastrun-train"); }

  // Runs elastrun-train, 2 workers on `nodes` nodes, through
  // deploy/slurm/SCRIPT (`script_args`, the trainer, its config, then
  // `train_args`). Once the run's first checkpoint is on disk it freezes the
  // workers (so the run cannot end first) and requeues the Slurm job, lets
  // the requeued job start at once, and waits for its end: COMPLETED, after
  // one restart, resumed at the checkpoint (not at the start). `out`: the
  // job's whole output, both runs.
  void RunRequeued(const std::string& script, int nodes, std::vector<std::string> script_args,
                   const std::vector<std::string>& train_args, std::string* out) {
    // Long enough (1000 epochs) that the first run is still in its first
    // epoch when it is stopped; the requeued run is told to end after that
    // epoch (train.epochs may change on resume: it is not part of the run).
    const std::string config = dir_ + "/mlp.yaml", output = dir_ + "/run";
    WriteTrainerConfig(config, 60000, 1000, output);
    std::filesystem::create_directories(output + "/checkpoints");
    script_args.insert(script_args.end(), {BinDir() + "/elastrun-train", "--config", config});
    script_args.insert(script_args.end(), train_args.begin(), train_args.end());
    const std::string job = Sbatch(
        nodes, script, script_args,
        {absl::StrCat("ELASTRUN_NPROC_PER_NODE=", 2 / nodes), "ELASTRUN_MAX_RESTARTS=0",
         "OMP_NUM_THREADS=1", absl::StrCat("GLOO_SOCKET_IFNAME=", SlurmCluster::kInterface)});
    ASSERT_FALSE(job.empty());
    ASSERT_TRUE(testing::WaitForFiles(output + "/checkpoints", "last.ckpt", 1, kDeadline).ok())
        << Output(job) << cluster_->DaemonLogs();
    std::vector<pid_t> workers = Processes(marker_, "elastrun-train");
    ASSERT_EQ(workers.size(), 2u);
    for (pid_t pid : workers) kill(pid, SIGSTOP);  // the requeue's SIGCONT, SIGTERM stop them
    WriteTrainerConfig(config, 60000, 1, output);

    testing::RunResult r = cluster_->Command({"scontrol", "requeue", job});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // A requeued job waits ~2 minutes (its BeginTime) before it may start
    // again; let it start sooner, as an administrator would. Not at once:
    // the nodes revoked the first run's credential, by the second, and
    // refuse a start in that same second ("Job credential revoked"): wait
    // 2 s past the first run's end (a later StartTime would wait for the
    // backfill scheduler's next pass).
    const absl::Time deadline = absl::Now() + kDeadline;
    std::optional<absl::Time> pending_since;
    bool released = false;
    for (std::string state = cluster_->JobState(job);
         cluster_->JobRestarts(job) < 1 || state.empty() || state == "PENDING" ||
         state == "REQUEUED" || state == "COMPLETING" || state == "CONFIGURING";
         state = cluster_->JobState(job)) {
      ASSERT_LT(absl::Now(), deadline) << "the requeued job did not run again: " << state
                                       << "\n" << Output(job);
      if (state == "PENDING" && !pending_since) pending_since = absl::Now();
      if (state == "PENDING" && !released && absl::Now() - *pending_since > absl::Seconds(2)) {
        released = cluster_->Command({"scontrol", "update", "JobId=" + job, "StartTime=now"})
                       .exit_code == 0;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
    EXPECT_EQ(Finished(job), "COMPLETED") << Output(job) << cluster_->DaemonLogs();
    EXPECT_EQ(cluster_->JobRestarts(job), 1);
    *out = Output(job);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        *out, m, std::regex(R"(\[rank0\]:resumed at epoch (\d+), iteration (\d+))")))
        << *out;
    // Epochs count from 1: "epoch 1, iteration 0" would be the very start.
    int epoch = 0, iteration = 0;
    ASSERT_TRUE(absl::SimpleAtoi(m[1].str(), &epoch) && absl::SimpleAtoi(m[2].str(), &iteration));
    EXPECT_TRUE(epoch > 1 || iteration > 0) << m[0];
    EXPECT_THAT(*out, ContainsRegex(R"(\[rank0\]:final:)"));
    ExpectNothingLeft();
  }

  // A line of a worker's output: its rank and the address of its node.
  static std::string ReportCommand() {
    return "echo \"rank $RANK of $WORLD_SIZE on $(hostname -I | tr -d ' ')\"";
  }

  std::string dir_, marker_;
  std::unique_ptr<SlurmCluster> cluster_;
};

// Script (b): the service and a daemon per node, two jobs (a job file and
// a command) on both nodes, then everything stopped.
TEST_F(SlurmE2eTest, ClusterScriptRunsJobsOnEveryNode) {
  const std::string job_file = dir_ + "/shell.yaml";
  std::ofstream(job_file) << "name: shell\nnnodes: \"2\"\nnproc_per_node: 1\n"
                          << "command: [bash, -c, 'echo \"from the job file on $(hostname -I "
                             "| tr -d \" \")\"']\n";
  const std::string first = Sbatch(kNodes, "elastrun-cluster.sbatch", {job_file},
                                   {"ELASTRUN_SLOTS=2"});
  const std::string second =
      Sbatch(kNodes, "elastrun-cluster.sbatch", {"--", "bash", "-c", ReportCommand()},
             {"ELASTRUN_SLOTS=2"});
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(second.empty());

  for (const std::string& job : {first, second}) {
    EXPECT_EQ(Finished(job), "COMPLETED") << Output(job) << cluster_->DaemonLogs();
    EXPECT_THAT(Output(job), HasSubstr(absl::StrCat(kNodes, " daemons registered")));
    EXPECT_THAT(Output(job), HasSubstr("SUCCEEDED"));
    EXPECT_THAT(Output(job), HasSubstr("stopped the service and the daemons"));
  }
  // Every node ran a worker: both addresses, one rank each.
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_THAT(Output(first), HasSubstr("from the job file on " + cluster_->NodeAddr(h)))
        << Output(first);
    EXPECT_THAT(Output(second), ContainsRegex(absl::StrCat(
                                    "rank [01] of 2 on ", cluster_->NodeAddr(h))))
        << Output(second);
  }
  ExpectNothingLeft();
}

// scancel stops the jobs, the daemons and the service: the script's trap,
// well before Slurm's KillWait would SIGKILL what is left.
TEST_F(SlurmE2eTest, ClusterScriptStopsEverythingOnScancel) {
  const std::string ready = dir_ + "/ready";
  std::filesystem::create_directories(ready);
  const std::string job = Sbatch(
      kNodes, "elastrun-cluster.sbatch",
      {"--", "bash", "-c", absl::StrCat("touch ", ready, "/rank$RANK; exec sleep 600")});
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(testing::WaitForFiles(ready, "rank", kNodes, kDeadline).ok())
      << Output(job) << cluster_->DaemonLogs();
  ASSERT_EQ(Processes(marker_, "elastrund").size(), static_cast<size_t>(kNodes));

  const absl::Time cancelled = absl::Now();
  testing::RunResult r = cluster_->Command({"scancel", job});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Finished(job), "CANCELLED");
  ExpectNothingLeft();
  // Slurm SIGKILLs what is left after its KillWait (30 s): stopped by the
  // script well before.
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(25));
  EXPECT_THAT(Output(job), HasSubstr("signalled"));
  EXPECT_THAT(Output(job), HasSubstr("stopped the service and the daemons"));
}

// The cluster script with elastrun-train on both nodes (DDP over Gloo
// across the namespaces) to success.
TEST_F(SlurmE2eTest, ClusterScriptRunsTrainerOnBothNodes) {
  if (!HasTrainer()) GTEST_SKIP() << "elastrun-train is not built (ELASTRUN_WITH_TORCH=ON)";
  const std::string train = BinDir() + "/elastrun-train";
  const std::string config = dir_ + "/mlp.yaml";
  WriteTrainerConfig(config, 2048, 2, dir_ + "/run");
  const std::string job =
      Sbatch(kNodes, "elastrun-cluster.sbatch", {"--", train, "--config", config},
             {absl::StrCat("GLOO_SOCKET_IFNAME=", SlurmCluster::kInterface), "OMP_NUM_THREADS=1"});
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(Finished(job), "COMPLETED") << Output(job) << cluster_->DaemonLogs();
  EXPECT_THAT(Output(job), HasSubstr("SUCCEEDED (round 0, world size 2, 0 restarts)"));
  EXPECT_THAT(Output(job), ContainsRegex(R"(\[rank0\]:final: epoch=2 )")) << Output(job);
  ExpectNothingLeft();
}

// A trainer job preempted by `scontrol requeue` runs again and resumes from
// the checkpoint its first run wrote, then succeeds.
TEST_F(SlurmE2eTest, RequeuedTrainerResumesFromCheckpoint) {
  if (!HasTrainer()) GTEST_SKIP() << "elastrun-train is not built (ELASTRUN_WITH_TORCH=ON)";
  // Each start of the script is a new service with new job ids: the run
  // keeps its name.
  std::string out;
  ASSERT_NO_FATAL_FAILURE(RunRequeued("elastrun-cluster.sbatch", 1, {"--"},
                                      {"train.run_name=slurm-requeue"}, &out));
  EXPECT_THAT(out, HasSubstr("signalled"));
  EXPECT_THAT(out, HasSubstr("SUCCEEDED"));
}

// Script (a) starts torchrun's form on every node: the same `elastrun run`
// command, the rendezvous at the first node's address, the Slurm job's id.
// (ELASTRUN is a stand-in that prints its node's address and arguments.)
TEST_F(SlurmE2eTest, TorchrunScriptRunsElastrunRunOnEveryNode) {
  const std::string fake = dir_ + "/fake-elastrun";
  std::ofstream(fake) << "#!/bin/sh\necho \"on $(hostname -I | tr -d ' '): $*\"\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  const std::string job =
      Sbatch(kNodes, "elastrun-torchrun.sbatch", {"train.py", "--lr", "0.1"},
             {"ELASTRUN=" + fake, "ELASTRUN_NPROC_PER_NODE=4"});
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(Finished(job), "COMPLETED") << Output(job) << cluster_->DaemonLogs();
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_THAT(Output(job),
                HasSubstr(absl::StrCat("on ", cluster_->NodeAddr(h), ": run --nnodes 2 ",
                                       "--nproc-per-node 4 --max-restarts 3 ",
                                       "--rdzv-backend c10d --rdzv-endpoint ",
                                       cluster_->NodeAddr(0), ":29400 --rdzv-id ", job,
                                       " train.py --lr 0.1\n")))
        << Output(job);
  }
}

// Why `elastrun run` cannot run torchrun's multi-node form ("" when it
// can): its --help's --nnodes line shows no MIN:MAX.
std::string NoMultiNodeForm() {
  auto help = testing::Run({BinDir() + "/elastrun", "run", "--help"});
  if (!help.ok()) return std::string(help.status().message());
  std::string nnodes_line;
  for (absl::string_view line : absl::StrSplit(help->output, '\n')) {
    // The flag's own line, not an example that uses it.
    if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "--nnodes ")) {
      nnodes_line = std::string(absl::StripAsciiWhitespace(line));
      break;
    }
  }
  if (absl::StrContains(nnodes_line, "MIN:MAX")) return "";
  return absl::StrCat("this elastrun run has no multi-node form (its --help: \"", nnodes_line,
                      "\"); the torchrun-form Slurm script is not run");
}

// Script (a): torchrun's form, the same `elastrun run` on both nodes.
TEST_F(SlurmE2eTest, TorchrunScriptRunsTwoNodeJob) {
  if (std::string why = NoMultiNodeForm(); !why.empty()) GTEST_SKIP() << why;
  const std::string job = Sbatch(kNodes, "elastrun-torchrun.sbatch",
                                 {"bash", "-c", ReportCommand()});
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(Finished(job), "COMPLETED") << Output(job) << cluster_->DaemonLogs();
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_THAT(Output(job), ContainsRegex(absl::StrCat("rank [01] of 2 on ",
                                                        cluster_->NodeAddr(h))))
        << Output(job);
  }
  ExpectNothingLeft();
}

// Script (a) requeued: the run keeps its id (the Slurm job's), so the
// trainer on both nodes resumes from its checkpoint with no run name given.
TEST_F(SlurmE2eTest, TorchrunScriptRequeuedTrainerResumes) {
  if (std::string why = NoMultiNodeForm(); !why.empty()) GTEST_SKIP() << why;
  if (!HasTrainer()) GTEST_SKIP() << "elastrun-train is not built (ELASTRUN_WITH_TORCH=ON)";
  std::string out;
  ASSERT_NO_FATAL_FAILURE(RunRequeued("elastrun-torchrun.sbatch", kNodes, {}, {}, &out));
}

}  // namespace
}  // namespace elastrun
