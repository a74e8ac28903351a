// Multi-host on one machine: three network namespaces ("hosts"), each with
// one veth link to a bridge in the root namespace where the service listens
// (with a token, as off-loopback it must). A daemon runs in each host; one
// host's link is cut mid-job, its lease expires, and the survivors re-form
// the job and finish it. Needs root (skipped with the reason otherwise).
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon_e2e_util.h"
#include "tests/testing/subprocess.h"

namespace elastrun::daemon_testing {
namespace {

constexpr int kHosts = 3;

std::string FindIp() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

class DaemonNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    ip_ = FindIp();
    if (ip_.empty()) GTEST_SKIP() << "no `ip` program (iproute2) to create namespaces";
    // Short names: interface names have at most 15 characters.
    prefix_ = absl::StrCat("er", getpid() % 100000);
    subnet_ = absl::StrCat("10.213.", getpid() % 250, ".");
    if (std::string out; !Ip({"link", "add", Bridge(), "type", "bridge"}, &out)) {
      GTEST_SKIP() << "cannot create a bridge here: " << out;
    }
    made_bridge_ = true;
    ASSERT_TRUE(Ip({"addr", "add", subnet_ + "254/24", "dev", Bridge()}));
    ASSERT_TRUE(Ip({"link", "set", Bridge(), "up"}));
    for (int i = 0; i < kHosts; ++i) {
      if (std::string out; !Ip({"netns", "add", Ns(i)}, &out)) {
        GTEST_SKIP() << "cannot create network namespaces here: " << out;
      }
      namespaces_.push_back(Ns(i));
      const std::string inner = absl::StrCat(prefix_, "b", i);
      ASSERT_TRUE(Ip({"link", "add", Outer(i), "type", "veth", "peer", "name", inner}));
      ASSERT_TRUE(Ip({"link", "set", inner, "netns", Ns(i)}));
      ASSERT_TRUE(Ip({"-n", Ns(i), "link", "set", inner, "name", "eth0"}));
      ASSERT_TRUE(Ip({"-n", Ns(i), "addr", "add", absl::StrCat(subnet_, i + 1, "/24"), "dev",
                      "eth0"}));
      ASSERT_TRUE(Ip({"-n", Ns(i), "link", "set", "eth0", "up"}));
      ASSERT_TRUE(Ip({"-n", Ns(i), "link", "set", "lo", "up"}));
      ASSERT_TRUE(Ip({"link", "set", Outer(i), "master", Bridge(), "up"}));
    }
    dir_ = testing::MakeTempDir("daemon_netns");
    cluster_ = std::make_unique<Cluster>(
        dir_, absl::StrCat("ELASTRUN_TEST_MARKER=netns-", getpid(), "-", dir_), "netns-token");
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService(subnet_ + "254:0"));
    for (int i = 0; i < kHosts; ++i) {
      ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon({ip_, "netns", "exec", Ns(i)}));
    }
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == kHosts; }))
        << "daemons did not register" << cluster_->DaemonOutput();
  }

  void TearDown() override {
    if (cluster_) cluster_->StopAll();
    // Deleting a veth end deletes its pair; the namespaces themselves may
    // linger in the kernel while sockets cut off by the test time out.
    for (size_t i = 0; i < namespaces_.size(); ++i) {
      Ip({"link", "del", Outer(static_cast<int>(i))});
      Ip({"netns", "del", namespaces_[i]});
    }
    if (made_bridge_) Ip({"link", "del", Bridge()});
  }

  // Runs `ip ARGS`; true on exit 0. Its output goes to `out` when given.
  bool Ip(const std::vector<std::string>& args, std::string* out = nullptr) {
    std::vector<std::string> argv = {ip_};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, {}, absl::Seconds(30));
    if (out != nullptr) *out = r.ok() ? r->output : std::string(r.status().message());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->exit_code == 0;
  }

  std::string Bridge() const { return prefix_ + "br"; }
  std::string Ns(int i) const { return absl::StrCat(prefix_, "n", i); }
  std::string Outer(int i) const { return absl::StrCat(prefix_, "a", i); }

  std::string ip_, prefix_, subnet_, dir_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(DaemonNetnsTest, CutLinkSurvivorsReformAndFinish) {
  const std::string ready = testing::MakeTempDir("daemon_netns_ready");
  v1::JobSpec spec = Spec("netns", 2, 3, 1, 3);
  (*spec.mutable_env())["GLOO_SOCKET_IFNAME"] = "eth0";
  const std::string job =
      cluster_->Submit(spec, {"--steps", "100", "--step-ms", "50", "--ready-dir", ready});
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", kHosts, kDeadline).ok())
      << cluster_->DaemonOutput();
  v1::JobStatus running = cluster_->Get(job);
  EXPECT_EQ(running.world_size(), 3);
  // Host 2 drops off the network: no RST, no FIN; only its lease tells.
  ASSERT_TRUE(Ip({"link", "set", Outer(2), "down"}));
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString()
                                                 << cluster_->DaemonOutput();
  EXPECT_EQ(st.world_size(), 2);
  EXPECT_THAT(st.history(0).end_reason(), ::testing::AnyOf("node lost", "failure"));
  const v1::Assignment& last = st.history(st.history_size() - 1).assignment();
  for (const v1::NodeAssignment& n : last.nodes()) EXPECT_NE(n.node_id(), "node2");
  // Each host advertised its own address: MASTER_ADDR is on the subnet.
  EXPECT_EQ(last.master_addr().rfind(subnet_, 0), 0u) << last.master_addr();
}

}  // namespace
}  // namespace elastrun::daemon_testing
