// `elastrun evolve` on a cluster, end to end: the real elastrun-rendezvous,
// two real elastrund of 2 slots, the real elastrun and elastrun-train (the
// classifier on tiny synthetic data) behind a wrapper named elastrun-train
// that records each training start and holds each generation's
// individuals at a gate until the test opens it, so that the kills below
// land mid-generation. Two generations of four individuals: one daemon is
// SIGKILLed while generation 0 runs (its individuals are re-placed and
// finish); `elastrun evolve` is SIGKILLed while generation 1 runs and
// resumed (it adopts the jobs, none is submitted or trained twice).
#include <signal.h>
#include <sys/stat.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "evolve/evolve_test_util.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::Cluster;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using testing::BinDir;

constexpr char kMeta[] =
    "optimizer.lr0: [true, 0.001, 0.1]\n"
    "optimizer.momentum: [true, 0.6, 0.98]\n";

class EvolveClusterE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string real = BinDir() + "/elastrun-train";
    if (!testing::FileExists(real)) {
      GTEST_SKIP() << real << " is not built (a torch build makes it): nothing to evolve";
    }
    dir_ = testing::MakeTempDir("evolve_cluster");
    setenv("ELASTRUN_SNAPSHOT_BASE", dir_.c_str(), 1);
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=evolve-cluster-", getpid(), "-", dir_);
    starts_ = dir_ + "/starts";
    meta_ = dir_ + "/meta.yaml";
    ASSERT_FALSE(testing::WriteFile(meta_, kMeta).empty());
    ASSERT_EQ(mkdir((dir_ + "/wrap").c_str(), 0755), 0);
    wrapper_ = dir_ + "/wrap/elastrun-train";
    // Records "DIR" per start, then waits for DIR_OF_TEST/gate_G (G: the
    // individual's generation) before training.
    ASSERT_FALSE(
        testing::WriteFile(wrapper_,
                           evolve::RecordingTrainWrapper(
                               real, starts_,
                               absl::StrCat("g=${d##*/ind_}; g=${g%%_*}\n"
                                            "while [ ! -e ",
                                            dir_, "/gate_$g ]; do sleep 0.05; done\n")),
                           0755)
            .empty());
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());  // node0, 2 slots
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());  // node1, 2 slots
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 2; }))
        << cluster_->DaemonOutput();
  }
  void TearDown() override {
    if (evolve_ && !evolve_->exit_code()) {
      evolve_->Signal(SIGKILL);
      (void)evolve_->Wait(kDeadline);
    }
    if (cluster_) cluster_->StopAll();
  }

  // `elastrun evolve` of the test's run in the background.
  void StartEvolve(std::vector<std::string> flags) {
    std::vector<std::string> argv = {BinDir() + "/elastrun",
                                     "evolve",
                                     "--population",
                                     "4",
                                     "--generations",
                                     "2",
                                     "--seed",
                                     "11",
                                     "--meta",
                                     meta_,
                                     "--fitness",
                                     "test_acc=1",
                                     "--max-restarts",
                                     "3",
                                     "--rendezvous",
                                     cluster_->address(),
                                     "--token-file",
                                     cluster_->token_file()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", wrapper_, "--config",
                             testing::SourceDir() + "/configs/fashion_mnist_mlp.yaml",
                             "data.synthetic=true", "+data.synthetic_train_size=256",
                             "+data.synthetic_test_size=64", "train.epochs=1"});
    auto p = testing::Subprocess::Start(argv, {marker_});
    ASSERT_TRUE(p.ok()) << p.status();
    evolve_ = *std::move(p);
  }

  std::vector<std::string> Starts() const {
    return absl::StrSplit(testing::ReadFile(starts_), '\n', absl::SkipEmpty());
  }
  int StartsOf(const std::string& prefix) const {
    int n = 0;
    for (const std::string& s : Starts()) n += absl::StrContains(s, "/" + prefix);
    return n;
  }
  void OpenGate(int g) {
    ASSERT_FALSE(testing::WriteFile(absl::StrCat(dir_, "/gate_", g), "").empty());
  }

  // Every job of the service: its name -> how many jobs carry it.
  std::map<std::string, int> JobsByName() {
    absl::StatusOr<testing::RunResult> r =
        testing::Run({BinDir() + "/elastrun", "list", "--output", "json", "--rendezvous",
                      cluster_->address(), "--token-file", cluster_->token_file()});
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->output : "");
    std::map<std::string, int> names;
    if (!r.ok()) return names;
    const nlohmann::json j = nlohmann::json::parse(r->output, nullptr, false);
    if (!j.contains("jobs")) return names;
    for (const nlohmann::json& job : j.at("jobs")) {
      ++names[job.at("spec").at("name").get<std::string>()];
    }
    return names;
  }

  std::string dir_, marker_, starts_, meta_, wrapper_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<testing::Subprocess> evolve_;
};

TEST_F(EvolveClusterE2eTest, DaemonAndEvolveKilledMidGenerationNothingTrainedTwice) {
  const std::string out = dir_ + "/out";
  ASSERT_NO_FATAL_FAILURE(StartEvolve({"--output-dir", out}));
  // Generation 0: all four individuals at once, two on each node.
  ASSERT_TRUE(PollUntil([&] { return StartsOf("ind_0_") == 4; }))
      << evolve_->Output() << cluster_->DaemonOutput();
  // A node dies mid-generation; its workers die with its daemon.
  cluster_->daemon(1).Signal(SIGKILL);
  ASSERT_TRUE(cluster_->daemon(1).Wait(kDeadline).ok());
  OpenGate(0);
  // Its two individuals are re-placed on node0 as its slots free up:
  // six starts of generation 0, then generation 1 starts (two at a time
  // on the one node left).
  ASSERT_TRUE(PollUntil([&] { return StartsOf("ind_1_") == 2; }))
      << evolve_->Output() << cluster_->DaemonOutput();
  EXPECT_EQ(StartsOf("ind_0_"), 6) << testing::ReadFile(starts_);
  // evolve dies mid-generation 1: two individuals hold at the gate, two
  // are queued on the service.
  evolve_->Signal(SIGKILL);
  ASSERT_TRUE(evolve_->Wait(kDeadline).ok());
  const std::string first_run = evolve_->Output();
  EXPECT_TRUE(absl::StrContains(first_run, "ind_0_3: done, fitness ")) << first_run;
  OpenGate(1);
  ASSERT_NO_FATAL_FAILURE(StartEvolve({"--resume", out, "--output", "json"}));
  absl::StatusOr<int> status = evolve_->Wait(absl::Seconds(240));
  ASSERT_TRUE(status.ok()) << status.status() << evolve_->Output();
  const std::string resumed = evolve_->Output();
  ASSERT_EQ(*evolve_->exit_code(), 0) << first_run << "\n---\n"
                                      << resumed << cluster_->DaemonOutput();

  // --output json: one object per line; the four of generation 1 adopted,
  // not submitted again; the last line names the best.
  std::vector<nlohmann::json> lines;
  for (absl::string_view l : absl::StrSplit(resumed, '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(l, "{"))
      continue;  // "elastrun evolve: resuming ..." goes first
    lines.push_back(nlohmann::json::parse(l, nullptr, false));
    ASSERT_TRUE(lines.back().is_object()) << l;
  }
  ASSERT_FALSE(lines.empty()) << resumed;
  int adopted = 0;
  for (const nlohmann::json& j : lines) {
    if (j.at("event") == "started") {
      EXPECT_TRUE(absl::StrContains(j.at("where").get<std::string>(), "adopted")) << j;
      ++adopted;
    }
  }
  EXPECT_EQ(adopted, 4) << resumed;
  EXPECT_EQ(lines.back().at("event"), "finished") << resumed;
  EXPECT_GT(lines.back().at("best_fitness").get<double>(), 0.0) << resumed;

  // Each individual one job of the service, each trained once but the two
  // the lost node held (started again on node0).
  const std::map<std::string, int> jobs = JobsByName();
  EXPECT_EQ(jobs.size(), 8u);
  for (const auto& [name, n] : jobs) {
    EXPECT_TRUE(absl::StartsWith(name, "evolve-")) << name;
    EXPECT_EQ(n, 1) << name << " submitted " << n << " times";
  }
  std::map<std::string, int> per_individual;
  for (const std::string& s : Starts()) ++per_individual[s];
  EXPECT_EQ(per_individual.size(), 8u) << testing::ReadFile(starts_);
  int twice = 0;
  for (const auto& [ind, n] : per_individual) {
    EXPECT_LE(n, 2) << ind;
    twice += n == 2;
    if (n == 2) EXPECT_TRUE(absl::StrContains(ind, "/ind_0_")) << ind;
  }
  EXPECT_EQ(twice, 2) << testing::ReadFile(starts_);

  // The outputs: 8 rows, all done; the best; the population; the plot.
  std::vector<std::string> rows =
      absl::StrSplit(testing::ReadFile(out + "/evolve.csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 9u) << testing::ReadFile(out + "/evolve.csv");
  EXPECT_EQ(
      rows[0],
      "generation,index,status,fitness,test_acc,optimizer.lr0,optimizer.momentum,reason");
  std::set<std::string> keys;
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    ASSERT_EQ(f.size(), 8u) << rows[i];
    keys.insert(f[0] + "," + f[1]);
    EXPECT_EQ(f[2], "done") << rows[i];
    double fitness = -1;
    EXPECT_TRUE(absl::SimpleAtod(f[3], &fitness)) << rows[i];
    EXPECT_GT(fitness, 0.0) << rows[i];
  }
  EXPECT_EQ(keys.size(), 8u);
  const std::string best = testing::ReadFile(out + "/hyp_evolve.yaml");
  EXPECT_TRUE(absl::StartsWith(best, "# The best individual")) << best;
  EXPECT_TRUE(absl::StrContains(best, "\noptimizer.lr0: ")) << best;
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(out + "/evolve_population.yaml"),
                                "- optimizer.lr0: "));
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(out + "/evolve.svg"), "</svg>"));
  // A job's log, as the service kept it, is in logs/.
  EXPECT_FALSE(testing::ReadFile(out + "/logs/ind_1_0.log").empty());
}

}  // namespace
}  // namespace elastrun
