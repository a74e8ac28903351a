// torchrun's multi-node form of the real `elastrun run`: three processes
// running the same command, on loopback and in three network namespaces
// (skipped with a message where namespaces cannot be made: needs root and
// iproute2). Shell workers leave one file per (world size, rank) and per
// (restart count, rank) in the test's folder; the test waits on those files
// (inotify, generous deadlines), never on sleeps. One test runs an unchanged
// torchrun script with torch's gloo (skipped without python3-torch).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/certs.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Subprocess;

constexpr absl::Duration kDeadline = absl::Seconds(60);
constexpr int kNodes = 3;

// Each worker: says who it is, leaves its files, then (unless FAIL_RANK
// says it fails in restart 0) waits for $MARK/go and exits 0.
constexpr char kWorker[] =
    "echo \"RANK=$RANK WORLD_SIZE=$WORLD_SIZE RESTART=$TORCHELASTIC_RESTART_COUNT\"; "
    "touch \"$MARK/w$WORLD_SIZE-r$RANK\" \"$MARK/c$TORCHELASTIC_RESTART_COUNT-r$RANK\"; "
    "if [ \"$RANK\" = \"$FAIL_RANK\" ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
    "exit 7; fi; "
    "while [ ! -e \"$MARK/go\" ]; do sleep 0.05; done";

bool Sh(const std::vector<std::string>& argv) {
  auto r = testing::Run(argv, {}, absl::Seconds(30));
  return r.ok() && r->exit_code == 0;
}

// Where the nodes run: all on loopback, or each in a network namespace of
// its own joined by a bridge (node 0's address is then the endpoint).
enum class Net { kLoopback, kNamespaces };

class MultinodeRunTest : public ::testing::TestWithParam<Net> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("run-multinode");
    mark_ = dir_ + "/mark";
    ASSERT_EQ(mkdir(mark_.c_str(), 0755), 0);
    token_file_ = testing::WriteOwnerOnlyFile(dir_ + "/token",
                                              absl::StrCat("t0ken-", getpid(), "\n"));
    ASSERT_FALSE(token_file_.empty());
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=run-multinode-", getpid(), "-", dir_);
    const int port = testing::FreeLoopbackPort();
    ASSERT_GT(port, 0);
    if (GetParam() == Net::kLoopback) {
      endpoint_ = absl::StrCat("127.0.0.1:", port);
      return;
    }
    MakeNamespaces();
    if (IsSkipped() || HasFatalFailure()) return;
    endpoint_ = absl::StrCat(Addr(0), ":", port);
  }

  void MakeNamespaces() {
    id_ = absl::StrCat(getpid() % 100000);
    const std::string subnet = absl::StrCat("10.214.", getpid() % 200 + 20);
    subnet_ = subnet;
    bridge_ = "elmbr" + id_;
    if (!Sh({"ip", "link", "add", bridge_, "type", "bridge"})) {
      GTEST_SKIP() << "cannot create network devices here (needs root, CAP_NET_ADMIN and "
                      "iproute2): the network-namespace variant is skipped";
    }
    made_bridge_ = true;
    ASSERT_TRUE(Sh({"ip", "link", "set", bridge_, "up"}));
    for (int h = 0; h < kNodes; ++h) {
      const std::string ns = Ns(h), outer = absl::StrCat("elm", id_, "o", h),
                        inner = Inner(h);
      ASSERT_TRUE(Sh({"ip", "netns", "add", ns}));
      namespaces_.push_back(ns);
      ASSERT_TRUE(
          Sh({"ip", "link", "add", outer, "type", "veth", "peer", "name", inner}));
      ASSERT_TRUE(Sh({"ip", "link", "set", inner, "netns", ns}));
      ASSERT_TRUE(Sh({"ip", "link", "set", outer, "master", bridge_}));
      ASSERT_TRUE(Sh({"ip", "link", "set", outer, "up"}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "addr", "add", Addr(h) + "/24",
                      "dev", inner}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"}));
    }
  }

  void TearDown() override {
    nodes_.clear();  // SIGKILLs each node's process group
    for (pid_t pid : testing::ProcessesWithEnv(marker_)) kill(pid, SIGKILL);
    for (const std::string& ns : namespaces_) Sh({"ip", "netns", "del", ns});
    if (made_bridge_) Sh({"ip", "link", "del", bridge_});
  }

  std::string Ns(int h) const { return absl::StrCat("elm", id_, "h", h); }
  std::string Inner(int h) const { return absl::StrCat("elm", id_, "i", h); }
  std::string Addr(int h) const { return absl::StrCat(subnet_, ".", 10 + h); }

  // Starts node `h`: `elastrun run FLAGS... PROGRAM` (default: --no-python
  // /bin/sh -c WORKER), in its namespace for kNamespaces. `flags` come after
  // the common ones.
  void StartNode(int h, std::vector<std::string> flags, std::vector<std::string> env = {},
                 std::vector<std::string> program = {"--no-python", "/bin/sh", "-c",
                                                     kWorker}) {
    std::vector<std::string> argv;
    if (GetParam() == Net::kNamespaces) argv = {"ip", "netns", "exec", Ns(h)};
    argv.insert(argv.end(), {BinDir() + "/elastrun", "run", "--log-dir",
                             absl::StrCat(dir_, "/logs-", h), "--shutdown-timeout", "2"});
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), program.begin(), program.end());
    env.insert(env.end(), {marker_, "MARK=" + mark_});
    auto node = Subprocess::Start(argv, env);
    ASSERT_TRUE(node.ok()) << node.status();
    nodes_.push_back(*std::move(node));
  }

  // The flags of the multi-node form: nnodes, 2 workers, the endpoint, the
  // run id and the rendezvous settings `conf` (the token file's added).
  std::vector<std::string> Flags(const std::string& nnodes, const std::string& conf) {
    return {"--nnodes",
            nnodes,
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint_,
            "--rdzv-id",
            "mn1",
            "--rdzv-conf",
            absl::StrCat("token_file=", token_file_, conf.empty() ? "" : ",", conf)};
  }

  // Node 0 hosts (is_host=1), the others do not. `conf` is added to
  // --rdzv-conf, `more` to the flags.
  void StartThree(const std::string& nnodes, const std::string& conf = "",
                  const std::vector<std::string>& env = {},
                  const std::vector<std::string>& more = {}) {
    for (int h = 0; h < kNodes; ++h) {
      std::vector<std::string> flags =
          Flags(nnodes, absl::StrCat(h == 0 ? "is_host=1" : "is_host=0", conf));
      flags.insert(flags.end(), more.begin(), more.end());
      StartNode(h, flags, env);
    }
  }

  void WaitFiles(const std::string& prefix, size_t count) {
    auto files = testing::WaitForFiles(mark_, prefix, count, kDeadline);
    ASSERT_TRUE(files.ok()) << files.status() << "\n" << AllOutput();
  }

  void Go() { std::ofstream(mark_ + "/go") << "go\n"; }

  // Waits for node h's exit; its code.
  int ExitOf(int h) {
    auto st = nodes_[h]->Wait(kDeadline);
    EXPECT_TRUE(st.ok()) << st.status() << "\n" << AllOutput();
    return nodes_[h]->exit_code().value_or(-1);
  }

  std::string AllOutput() const {
    std::string out;
    for (size_t h = 0; h < nodes_.size(); ++h) {
      out += absl::StrCat("--- node ", h, " ---\n", nodes_[h]->Output());
    }
    return out;
  }

  // The ranks node h's workers printed (with the [rankN]: prefix).
  static std::set<int> RanksIn(const std::string& output) {
    std::set<int> ranks;
    static const std::regex line(R"(\[rank(\d+)\]:RANK=(\d+) )");
    for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end;
         ++it) {
      EXPECT_EQ((*it)[1], (*it)[2]);  // the prefix names the worker's own rank
      ranks.insert(std::stoi((*it)[2]));
    }
    return ranks;
  }

  std::string dir_, mark_, token_file_, marker_, endpoint_;
  std::string id_, subnet_, bridge_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

TEST_P(MultinodeRunTest, ThreeNodesSucceedWithDistinctRanks) {
  Go();
  // No is_host: the endpoint's node hosts (on loopback: the first to bind).
  // The token from $ELASTRUN_TOKEN_FILE; one node spells its flags with
  // argparse's abbreviations.
  const std::vector<std::string> env = {"ELASTRUN_TOKEN_FILE=" + token_file_};
  StartNode(0,
            {"--nnodes", "3", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", endpoint_, "--rdzv-id", "mn1"},
            env);
  StartNode(1,
            {"--nn", "3", "--nproc_per", "2", "--rdzv_b", "c10d", "--rdzv_e", endpoint_,
             "--rdzv-i", "mn1"},
            env);
  StartNode(2,
            {"--nnodes=3", "--nproc_per_node=2", "--rdzv_endpoint=" + endpoint_,
             "--rdzv_id=mn1"},
            env);
  std::set<int> ranks;
  int hosts = 0;
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_EQ(ExitOf(h), 0) << AllOutput();
    const std::string out = nodes_[h]->Output();
    const std::set<int> mine = RanksIn(out);
    EXPECT_EQ(mine.size(), 2u) << out;
    for (int r : mine) EXPECT_TRUE(ranks.insert(r).second) << "rank " << r << " twice";
    EXPECT_THAT(out, HasSubstr("WORLD_SIZE=6 RESTART=0"));
    EXPECT_THAT(out, HasSubstr("run mn1 succeeded"));
    if (out.find("rendezvous hosted here") != std::string::npos) ++hosts;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(hosts, 1) << AllOutput();
  if (GetParam() == Net::kNamespaces) {
    EXPECT_THAT(nodes_[0]->Output(), HasSubstr("rendezvous hosted here"));
  }
}

TEST_P(MultinodeRunTest, KilledNodeLeavesTheOthersToReform) {
  StartThree("2:3");
  WaitFiles("w6-", 6);
  nodes_[2]->Signal(SIGKILL);
  // The two left re-form in a new round, with a world of 4.
  WaitFiles("w4-", 4);
  Go();
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(ExitOf(h), 0) << AllOutput();
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("WORLD_SIZE=6"));
    EXPECT_THAT(out, HasSubstr("WORLD_SIZE=4"));
    EXPECT_THAT(out, HasSubstr("of 3 node(s)"));
    EXPECT_THAT(out, HasSubstr("of 2 node(s)"));
    EXPECT_THAT(out, HasSubstr("of world size 4"));
    EXPECT_THAT(out, HasSubstr("run mn1 succeeded"));
  }
}

TEST_P(MultinodeRunTest, WorkerFailureRestartsEveryNode) {
  Go();
  StartThree("3", "", {"FAIL_RANK=3"}, {"--max-restarts", "1"});
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_EQ(ExitOf(h), 0) << AllOutput();
  }
  const std::string names = absl::StrJoin(testing::ListFiles(mark_, "c1-"), " ");
  EXPECT_EQ(names, "c1-r0 c1-r1 c1-r2 c1-r3 c1-r4 c1-r5");
  for (int h = 0; h < kNodes; ++h) {
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("RESTART=1"));
    EXPECT_THAT(out, HasSubstr("run mn1 succeeded after 1 restart(s)"));
  }
}

TEST_P(MultinodeRunTest, FailurePastMaxRestartsNamesTheRootCauseOnEveryNode) {
  Go();
  StartThree("3", "", {"FAIL_RANK=3"});
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_EQ(ExitOf(h), 7) << AllOutput();
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("run mn1 failed: "));
    // The block `elastrun run` prints on one node (torchrun's layout).
    EXPECT_THAT(out, HasSubstr("Root cause (first observed failure):\n"));
    EXPECT_THAT(out, HasSubstr("  rank       : 3 (local_rank: 1)\n"));
    EXPECT_THAT(out, HasSubstr("  exit       : exit code 7\n"));
    EXPECT_THAT(out, HasSubstr("/attempt_0/1/\n"));
  }
}

TEST_P(MultinodeRunTest, LostHostEndsTheOthersWithAnError) {
  StartThree("2:3");  // the default keep-alive: lost after 3 s
  WaitFiles("w6-", 6);
  nodes_[0]->Signal(SIGKILL);
  for (int h = 1; h < kNodes; ++h) {
    EXPECT_EQ(ExitOf(h), 1) << AllOutput();
    EXPECT_THAT(nodes_[h]->Output(),
                HasSubstr(absl::StrCat("lost the rendezvous host ", endpoint_)));
  }
  // Their workers are gone with them.
  EXPECT_TRUE(testing::ProcessesWithEnv("MARK=" + mark_).empty());
}

TEST_P(MultinodeRunTest, JoinTimeoutEndsARunShortOfItsNodesNamingTheCount) {
  // --nnodes 3 and two nodes come: after join_timeout both stop, saying so.
  Go();
  for (int h = 0; h < 2; ++h)
    StartNode(
        h, Flags("3", h == 0 ? "is_host=1,join_timeout=2" : "is_host=0,join_timeout=2"));
  for (int h = 0; h < 2; ++h) {
    EXPECT_NE(ExitOf(h), 0) << AllOutput();
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("run mn1 cancelled: "));
    EXPECT_THAT(out, HasSubstr("rendezvous timed out: only 2 of min_nodes=3 nodes joined "
                               "within join_timeout=2s"));
  }
  // No worker ever started.
  EXPECT_TRUE(testing::ProcessesWithEnv("MARK=" + mark_).empty());
  for (const auto& entry : std::filesystem::directory_iterator(mark_)) {
    EXPECT_NE(entry.path().filename().string()[0], 'w') << entry.path();
  }
}

TEST_P(MultinodeRunTest, StaticBackendGivesNodeRankAsGroupRank) {
  Go();
  const std::string addr = GetParam() == Net::kLoopback ? "127.0.0.1" : Addr(0);
  const std::string port = endpoint_.substr(endpoint_.rfind(':') + 1);
  // Started last rank first: the ranks follow --node-rank, not the order.
  for (int h : {2, 0, 1}) {
    StartNode(h,
              {"--nnodes", "3", "--nproc-per-node", "2", "--rdzv-backend", "static",
               "--node-rank", std::to_string(h), "--master-addr", addr, "--master-port",
               port, "--rdzv-id", "st1", "--rdzv-conf", "token_file=" + token_file_});
  }
  // nodes_ is in start order: node rank 2, 0, 1.
  const int node_rank[] = {2, 0, 1};
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(ExitOf(i), 0) << AllOutput();
    const int r = node_rank[i];
    EXPECT_EQ(RanksIn(nodes_[i]->Output()), (std::set<int>{2 * r, 2 * r + 1}))
        << AllOutput();
    EXPECT_THAT(nodes_[i]->Output(), HasSubstr(absl::StrCat("group rank ", r, " of 3")));
  }
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("rendezvous hosted here"));
}

TEST_P(MultinodeRunTest, NodesOfAnotherRunOrShapeAreRefused) {
  StartNode(0, Flags("2", "is_host=1"));
  // Another run id on the same endpoint (and token).
  std::vector<std::string> other = Flags("2", "is_host=0");
  other[9] = "mn2";  // --rdzv-id's value
  StartNode(1, other);
  EXPECT_EQ(ExitOf(1), 1) << AllOutput();
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("hosts run mn1, not mn2"));
  // The same run, but another --nproc-per-node.
  std::vector<std::string> shape = Flags("2", "is_host=0");
  shape[3] = "1";  // --nproc-per-node's value
  StartNode(2, shape);
  EXPECT_EQ(ExitOf(2), 1) << AllOutput();
  EXPECT_THAT(nodes_[2]->Output(),
              HasSubstr("--nproc-per-node 2 at its host, this node 2:2 "
                        "and 1: every node must give the same"));
}

// An unchanged torchrun script: c10d's store at MASTER_ADDR:MASTER_PORT on
// rank 0's node, gloo across the nodes. Skipped without Debian's torch.
TEST_P(MultinodeRunTest, TorchScriptAllReducesAcrossNodes) {
  const std::string python = testing::TorchPython();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (python3-torch): skipped";
  const std::string script = dir_ + "/allreduce.py";
  std::ofstream(script)
      << "import torch, torch.distributed as dist\n"
         "dist.init_process_group('gloo')\n"
         "t = torch.tensor([float(dist.get_rank() + 1)])\n"
         "dist.all_reduce(t)\n"
         "print(f'rank {dist.get_rank()} of {dist.get_world_size()} sum "
         "{t.item()}', flush=True)\n"
         "dist.destroy_process_group()\n";
  for (int h = 0; h < kNodes; ++h) {
    std::vector<std::string> env = {"ELASTRUN_PYTHON=" + python};
    if (GetParam() == Net::kNamespaces) env.push_back("GLOO_SOCKET_IFNAME=" + Inner(h));
    StartNode(h, Flags("3", h == 0 ? "is_host=1" : "is_host=0"), env, {script});
  }
  for (int h = 0; h < kNodes; ++h) {
    EXPECT_EQ(ExitOf(h), 0) << AllOutput();
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("of 6 sum 21.0"));  // 1+2+...+6 over every rank
  }
}

// --rdzv-backend elastrun: a real elastrun-rendezvous started here, no node
// hosting anything. On loopback only (the service runs outside the
// namespaces).
class ServiceRunTest : public MultinodeRunTest {
 protected:
  void StartService(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinDir() + "/elastrun-rendezvous", "--listen",
                                     endpoint_, "--token-file", token_file_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto service = Subprocess::Start(argv, {marker_});
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    const absl::Time deadline = absl::Now() + kDeadline;
    while (service_->Output().find("listening on") == std::string::npos) {
      ASSERT_LT(absl::Now(), deadline) << service_->Output();
      ASSERT_FALSE(service_->exit_code().has_value()) << service_->Output();
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  void TearDown() override {
    MultinodeRunTest::TearDown();
    service_.reset();  // SIGKILLs it
  }
  // The flags of a run at the service: `nnodes`, 2 workers, id `id`.
  std::vector<std::string> ServiceFlags(const std::string& nnodes,
                                        const std::string& id) {
    return {
        "--nnodes",       nnodes,     "--nproc-per-node", "2",
        "--rdzv-backend", "elastrun", "--rdzv-endpoint",  endpoint_,
        "--rdzv-id",      id,         "--rdzv-conf",      "token_file=" + token_file_};
  }
  std::unique_ptr<Subprocess> service_;
};

TEST_P(ServiceRunTest, TwoRunsAtARunningServiceEachOnItsOwnNodes) {
  ASSERT_NO_FATAL_FAILURE(StartService());
  // Run a on two nodes (a world of 4), run b on one (2), at once, at one
  // service: no node hosts, nothing crosses between the runs.
  StartNode(0, ServiceFlags("2", "a"));
  StartNode(1, ServiceFlags("2", "a"));
  StartNode(2, ServiceFlags("1", "b"));
  WaitFiles("w4-", 4);
  WaitFiles("w2-", 2);
  Go();
  std::set<int> ranks;
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(ExitOf(h), 0) << AllOutput();
    const std::string out = nodes_[h]->Output();
    EXPECT_THAT(out, HasSubstr("rendezvous service at " + endpoint_));
    EXPECT_THAT(out, HasSubstr("run a succeeded"));
    EXPECT_THAT(out, Not(HasSubstr("WORLD_SIZE=2 ")));
    for (int r : RanksIn(out))
      EXPECT_TRUE(ranks.insert(r).second) << "rank " << r << " twice";
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << AllOutput();
  EXPECT_EQ(ExitOf(2), 0) << AllOutput();
  EXPECT_EQ(RanksIn(nodes_[2]->Output()), (std::set<int>{0, 1}));
  EXPECT_THAT(nodes_[2]->Output(), Not(HasSubstr("WORLD_SIZE=4 ")));
  EXPECT_THAT(nodes_[2]->Output(), HasSubstr("run b succeeded"));
  // Each run is one job there, though every node of a submitted it.
  auto list = testing::Run({BinDir() + "/elastrun", "list", "--rendezvous", endpoint_},
                           {"ELASTRUN_TOKEN_FILE=" + token_file_});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->exit_code, 0) << list->output;
  const std::string jobs = list->output;
  EXPECT_EQ(std::count(jobs.begin(), jobs.end(), '\n'), 3)
      << jobs;  // a header and 2 jobs
  // Ids are "<name>-<n>", numbered in the order the runs were submitted.
  EXPECT_TRUE(std::regex_search(jobs, std::regex("\\ba-[12] "))) << jobs;
  EXPECT_TRUE(std::regex_search(jobs, std::regex("\\bb-[12] "))) << jobs;
  // A run id the service has seen end is not run again.
  StartNode(3, ServiceFlags("1", "b"));
  EXPECT_EQ(ExitOf(3), 1) << AllOutput();
  EXPECT_TRUE(std::regex_search(
      nodes_[3]->Output(),
      std::regex(
          "run b already ended at the rendezvous service \\(succeeded, job b-[12]\\): "
          "give each run its own --rdzv-id")))
      << AllOutput();
}

TEST_P(ServiceRunTest, ANodeWithoutTheServicesTokenIsRefusedClearly) {
  ASSERT_NO_FATAL_FAILURE(StartService());
  std::vector<std::string> flags = ServiceFlags("1", "c");
  flags.back() = "token_file=" + testing::WriteOwnerOnlyFile(dir_ + "/wrong", "wrong\n");
  StartNode(0, flags);
  EXPECT_EQ(ExitOf(0), 1) << AllOutput();
  EXPECT_THAT(nodes_[0]->Output(), HasSubstr("refused this node"));
  // No token at all: a usage error before anything starts.
  flags.pop_back();
  flags.pop_back();
  StartNode(1, flags);
  EXPECT_EQ(ExitOf(1), 2) << AllOutput();
  EXPECT_THAT(nodes_[1]->Output(),
              HasSubstr("--rdzv-backend elastrun needs the service's token"));
}

TEST_P(ServiceRunTest, ARunReachesAServiceWithMutualTlsByTheClisVariables) {
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_);
  if (!pki.ok()) GTEST_SKIP() << pki.status().message();
  ASSERT_NO_FATAL_FAILURE(StartService({"--tls-cert", pki->server_cert, "--tls-key",
                                        pki->server_key, "--tls-ca", pki->ca_cert}));
  Go();
  StartNode(0, ServiceFlags("1", "tls"),
            {"ELASTRUN_TLS_CA=" + pki->ca_cert, "ELASTRUN_TLS_CERT=" + pki->client_cert,
             "ELASTRUN_TLS_KEY=" + pki->client_key});
  EXPECT_EQ(ExitOf(0), 0) << AllOutput();
  EXPECT_THAT(nodes_[0]->Output(), HasSubstr("run tls succeeded"));
  // Without them: refused, saying that the service speaks TLS.
  StartNode(1, ServiceFlags("1", "plain"));
  EXPECT_EQ(ExitOf(1), 1) << AllOutput();
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("speaks TLS"));
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("ELASTRUN_TLS_CA"));
  // A bad file: a usage error naming it, before anything starts.
  StartNode(2, ServiceFlags("1", "bad"), {"ELASTRUN_TLS_CA=" + dir_ + "/missing.pem"});
  EXPECT_EQ(ExitOf(2), 2) << AllOutput();
  EXPECT_THAT(nodes_[2]->Output(),
              HasSubstr("$ELASTRUN_TLS_CA " + dir_ + "/missing.pem"));
}

INSTANTIATE_TEST_SUITE_P(Nets, ServiceRunTest, ::testing::Values(Net::kLoopback),
                         [](const ::testing::TestParamInfo<Net>&) { return "Loopback"; });

INSTANTIATE_TEST_SUITE_P(Nets, MultinodeRunTest,
                         ::testing::Values(Net::kLoopback, Net::kNamespaces),
                         [](const ::testing::TestParamInfo<Net>& info) {
                           return info.param == Net::kLoopback ? "Loopback"
                                                               : "Namespaces";
                         });

}  // namespace
}  // namespace elastrun
