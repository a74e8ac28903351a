#include "launcher/cli/run_options.h"

#include <map>
#include <set>

#include "absl/strings/str_split.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<RunOptions> Parse(std::vector<std::string> args,
                                 std::map<std::string, std::string> env = {}) {
  return ParseRunOptions(
      args,
      [env](const std::string& k) -> std::optional<std::string> {
        auto it = env.find(k);
        if (it == env.end()) return std::nullopt;
        return it->second;
      },
      // This node is "me" (and loopback), nothing else.
      [](const std::string& host) { return host == "me" || host == "127.0.0.1"; });
}

std::string Error(const absl::StatusOr<RunOptions>& o) {
  return o.ok() ? "(ok)" : std::string(o.status().message());
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

// `elastrun launch`: torch.distributed.launch's words as `elastrun run`'s.
TEST(RunOptionsTest, LegacyLaunchAppendsTheLocalRankUnlessUseEnv) {
  using V = std::vector<std::string>;
  // Seed 002's command; flag values are not taken for the program.
  EXPECT_EQ(*LegacyLaunchArgs({"--nproc_per_node", "7", "--master_port", "34231", "train.py",
                               "--batch", "64"}),
            (V{"--nproc_per_node", "7", "--master_port", "34231", "train.py", "--batch", "64",
               "--local_rank=${local_rank}"}));
  // --use_env / --use-env before the program: removed, nothing appended; the
  // program's own --use_env is its.
  EXPECT_EQ(*LegacyLaunchArgs({"--use_env", "--nproc-per-node=2", "t.py", "--use_env"}),
            (V{"--nproc-per-node=2", "t.py", "--use_env"}));
  EXPECT_EQ(*LegacyLaunchArgs({"--use-env=false", "-r", "3", "t.py"}),
            (V{"-r", "3", "t.py", "--local_rank=${local_rank}"}));
  EXPECT_EQ(*LegacyLaunchArgs({"--nnodes", "1", "--", "t.py"}),
            (V{"--nnodes", "1", "--", "t.py", "--local_rank=${local_rank}"}));
  absl::StatusOr<V> bad = LegacyLaunchArgs({"--use_env=maybe", "t.py"});
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--use_env"));
}

TEST(RunOptionsTest, ErrorsNameTheFlag) {
  auto unknown = Parse({"--nproc-per-nodes", "2", "w"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(std::string(unknown.status().message()), "unknown flag --nproc-per-nodes");
  auto missing = Parse({"--max-restarts"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("needs a value"));
  auto multi = Parse({"--nnodes", "2:4", "w"});
  ASSERT_FALSE(multi.ok());
  EXPECT_THAT(std::string(multi.status().message()),
              HasSubstr("--nnodes 2:4 needs --rdzv-endpoint HOST:PORT"));
  auto noprog = Parse({"--nproc-per-node", "2"});
  ASSERT_FALSE(noprog.ok());
  EXPECT_THAT(std::string(noprog.status().message()), HasSubstr("no program"));
  EXPECT_FALSE(Parse({"--no-python", "-m", "pkg"}).ok());
  EXPECT_FALSE(Parse({"--run-id", "a/b", "w"}).ok());
  EXPECT_TRUE(Parse({"--nnodes", "1:1", "w"}).ok());
  EXPECT_TRUE(Parse({"--help"})->help);
}

TEST(RunOptionsTest, EverySpellingOfEveryFlag) {
  // Dashed, underscored, "=value", short forms; the last one wins.
  auto o = Parse({"--nproc-per-node", "1", "--nproc_per_node=3", "--max_restarts", "2",
                  "--run_id=r1", "-r", "3", "-t1", "--local_ranks_filter", "0,1",
                  "--master_addr", "10.0.0.1", "--master_port=29500", "--node_rank", "0",
                  "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:29400",
                  "--start_method", "spawn", "--shutdown_timeout", "5", "--no_python",
                  "--run_path", "--standby", "--no_snapshots", "--role", "trainer", "w",
                  "x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node_text, "3");
  EXPECT_EQ(o->max_restarts, 2);
  EXPECT_EQ(o->run_id, "r1");
  EXPECT_EQ(o->redirects.For(0), kStdAll);
  EXPECT_EQ(o->tee.For(0), kStdOut);
  EXPECT_EQ(*o->local_ranks_filter, (std::set<int>{0, 1}));
  EXPECT_EQ(o->master_addr, "10.0.0.1");
  EXPECT_EQ(o->master_port, 29500);
  EXPECT_EQ(o->shutdown_timeout, absl::Seconds(5));
  EXPECT_TRUE(o->no_python);
  EXPECT_TRUE(o->run_path);
  EXPECT_TRUE(o->standby);
  EXPECT_TRUE(o->no_snapshots);
  EXPECT_EQ(o->role, "trainer");
  EXPECT_THAT(o->program, ElementsAre("w", "x"));
  EXPECT_TRUE(o->warnings.empty());
  // "--" ends the flags; what follows is the program, even a dashed word.
  auto dashed = Parse({"--standalone", "--", "-weird", "--lr"});
  ASSERT_TRUE(dashed.ok()) << dashed.status();
  EXPECT_THAT(dashed->program, ElementsAre("-weird", "--lr"));
}

TEST(RunOptionsTest, PetFallbacksForEveryFlagAndSpelling) {
  auto o = Parse({"w"}, {{"PET_NPROC_PER_NODE", "4"},
                         {"PET_STANDALONE", "1"},
                         {"PET_RDZV_ID", "fromenv"},
                         {"PET_MASTER_PORT", "1234"},
                         {"PET_MODULE", "true"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node_text, "4");
  EXPECT_TRUE(o->standalone);
  EXPECT_EQ(o->run_id, "fromenv");
  EXPECT_EQ(o->master_port, 1234);
  EXPECT_TRUE(o->module);
  // The second name of a flag has its own PET_ variable.
  EXPECT_EQ(Parse({"w"}, {{"PET_RUN_ID", "r2"}})->run_id, "r2");
  // A bad value names the variable, not a flag the user did not type.
  EXPECT_THAT(Error(Parse({"w"}, {{"PET_START_METHOD", "fork"}})),
              HasSubstr("PET_START_METHOD fork"));
  EXPECT_THAT(Error(Parse({"w"}, {{"PET_STANDALONE", "maybe"}})), HasSubstr("PET_STANDALONE"));
}

TEST(RunOptionsTest, OneNodeUnlessSeveralOrAnotherHost) {
  for (const char* endpoint : {"127.0.0.1:29400", "me:29400", "me"}) {
    auto o = Parse({"--rdzv-endpoint", endpoint, "w"});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_FALSE(o->multinode) << endpoint;
  }
  // An endpoint on another host is the multi-node form, even with --nnodes 1.
  auto other = Parse({"--rdzv-endpoint", "node7", "w"});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(other->multinode);
  EXPECT_EQ(other->rdzv_endpoint, "node7:29400");  // torchrun's default port
  EXPECT_FALSE(other->endpoint_is_this_host);
  EXPECT_EQ(other->run_id, "none");  // torchrun's default: the same on every node
  auto env = Parse({"w"}, {{"PET_RDZV_ENDPOINT", "10.1.2.3:29500"}, {"PET_NNODES", "2:3"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->multinode);
  EXPECT_EQ(env->rdzv_endpoint, "10.1.2.3:29500");
  EXPECT_EQ(env->nnodes.min, 2);
  EXPECT_EQ(env->nnodes.max, 3);
  EXPECT_THAT(Error(Parse({"--rdzv-endpoint", "[::1", "w"})), HasSubstr("--rdzv-endpoint"));
}

TEST(RunOptionsTest, MultinodeForm) {
  auto o = Parse({"--nnodes", "2:3", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                  "--rdzv_endpoint", "me:29555", "--rdzv_id", "j1", "--rdzv_conf",
                  "join_timeout=30, last_call_timeout=2,is_host=1,keep_alive_interval=250ms,"
                  "keep_alive_max_attempt=4,token_file=/t,other=1",
                  "--local_addr", "10.0.0.9", "w"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->multinode);
  EXPECT_TRUE(o->endpoint_is_this_host);
  EXPECT_EQ(o->rdzv_endpoint, "me:29555");
  EXPECT_EQ(o->run_id, "j1");
  EXPECT_EQ(o->local_addr, "10.0.0.9");
  const RendezvousConf& c = o->rdzv_conf;
  EXPECT_EQ(c.join_timeout, absl::Seconds(30));
  EXPECT_EQ(c.last_call_timeout, absl::Seconds(2));
  EXPECT_EQ(c.is_host, true);
  EXPECT_EQ(c.keep_alive_interval, absl::Milliseconds(250));
  EXPECT_EQ(c.keep_alive_max_attempt, 4);
  EXPECT_EQ(c.token_file, "/t");
  // An unknown key is warned about, as torchrun's backends ignore it.
  ASSERT_EQ(o->warnings.size(), 1u);
  EXPECT_THAT(o->warnings[0], HasSubstr("--rdzv-conf other is ignored"));
  EXPECT_EQ(Parse({"--nnodes", "2", "--rdzv-endpoint", "me", "--rdzv-conf", "is_host=0", "w"})
                ->rdzv_conf.is_host,
            false);

  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-endpoint", "me", "--rdzv-conf",
                           "join_timeout=soon", "w"})),
              HasSubstr("--rdzv-conf join_timeout"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-endpoint", "me", "--rdzv-conf",
                           "is_host", "w"})),
              HasSubstr("not KEY=VALUE"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-endpoint", "me", "--rdzv-conf",
                           "keep_alive_max_attempt=1", "w"})),
              HasSubstr("keep_alive_max_attempt"));
  EXPECT_THAT(Error(Parse({"--nnodes", "3", "--rdzv-backend", "static", "--rdzv-endpoint",
                           "me", "w"})),
              HasSubstr("--rdzv-backend static with --nnodes 3 needs --node-rank R"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--standalone", "--rdzv-endpoint", "me", "w"})),
              HasSubstr("--standalone"));
  auto master = Parse({"--nnodes", "2", "--rdzv-endpoint", "me", "--master-port", "29500", "w"});
  ASSERT_TRUE(master.ok()) << master.status();
  ASSERT_EQ(master->warnings.size(), 1u);
  EXPECT_THAT(master->warnings[0], HasSubstr("--master-addr/--master-port is ignored"));
}

TEST(RunOptionsTest, StaticBackend) {
  // torchrun's static form: the rendezvous at the master address, hosted by
  // node rank 0; node R is group rank R.
  auto o = Parse({"--nnodes", "3", "--node-rank", "1", "--rdzv-backend", "static",
                  "--master-addr", "node7", "--master-port", "29601", "w"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->multinode);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->rdzv_endpoint, "node7:29601");
  EXPECT_FALSE(o->endpoint_is_this_host);
  EXPECT_EQ(o->rdzv_conf.is_host, false);
  EXPECT_TRUE(o->warnings.empty());
  auto zero = Parse({"--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "static",
                     "--master-addr", "me", "w"});
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->rdzv_endpoint, "me:29500");  // torchrun's default master port
  EXPECT_EQ(zero->rdzv_conf.is_host, true);
  EXPECT_THAT(Error(Parse({"--nnodes", "2:3", "--node-rank", "0", "--rdzv-backend", "static",
                           "w"})),
              HasSubstr("needs a fixed --nnodes N"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--node-rank", "2", "--rdzv-backend", "static",
                           "w"})),
              HasSubstr("(0 <= R < 2): this node's group rank, not 2"));
}

TEST(RunOptionsTest, ArgparsePrefixAbbreviations) {
  auto o = Parse({"--nproc_per", "2", "--redirect", "3", "--max-r=4", "--nn", "1",
                  "--no-p", "w", "--nproc_per", "x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->nproc_per_node_text, "2");
  EXPECT_EQ(o->redirects.For(0), kStdAll);
  EXPECT_EQ(o->max_restarts, 4);
  EXPECT_TRUE(o->no_python);
  // The program's own words are never expanded.
  EXPECT_THAT(o->program, ElementsAre("w", "--nproc_per", "x"));
  // A value that looks like a flag is a value.
  auto value = Parse({"--role", "--ma", "w"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->role, "--ma");
  // Both spellings of one flag are not ambiguous; two flags are.
  const std::string ambiguous = Error(Parse({"--ma", "1", "w"}));
  EXPECT_THAT(ambiguous, HasSubstr("ambiguous flag --ma: could be"));
  EXPECT_THAT(ambiguous, HasSubstr("--master-addr"));
  EXPECT_THAT(ambiguous, HasSubstr("--max-restarts"));
  EXPECT_THAT(ambiguous, HasSubstr("--master-port"));
  EXPECT_THAT(Error(Parse({"--nproc-per-nodes", "2", "w"})), HasSubstr("unknown flag"));
}

TEST(RunOptionsTest, GpuCountHonoursCudaVisibleDevices) {
  EXPECT_EQ(VisibleGpuCount(std::nullopt, 4), 4);
  EXPECT_EQ(VisibleGpuCount("0,2", 4), 2);
  EXPECT_EQ(VisibleGpuCount("GPU-5d1e,GPU-77aa,GPU-0b9c", 0), 3);
  EXPECT_EQ(VisibleGpuCount("", 4), 0);
  EXPECT_EQ(VisibleGpuCount("1,-1,2", 4), 1);
  EXPECT_EQ(*ResolveNprocPerNode("gpu", 8, VisibleGpuCount("3", 4)), 1);
  EXPECT_FALSE(ResolveNprocPerNode("gpu", 8, VisibleGpuCount("", 4)).ok());
}

TEST(RunOptionsTest, ElastrunBackendNamesARunningServiceByEveryReplica) {
  // Several endpoints (the replicas), each with torchrun's default port
  // where none is given; no node hosts, even one that an endpoint names.
  auto o = Parse({"--nnodes", "2:3", "--rdzv-backend", "elastrun", "--rdzv-endpoint",
                  "me, r2:29501,[::1]", "--rdzv-id", "j1", "w"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->multinode);
  EXPECT_TRUE(o->external_rendezvous());
  EXPECT_EQ(o->rdzv_endpoint, "me:29400,r2:29501,[::1]:29400");
  EXPECT_FALSE(o->endpoint_is_this_host);
  // One node joining the service is the multi-node form too.
  auto one = Parse({"--rdzv-backend", "elastrun", "--rdzv-endpoint", "me:29400", "w"});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->multinode);
  EXPECT_EQ(one->rdzv_endpoint, "me:29400");
  // is_host means nothing there, and is said to.
  auto host = Parse({"--nnodes", "2", "--rdzv-backend", "elastrun", "--rdzv-endpoint",
                     "me", "--rdzv-conf", "is_host=1", "w"});
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_FALSE(host->rdzv_conf.is_host.has_value());
  ASSERT_EQ(host->warnings.size(), 1u);
  EXPECT_THAT(host->warnings[0], HasSubstr("--rdzv-conf is_host is ignored"));

  EXPECT_THAT(
      Error(Parse({"--rdzv-backend", "elastrun", "w"})),
      HasSubstr("--rdzv-backend elastrun needs --rdzv-endpoint HOST:PORT[,HOST:PORT"));
  EXPECT_THAT(
      Error(Parse({"--nnodes", "2", "--rdzv-endpoint", "me,r2", "w"})),
      HasSubstr("several endpoints are the replicas of a running elastrun-rendezvous "
                "service: add --rdzv-backend elastrun"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-backend", "elastrun",
                           "--rdzv-endpoint", "me,[]", "w"})),
              HasSubstr("'[]' names no host"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-backend", "elastrun",
                           "--rdzv-endpoint", "me,:29400", "w"})),
              HasSubstr("\":29400\" is not HOST:PORT"));
  EXPECT_THAT(Error(Parse({"--nnodes", "2", "--rdzv-backend", "elastrun",
                           "--rdzv-endpoint", "me,r2:port", "w"})),
              HasSubstr("--rdzv-endpoint"));
}

TEST(RunOptionsTest, StartMethodAndBackendBeyondOneNodeAreRefused) {
  EXPECT_TRUE(Parse({"--start-method", "spawn", "w"}).ok());
  for (const char* method : {"fork", "forkserver"}) {
    EXPECT_THAT(Error(Parse({"--start-method", method, "w"})),
                HasSubstr(std::string("--start-method ") + method + ": only spawn"));
  }
  EXPECT_TRUE(Parse({"--rdzv-backend", "static", "w"}).ok());
  const std::string etcd = Error(Parse({"--rdzv-backend", "etcd", "w"}));
  EXPECT_THAT(etcd, HasSubstr("--rdzv-backend etcd: only c10d"));
  EXPECT_THAT(etcd, HasSubstr("static (--master-addr/--master-port"));
  EXPECT_THAT(etcd, Not(HasSubstr("one node")));
  EXPECT_THAT(Error(Parse({"--node-rank", "1", "w"})), HasSubstr("--node-rank"));
}

TEST(RunOptionsTest, FlagsThatChangeNothingAreWarnedAbout) {
  auto o = Parse({"--local-addr", "10.0.0.5", "--rdzv-conf", "join_timeout=5",
                  "--monitor-interval", "1", "w"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->warnings.size(), 3u);
  EXPECT_THAT(o->warnings[0], HasSubstr("--rdzv-conf is ignored"));
  EXPECT_THAT(o->warnings[1], HasSubstr("--local-addr is ignored"));
  EXPECT_THAT(o->warnings[2], HasSubstr("--monitor-interval is ignored"));
  auto env = Parse({"w"}, {{"PET_LOCAL_ADDR", "10.0.0.5"}});
  ASSERT_EQ(env->warnings.size(), 1u);
  EXPECT_THAT(env->warnings[0], HasSubstr("PET_LOCAL_ADDR is ignored"));
  EXPECT_TRUE(Parse({"w"})->warnings.empty());
}

// Every flag the help lists parses (the help tells the truth), and no flag
// parses that the help does not list.
TEST(RunOptionsTest, HelpListsExactlyTheFlagsThatParse) {
  const std::string help = RunUsage();
  int listed = 0;
  for (size_t at = help.find("\n  -"); at != std::string::npos; at = help.find("\n  -", at + 1)) {
    const std::string line = help.substr(at + 3, help.find('\n', at + 3) - at - 3);
    for (absl::string_view name : absl::StrSplit(line.substr(0, line.find("  ")), ", ")) {
      std::string flag(name.substr(0, name.find(' ')));
      if (flag == "-h" || flag == "--help") continue;
      ++listed;
      // A value that every flag's check accepts, or at least not "unknown".
      EXPECT_THAT(Error(Parse({flag, "0", "w"})), Not(HasSubstr("unknown flag"))) << flag;
    }
  }
  EXPECT_GE(listed, 25);
  // (--monitor is argparse's abbreviation of --monitor-interval.)
  EXPECT_THAT(Error(Parse({"--monitoring", "1", "w"})), HasSubstr("unknown flag --monitoring"));
}

TEST(RunOptionsTest, HangTimeout) {
  EXPECT_EQ(Parse({"w"})->hang_timeout, HangTimeout::Derived());
  EXPECT_EQ(Parse({"--hang-timeout", "2s", "w"})->hang_timeout,
            HangTimeout::After(absl::Seconds(2)));
  EXPECT_EQ(Parse({"--hang_timeout=90", "w"})->hang_timeout,
            HangTimeout::After(absl::Seconds(90)));
  EXPECT_TRUE(Parse({"--hang-timeout", "off", "w"})->hang_timeout.off());
  EXPECT_THAT(Error(Parse({"--hang-timeout", "later", "w"})),
              HasSubstr("--hang-timeout"));
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
