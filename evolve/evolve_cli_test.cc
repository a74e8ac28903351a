// `elastrun evolve` end to end on this machine: the real elastrun, elastrun
// run children and elastrun-train (the classifier on tiny synthetic data),
// behind a wrapper named elastrun-train that records each training start and
// fails one individual on purpose; and --prune with a shell individual.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "evolve/evolve_test_util.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun::evolve {
namespace {

using testing::BinDir;

constexpr char kMeta[] =
    "optimizer.lr0: [true, 0.001, 0.1]\n"
    "optimizer.momentum: [true, 0.6, 0.98]\n";

class EvolveCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string real = BinDir() + "/elastrun-train";
    if (!testing::FileExists(real)) {
      GTEST_SKIP() << real << " is not built (a torch build makes it): nothing to evolve";
    }
    dir_ = testing::MakeTempDir("evolve");
    starts_ = dir_ + "/starts";
    meta_ = dir_ + "/meta.yaml";
    ASSERT_FALSE(testing::WriteFile(meta_, kMeta).empty());
    // Named elastrun-train, so that evolve passes config overrides.
    ASSERT_EQ(mkdir((dir_ + "/wrap").c_str(), 0755), 0);
    wrapper_ = dir_ + "/wrap/elastrun-train";
    ASSERT_FALSE(
        testing::WriteFile(
            wrapper_,
            RecordingTrainWrapper(real, starts_,
                                  "case \"$d\" in */ind_0_1) echo 'failing on purpose' "
                                  ">&2; exit 1;; esac\n"),
            0755)
            .empty());
  }

  testing::RunResult Evolve(std::vector<std::string> flags) {
    std::vector<std::string> argv = {BinDir() + "/elastrun", "evolve", "--population", "4",
                                     "--parallel", "2", "--seed", "7", "--meta", meta_,
                                     "--fitness", "test_acc=1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", wrapper_, "--config",
                             testing::SourceDir() + "/configs/fashion_mnist_mlp.yaml",
                             "data.synthetic=true", "+data.synthetic_train_size=256",
                             "+data.synthetic_test_size=64", "train.epochs=1"});
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, {}, absl::Seconds(120));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  // The rows of evolve.csv by "generation,index", each its fields.
  static std::map<std::string, std::vector<std::string>> Rows(const std::string& out) {
    std::map<std::string, std::vector<std::string>> rows;
    std::vector<std::string> lines =
        absl::StrSplit(testing::ReadFile(out + "/evolve.csv"), '\n', absl::SkipEmpty());
    EXPECT_FALSE(lines.empty());
    if (lines.empty()) return rows;
    EXPECT_EQ(lines[0],
              "generation,index,status,fitness,test_acc,optimizer.lr0,optimizer.momentum,reason");
    for (size_t i = 1; i < lines.size(); ++i) {
      std::vector<std::string> f = absl::StrSplit(lines[i], absl::MaxSplits(',', 7));
      EXPECT_EQ(f.size(), 8u) << lines[i];
      const std::string key = absl::StrCat(f[0], ",", f[1]);
      EXPECT_EQ(rows.count(key), 0u) << "twice: " << key;
      rows[key] = f;
    }
    return rows;
  }

  std::vector<std::string> Starts() const {
    return absl::StrSplit(testing::ReadFile(starts_), '\n', absl::SkipEmpty());
  }

  static void ExpectOutputs(const std::string& out,
                            const std::map<std::string, std::vector<std::string>>& rows) {
    for (const auto& [key, f] : rows) {
      double lr = 0, momentum = 0, fitness = -1;
      ASSERT_TRUE(absl::SimpleAtod(f[3], &fitness)) << key;
      ASSERT_TRUE(absl::SimpleAtod(f[5], &lr)) << key;
      ASSERT_TRUE(absl::SimpleAtod(f[6], &momentum)) << key;
      EXPECT_GE(lr, 0.001) << key;
      EXPECT_LE(lr, 0.1) << key;
      EXPECT_GE(momentum, 0.6) << key;
      EXPECT_LE(momentum, 0.98) << key;
      if (key == "0,1") {
        EXPECT_EQ(f[2], "failed");
        EXPECT_EQ(fitness, 0.0);
        EXPECT_TRUE(absl::StrContains(f[7], "exit code")) << f[7];
      } else {
        EXPECT_EQ(f[2], "done") << key << ": " << f[7];
        EXPECT_EQ(f[3], f[4]) << key;  // fitness = 1 x test_acc
      }
    }
    const std::string best = testing::ReadFile(out + "/hyp_evolve.yaml");
    EXPECT_TRUE(absl::StartsWith(best, "# The best individual")) << best;
    EXPECT_TRUE(absl::StrContains(best, "\noptimizer.lr0: ")) << best;
    EXPECT_TRUE(absl::StrContains(best, "\noptimizer.momentum: ")) << best;
    // Fitness against each hyperparameter, one panel each, titled with its
    // (possibly shortened) name and the best value.
    const std::string plot = testing::ReadFile(out + "/evolve.svg");
    EXPECT_TRUE(absl::StrContains(plot, "</svg>")) << plot.substr(0, 200);
    EXPECT_TRUE(absl::StrContains(plot, "lr0 = ")) << plot.substr(0, 200);
    EXPECT_TRUE(absl::StrContains(plot, "momentum = ")) << plot.substr(0, 200);
    const std::string population = testing::ReadFile(out + "/evolve_population.yaml");
    size_t individuals = 0;
    for (absl::string_view line : absl::StrSplit(population, '\n')) {
      individuals += absl::StartsWith(line, "- optimizer.lr0: ");
    }
    EXPECT_EQ(individuals, 4u) << population;
  }

  // 2 x 4 rows in `out`, the outputs checked, and 8 training starts, none
  // of an individual twice.
  void ExpectTwoGenerationsTrainedOnce(const std::string& out) const {
  const auto rows = Rows(out);
  EXPECT_EQ(rows.size(), 8u);
  ExpectOutputs(out, rows);
  std::vector<std::string> starts = Starts();
  EXPECT_EQ(starts.size(), 8u);
  EXPECT_EQ(std::set<std::string>(starts.begin(), starts.end()).size(), starts.size());
  }

  std::string dir_, starts_, meta_, wrapper_;
};

TEST_F(EvolveCliTest, TwoGenerationsOfFourTwoAtATime) {
  const std::string out = dir_ + "/out";
  testing::RunResult r = Evolve({"--generations", "2", "--output-dir", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "generation 2/2: queued 0, running 0, done 4"))
      << r.output;
  ExpectTwoGenerationsTrainedOnce(out);
}

TEST_F(EvolveCliTest, ResumeTrainsNoIndividualTwice) {
  const std::string out = dir_ + "/out";
  testing::RunResult first = Evolve({"--generations", "1", "--output-dir", out});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(Rows(out).size(), 4u);
  EXPECT_EQ(Starts().size(), 4u);
  // Without --resume the folder is refused; with it, generation 1 follows.
  testing::RunResult again = Evolve({"--generations", "2", "--output-dir", out});
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_TRUE(absl::StrContains(again.output, "--resume")) << again.output;
  testing::RunResult resumed = Evolve({"--generations", "2", "--resume", out});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(absl::StrContains(resumed.output, "4 individuals already evaluated"))
      << resumed.output;
  ExpectTwoGenerationsTrainedOnce(out);
  // Another seed's GA does not match the table: refused, nothing trained.
  testing::RunResult other = Evolve({"--generations", "3", "--resume", out, "--seed", "8"});
  EXPECT_EQ(other.exit_code, 1) << other.output;
  EXPECT_TRUE(absl::StrContains(other.output, "resume with the --seed")) << other.output;
  EXPECT_EQ(Starts().size(), 8u);
}

TEST_F(EvolveCliTest, AGeneTheProgramDoesNotTakeIsAnErrorBeforeTraining) {
  ASSERT_FALSE(
      testing::WriteFile(meta_, "optimizer.no_such_key: [true, 0.1, 0.2]\n").empty());
  testing::RunResult r = Evolve({"--generations", "1", "--output-dir", dir_ + "/out"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "no_such_key")) << r.output;
  EXPECT_FALSE(testing::FileExists(starts_));
}

// --prune with a program that is not elastrun-train: the hyperparameters
// from $ELASTRUN_HYP, the metrics from its results CSV by column
// (--results, {dir}). The four individuals are given (--evolve-population)
// and train one at a time, so the milestone's cutoffs are known: with
// eta 2, the median of the values seen at epoch 1 so far. An individual
// with x < 0.5 writes epoch 1 and then waits to be stopped (failing after
// a minute if it is not); the others write epoch 2 and end.
TEST(EvolvePruneTest, IndividualsBelowTheMedianAtTheMilestoneAreStopped) {
  const std::string dir = testing::MakeTempDir("evolve_prune");
  const std::string program = dir + "/individual.sh";
  ASSERT_FALSE(
      testing::WriteFile(program,
                         "#!/bin/sh\n"
                         "x=$(sed -n 's/^x: //p' \"$ELASTRUN_HYP\")\n"
                         "printf 'epoch,score\\n1,%s\\n' \"$x\" > \"$1/results.csv\"\n"
                         "case \"$x\" in 0.[0-4]*) i=0; while [ $i -lt 1200 ]; do sleep "
                         "0.05; i=$((i+1)); done;"
                         " echo 'not stopped' >&2; exit 1;; esac\n"
                         "printf '2,%s\\n' \"$x\" >> \"$1/results.csv\"\n",
                         0755)
          .empty());
  ASSERT_FALSE(testing::WriteFile(dir + "/meta.yaml", "x: [true, 0.0, 1.0]\n").empty());
  ASSERT_EQ(mkdir((dir + "/given").c_str(), 0755), 0);
  ASSERT_FALSE(testing::WriteFile(dir + "/given/population.yaml",
                                  "- x: 0.9\n- x: 0.2\n- x: 0.8\n- x: 0.1\n")
                   .empty());
  const std::string out = dir + "/out";
  absl::StatusOr<testing::RunResult> r = testing::Run(
      {BinDir() + "/elastrun", "evolve", "--population", "4", "--generations", "1",
       "--parallel", "1", "--meta", dir + "/meta.yaml", "--evolve-population", dir + "/given",
       "--fitness", "score=1", "--results", "results.csv", "--prune", "--prune-grace", "1",
       "--prune-eta", "2", "--output-dir", out, "--", program, "{dir}"},
      {}, absl::Seconds(200));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->output;
  std::map<std::string, std::vector<std::string>> rows;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(out + "/evolve.csv"), '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(',', 6));
    ASSERT_EQ(f.size(), 7u) << line;
    rows[f[1]] = f;
  }
  ASSERT_EQ(rows.size(), 5u) << r->output;
  EXPECT_EQ(rows["index"][4], "score");
  EXPECT_EQ(rows["index"][5], "x");
  // index -> status, fitness: 0.9 (first there: nothing to compare with),
  // 0.2 < median(0.9, 0.2) = 0.55, 0.8 = median(0.9, 0.2, 0.8), 0.1 <
  // median(0.9, 0.2, 0.8, 0.1) = 0.5.
  const std::map<std::string, std::pair<std::string, std::string>> want = {
      {"0", {"done", "0.9"}}, {"1", {"pruned", "0.2"}}, {"2", {"done", "0.8"}},
      {"3", {"pruned", "0.1"}}};
  for (const auto& [index, w] : want) {
    EXPECT_EQ(rows[index][2], w.first) << index << ": " << rows[index][6];
    EXPECT_EQ(rows[index][3], w.second) << index;
  }
  EXPECT_TRUE(absl::StrContains(rows["1"][6], "pruned at epoch 1")) << rows["1"][6];
  EXPECT_TRUE(absl::StrContains(rows["3"][6], "(0.5)")) << rows["3"][6];
  EXPECT_TRUE(absl::StrContains(r->output, "ind_0_3: pruned at epoch 1")) << r->output;
  EXPECT_TRUE(absl::StrContains(r->output, "pruned 2")) << r->output;
}

}  // namespace
}  // namespace elastrun::evolve
