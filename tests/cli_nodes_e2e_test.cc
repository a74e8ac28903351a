// End to end: `elastrun nodes drain|remove` against the real
// elastrun-rendezvous and two real elastrund with shell workers. A drained
// node takes no new job while the job running on it goes on, and takes
// jobs again once undrained; a node that a job holds is not removed
// without --force; a removed node whose daemon still runs comes back as a
// fresh, undrained node.
#include <signal.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::ClusterTest;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using ::testing::HasSubstr;

class CliNodesE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    MakeCluster("cli_nodes_e2e");
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());  // node0, 2 slots
    ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());  // node1, 2 slots
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 2; }))
        << cluster_->DaemonOutput();
  }

  // `elastrun ARGS` against the service; stdout and stderr together.
  testing::RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), testing::BinDir() + "/elastrun");
    absl::StatusOr<testing::RunResult> r =
        testing::Run(args,
                     {"ELASTRUN_RENDEZVOUS=" + cluster_->address(),
                      "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()},
                     kDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }
  // A one-node job of two workers that sleep; its id.
  std::string SubmitSleeper(const std::string& name, bool wait_for_nodes = false) {
    std::vector<std::string> args = {"submit", "--name", name, "--nproc-per-node", "2"};
    if (wait_for_nodes) args.push_back("--wait-for-nodes");
    args.insert(args.end(), {"--", "/bin/sh", "-c", "exec sleep 600"});
    testing::RunResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::string(absl::StripTrailingAsciiWhitespace(r.output));
  }
  // Waits until `job` runs; returns the node it runs on.
  std::string RunsOn(const std::string& job) {
    v1::JobStatus st;
    EXPECT_TRUE(PollUntil([&] {
      st = cluster_->Get(job);
      return st.phase() == v1::ROUND_PHASE_RUNNING && st.nodes_size() == 1;
    })) << st.DebugString()
        << cluster_->DaemonOutput();
    return st.nodes_size() == 1 ? st.nodes(0).node_id() : "";
  }
};

TEST_F(CliNodesE2eTest, DrainKeepsNewJobsOffRemoveForgetsAndTheDaemonComesBackFresh) {
  testing::RunResult r = Cli({"nodes", "drain", "node0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "node node0 draining\n");
  EXPECT_THAT(Cli({"nodes"}).output, HasSubstr("ALIVE (draining)"));

  // Placed on node1 although node0 is listed first and as free.
  const std::string first = SubmitSleeper("first");
  EXPECT_EQ(RunsOn(first), "node1");

  // Both drained: a new job waits; undrained node0 takes it while the
  // job on drained node1 goes on.
  ASSERT_EQ(Cli({"nodes", "drain", "node1"}).exit_code, 0);
  const std::string second = SubmitSleeper("second", /*wait_for_nodes=*/true);
  EXPECT_EQ(cluster_->Get(second).phase(), v1::ROUND_PHASE_QUEUED);
  r = Cli({"nodes", "drain", "node0", "--undo"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(RunsOn(second), "node0");
  EXPECT_EQ(cluster_->Get(first).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(cluster_->Get(first).round(), 0);

  // A node that a job holds: refused, naming the job; then forced.
  r = Cli({"nodes", "remove", "node1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(first));
  EXPECT_THAT(r.output, HasSubstr("--force"));
  r = Cli({"nodes", "remove", "node1", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "node node1 removed\n");
  EXPECT_EQ(Cli({"nodes", "remove", "nope"}).exit_code, 4);

  // node1's daemon still runs: it is told the node is unknown and registers
  // again, a fresh node: alive, not draining, holding no job.
  nlohmann::json node1;
  EXPECT_TRUE(PollUntil([&] {
    testing::RunResult list = Cli({"nodes", "--output", "json"});
    nlohmann::json j = nlohmann::json::parse(list.output, nullptr, false);
    if (j.is_discarded()) return false;
    for (const auto& n : j["nodes"]) {
      if (n["node_id"] == "node1" && n["state"] == "ALIVE") node1 = n;
    }
    return !node1.is_null();
  })) << cluster_->DaemonOutput();
  EXPECT_EQ(node1["draining"], false);
  // The first job lost node1 (not counted as a restart) and re-forms on it.
  EXPECT_EQ(cluster_->Get(first).restarts(), 0);
  EXPECT_GE(cluster_->Get(first).round(), 1);

  for (const std::string& job : {first, second}) {
    EXPECT_EQ(Cli({"cancel", job}).exit_code, 0);
    cluster_->WaitFinished(job);
  }
}

// A third daemon in pool "gpu": jobs submitted with --pool gpu run there
// alone, jobs without one never do; `nodes` and `status` say which pool.
TEST_F(CliNodesE2eTest, APoolsJobsRunOnItsNodesAloneAndOthersNeverThere) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon({}, {"--pool", "gpu"}));  // node2
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 3; }))
      << cluster_->DaemonOutput();
  EXPECT_THAT(Cli({"nodes"}).output, HasSubstr("ALIVE (pool gpu)"));

  testing::RunResult r =
      Cli({"submit", "--name", "trained", "--pool", "gpu", "--nproc-per-node", "2", "--",
           "/bin/sh", "-c", "exec sleep 600"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string pooled(absl::StripTrailingAsciiWhitespace(r.output));
  EXPECT_EQ(RunsOn(pooled), "node2");
  EXPECT_THAT(Cli({"status", pooled}).output, HasSubstr("pool:        gpu\n"));
  // node2 is full now, but a job of the default pool would not go there
  // anyway: two such jobs take node0 and node1, a third waits.
  const std::string a = SubmitSleeper("a");
  const std::string b = SubmitSleeper("b");
  EXPECT_NE(RunsOn(a), "node2");
  EXPECT_NE(RunsOn(b), "node2");
  // A pool no node serves: refused, naming it (or queued with
  // --wait-for-nodes).
  r = Cli({"submit", "--pool", "tpu", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("in pool tpu; registered there: none alive"));
  // A bad pool name is the CLI's usage error.
  r = Cli({"submit", "--pool", "a b", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--pool"));
  for (const std::string& job : {pooled, a, b}) {
    EXPECT_EQ(Cli({"cancel", job}).exit_code, 0);
    cluster_->WaitFinished(job);
  }
}

}  // namespace
}  // namespace elastrun
