#include "launcher/cli/run_options.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<RunOptions> Parse(std::vector<std::string> args,
                                 std::map<std::string, std::string> env = {}) {
  return ParseRunOptions(args, [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(RunOptionsTest, TorchrunFlagsBothSpellings) {
  auto o = Parse({"--nproc_per_node=4", "--max-restarts", "3", "--rdzv_id", "job7",
                  "--standalone", "--log-dir", "/tmp/x", "--tee", "3", "train.py",
                  "--lr", "0.1"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node_text, "4");
  EXPECT_EQ(o->max_restarts, 3);
  EXPECT_EQ(o->run_id, "job7");
  EXPECT_TRUE(o->standalone);
  EXPECT_EQ(o->log_dir, "/tmp/x");
  EXPECT_EQ(o->tee.For(0), kStdAll);
  // Flags after the program belong to the program.
  EXPECT_THAT(o->program, ElementsAre("train.py", "--lr", "0.1"));
}

TEST(RunOptionsTest, PetEnvironmentFallbacksYieldToFlags) {
  auto o = Parse({"--max-restarts=1", "w"},
                 {{"PET_NPROC_PER_NODE", "2"}, {"PET_MAX_RESTARTS", "9"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node_text, "2");
  EXPECT_EQ(o->max_restarts, 1);
  auto bad = Parse({"w"}, {{"PET_MAX_RESTARTS", "many"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("PET_MAX_RESTARTS"));
}

TEST(RunOptionsTest, ErrorsNameTheFlag) {
  auto unknown = Parse({"--nproc-per-nodes", "2", "w"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("--nproc-per-nodes"));
  auto missing = Parse({"--max-restarts"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("needs a value"));
  auto multi = Parse({"--nnodes", "2:4", "w"});
  ASSERT_FALSE(multi.ok());
  EXPECT_THAT(std::string(multi.status().message()), HasSubstr("elastrun submit"));
  auto noprog = Parse({"--nproc-per-node", "2"});
  ASSERT_FALSE(noprog.ok());
  EXPECT_THAT(std::string(noprog.status().message()), HasSubstr("no program"));
  EXPECT_FALSE(Parse({"--no-python", "-m", "pkg"}).ok());
  EXPECT_FALSE(Parse({"--run-id", "a/b", "w"}).ok());
  EXPECT_TRUE(Parse({"--nnodes", "1:1", "w"}).ok());
  EXPECT_TRUE(Parse({"--help"})->help);
}

TEST(RunOptionsTest, NprocKeywords) {
  EXPECT_EQ(*ResolveNprocPerNode("3", 8, 0), 3);
  EXPECT_EQ(*ResolveNprocPerNode("cpu", 8, 2), 8);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 2), 2);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 0), 8);
  auto gpu = ResolveNprocPerNode("gpu", 8, 0);
  ASSERT_FALSE(gpu.ok());
  EXPECT_THAT(std::string(gpu.status().message()), HasSubstr("no GPU"));
  EXPECT_FALSE(ResolveNprocPerNode("0", 8, 0).ok());
  EXPECT_FALSE(ResolveNprocPerNode("lots", 8, 0).ok());
}

TEST(RunOptionsTest, PythonOnlyForScriptsAndModules) {
  auto script = Parse({"train.py", "a"});
  EXPECT_THAT(WorkerArgv(*script, "python3"), ElementsAre("python3", "-u", "train.py", "a"));
  auto module = Parse({"-m", "pkg.train", "a"});
  EXPECT_THAT(WorkerArgv(*module, "py"), ElementsAre("py", "-u", "-m", "pkg.train", "a"));
  auto binary = Parse({"./worker", "a"});
  EXPECT_THAT(WorkerArgv(*binary, "python3"), ElementsAre("./worker", "a"));
  auto forced = Parse({"--no-python", "run.py"});
  EXPECT_THAT(WorkerArgv(*forced, "python3"), ElementsAre("run.py"));
  // --standby: Python programs go through the standby bootstrap.
  auto standby_script = Parse({"--standby", "train.py", "a"});
  EXPECT_THAT(WorkerArgv(*standby_script, "python3"),
              ElementsAre("python3", "-u", "-c", HasSubstr("ELASTRUN_STANDBY_FD"), "path",
                          "train.py", "a"));
  auto standby_module = Parse({"--standby", "-m", "pkg.train", "a"});
  EXPECT_THAT(WorkerArgv(*standby_module, "python3"),
              ElementsAre("python3", "-u", "-c", HasSubstr("run_module"), "module", "pkg.train",
                          "a"));
  auto standby_binary = Parse({"--standby", "./worker"});
  EXPECT_THAT(WorkerArgv(*standby_binary, "python3"), ElementsAre("./worker"));
}

}  // namespace
}  // namespace elastrun::launcher
