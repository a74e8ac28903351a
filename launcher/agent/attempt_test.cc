#include "launcher/agent/attempt.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

std::map<std::string, std::string> EnvMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const std::string& e : env) {
    auto eq = e.find('=');
    EXPECT_EQ(m.count(e.substr(0, eq)), 0u) << "duplicate " << e;
    m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

TEST(BuildAttemptTest, TorchrunEnvironmentForEveryWorker) {
  GroupSpec g;
  g.argv = {"python3", "-u", "train.py"};
  g.nproc_per_node = 2;
  g.max_restarts = 3;
  AttemptContext c;
  c.run_id = "r1";
  c.round = 4;
  c.restart_count = 2;
  c.master_addr = "10.0.0.1";
  c.master_port = 23456;
  c.world_size = 6;
  c.group_rank = 1;
  c.group_world_size = 3;
  c.rank_offset = 2;
  c.attempt_dir = "/logs/r1/attempt_4";
  // Stale contract variables in the launcher's environment are replaced.
  g.snapshot_dir = "/dev/shm/elastrun-0/r1";
  AttemptSpec a = BuildAttempt(g, c, {"PATH=/bin", "RANK=99", "HOME=/root"});
  ASSERT_EQ(a.workers.size(), 2u);
  auto e = EnvMap(a.workers[1].process.env);
  EXPECT_EQ(e["RANK"], "3");
  EXPECT_EQ(e["LOCAL_RANK"], "1");
  EXPECT_EQ(e["WORLD_SIZE"], "6");
  EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(e["GROUP_RANK"], "1");
  EXPECT_EQ(e["GROUP_WORLD_SIZE"], "3");
  EXPECT_EQ(e["ROLE_RANK"], "3");
  EXPECT_EQ(e["ROLE_WORLD_SIZE"], "6");
  EXPECT_EQ(e["ROLE_NAME"], "default");
  EXPECT_EQ(e["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(e["MASTER_PORT"], "23456");
  EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "r1");
  EXPECT_EQ(e["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(e["TORCHELASTIC_ERROR_FILE"], "/logs/r1/attempt_4/1/error.json");
  EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(e["ELASTRUN_ROUND"], "4");
  EXPECT_EQ(e["ELASTRUN_SNAPSHOT"], "/dev/shm/elastrun-0/r1");
  EXPECT_EQ(e["PATH"], "/bin");
  // A standby gets the folder before it knows its attempt.
  EXPECT_EQ(EnvMap(a.standby_env)["ELASTRUN_SNAPSHOT"], "/dev/shm/elastrun-0/r1");
  EXPECT_EQ(a.outputs[1].stdout_log, "/logs/r1/attempt_4/1/stdout.log");
  EXPECT_EQ(a.outputs[1].prefix, "[rank3]:");
}

// torchrun's ${local_rank} macro: each worker's own local rank in its
// arguments (not in argv[0]); such workers get no standby.
TEST(BuildAttemptTest, LocalRankMacroIsEachWorkersOwn) {
  GroupSpec g;
  g.argv = {"python3", "train.py", "--local_rank=${local_rank}", "--tag=r${local_rank}x"};
  g.nproc_per_node = 3;
  AttemptContext c;
  c.world_size = 3;
  AttemptSpec s = BuildAttempt(g, c, {});
  ASSERT_EQ(s.workers.size(), 3u);
  for (int local = 0; local < 3; ++local) {
    EXPECT_THAT(s.workers[local].process.argv,
                ::testing::ElementsAre("python3", "train.py",
                                       "--local_rank=" + std::to_string(local),
                                       "--tag=r" + std::to_string(local) + "x"));
  }
  EXPECT_TRUE(s.standby_argv.empty());
  g.argv = {"python3", "train.py"};
  EXPECT_EQ(BuildAttempt(g, c, {}).standby_argv, g.argv);
}

TEST(BuildAttemptTest, UserOmpThreadsKeptAndSingleWorkerUntouched) {
  GroupSpec g;
  g.argv = {"w"};
  g.nproc_per_node = 2;
  AttemptContext c;
  auto e = EnvMap(BuildAttempt(g, c, {"OMP_NUM_THREADS=4"}).workers[0].process.env);
  EXPECT_EQ(e["OMP_NUM_THREADS"], "4");
  g.nproc_per_node = 1;
  auto one = EnvMap(BuildAttempt(g, c, {}).workers[0].process.env);
  EXPECT_EQ(one.count("OMP_NUM_THREADS"), 0u);
}

TEST(BuildAttemptTest, NoSnapshotFolderDropsAnInheritedOne) {
  GroupSpec g;
  g.argv = {"w"};
  AttemptContext c;
  AttemptSpec a = BuildAttempt(g, c, {"ELASTRUN_SNAPSHOT=/dev/shm/someone-elses", "A=1"});
  EXPECT_EQ(EnvMap(a.workers[0].process.env).count("ELASTRUN_SNAPSHOT"), 0u);
  EXPECT_EQ(EnvMap(a.standby_env).count("ELASTRUN_SNAPSHOT"), 0u);
  EXPECT_EQ(EnvMap(a.workers[0].process.env)["A"], "1");
}

TEST(BuildAttemptTest, RedirectsTeeAndFilterRouteConsole) {
  GroupSpec g;
  g.argv = {"w"};
  g.nproc_per_node = 3;
  g.redirects = *StdSetting::Parse("3", "r");
  g.tee = *StdSetting::Parse("0:1", "t");
  AttemptSpec a = BuildAttempt(g, AttemptContext{}, {});
  EXPECT_TRUE(a.outputs[0].stdout_to_console);  // redirected but teed
  EXPECT_FALSE(a.outputs[0].stderr_to_console);
  EXPECT_FALSE(a.outputs[1].stdout_to_console);
  g.redirects = StdSetting();
  g.local_ranks_filter = std::set<int>{2};
  a = BuildAttempt(g, AttemptContext{}, {});
  EXPECT_FALSE(a.outputs[0].stdout_to_console);
  EXPECT_TRUE(a.outputs[2].stdout_to_console);
  EXPECT_TRUE(a.outputs[2].stderr_to_console);
}

}  // namespace
}  // namespace elastrun::launcher
