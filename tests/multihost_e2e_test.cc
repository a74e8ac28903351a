// A multi-host test on one machine: three hosts as network namespaces joined
// by veth pairs to a bridge, the service on the bridge (so it requires a
// token), one elastrund in each namespace. One host's link is cut mid-job;
// the survivors must re-form and finish. Needs root (CAP_NET_ADMIN) and
// iproute2; skipped with a message where namespaces cannot be made.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using testing::BinDir;
using testing::ProcessesWithEnv;
using testing::Subprocess;

constexpr absl::Duration kDeadline = absl::Seconds(120);
constexpr int kHosts = 3;

// Runs a command that must succeed (network set-up).
bool Sh(const std::vector<std::string>& argv, std::string* output = nullptr) {
  auto r = testing::Run(argv, {}, absl::Seconds(30));
  if (output != nullptr && r.ok()) *output = r->output;
  return r.ok() && r->exit_code == 0;
}

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Names unique per test process (interface names: at most 15 bytes).
    id_ = absl::StrCat(getpid() % 100000);
    subnet_ = absl::StrCat("10.213.", getpid() % 200 + 20);
    bridge_ = "elrbr" + id_;
    if (!Sh({"ip", "link", "add", bridge_, "type", "bridge"})) {
      GTEST_SKIP() << "cannot create network devices here (needs root and CAP_NET_ADMIN); "
                      "the multi-host test is skipped";
    }
    made_bridge_ = true;
    ASSERT_TRUE(Sh({"ip", "addr", "add", subnet_ + ".1/24", "dev", bridge_}));
    ASSERT_TRUE(Sh({"ip", "link", "set", bridge_, "up"}));
    for (int h = 0; h < kHosts; ++h) {
      const std::string ns = Ns(h), outer = Outer(h), inner = Inner(h);
      ASSERT_TRUE(Sh({"ip", "netns", "add", ns}));
      namespaces_.push_back(ns);
      ASSERT_TRUE(Sh({"ip", "link", "add", outer, "type", "veth", "peer", "name", inner}));
      ASSERT_TRUE(Sh({"ip", "link", "set", inner, "netns", ns}));
      ASSERT_TRUE(Sh({"ip", "link", "set", outer, "master", bridge_}));
      ASSERT_TRUE(Sh({"ip", "link", "set", outer, "up"}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "addr", "add", Addr(h) + "/24", "dev",
                      inner}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"}));
      ASSERT_TRUE(Sh({"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"}));
    }
    dir_ = testing::MakeTempDir("multihost");
    // Owner-only: a token file open to others is refused.
    token_file_ = testing::WriteOwnerOnlyFile(dir_ + "/token", absl::StrCat("s3cret-", id_, "\n"));
    ASSERT_FALSE(token_file_.empty());
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=multihost-", getpid(), "-", dir_);
  }

  void TearDown() override {
    daemons_.clear();  // SIGKILLs each daemon's process group
    service_.reset();
    // Workers cut off from their daemon's group by nothing: kill what is
    // left by pid (tagged with our marker), then take the network down.
    for (pid_t pid : ProcessesWithEnv(marker_)) kill(pid, SIGKILL);
    for (const std::string& ns : namespaces_) Sh({"ip", "netns", "del", ns});
    if (made_bridge_) Sh({"ip", "link", "del", bridge_});
  }

  std::string Ns(int h) const { return absl::StrCat("elr", id_, "h", h); }
  std::string Outer(int h) const { return absl::StrCat("elr", id_, "o", h); }
  std::string Inner(int h) const { return absl::StrCat("elr", id_, "i", h); }
  std::string Addr(int h) const { return absl::StrCat(subnet_, ".", 10 + h); }

  void StartService() {
    auto s = Subprocess::Start(
        {BinDir() + "/elastrun-rendezvous", "--listen", subnet_ + ".1:0", "--insecure",
         "--token-file", token_file_, "--state-dir", dir_ + "/state"},
        {marker_});
    ASSERT_TRUE(s.ok()) << s.status();
    service_ = *std::move(s);
    // The service prints "listening on HOST:PORT" once it serves.
    const absl::Time deadline = absl::Now() + kDeadline;
    while (address_.empty() && absl::Now() < deadline) {
      const std::string out = service_->Output();
      if (size_t at = out.find("listening on "); at != std::string::npos) {
        size_t end = out.find('\n', at);
        if (end != std::string::npos) address_ = out.substr(at + 13, end - at - 13);
      }
      if (address_.empty()) absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_FALSE(address_.empty()) << service_->Output();
  }

  void StartDaemon(int h) {
    auto d = Subprocess::Start(
        {"ip", "netns", "exec", Ns(h), BinDir() + "/elastrund", "--rendezvous", address_,
         "--node-id", absl::StrCat("host", h), "--slots", "1", "--advertise-addr", Addr(h),
         "--token-file", token_file_, "--state-dir", absl::StrCat(dir_, "/state-", h),
         "--log-dir", absl::StrCat(dir_, "/logs-", h),
         "--cred-socket", absl::StrCat(dir_, "/cred-", h, ".sock"),
         "--shutdown-timeout", "2"},
        {marker_, "GLOO_SOCKET_IFNAME=" + Inner(h)});
    ASSERT_TRUE(d.ok()) << d.status();
    daemons_.push_back(*std::move(d));
  }

  // `elastrun COMMAND --rendezvous ... --token-file ... ARGS` (service flags
  // first: after "--" everything belongs to the program).
  testing::RunResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/elastrun", args[0], "--rendezvous",
                                     address_, "--token-file", token_file_};
    argv.insert(argv.end(), args.begin() + 1, args.end());
    auto r = testing::Run(argv, {marker_}, kDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  std::string id_, subnet_, bridge_, dir_, token_file_, marker_, address_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
  std::unique_ptr<Subprocess> service_;
  std::vector<std::unique_ptr<Subprocess>> daemons_;
};

TEST_F(MultiHostTest, CutLinkSurvivorsReform) {
  StartService();
  for (int h = 0; h < kHosts; ++h) StartDaemon(h);
  const std::string ready = testing::MakeTempDir("multihost-ready");

  // Without the token the service refuses.
  auto refused = testing::Run({BinDir() + "/elastrun", "list", "--rendezvous", address_},
                              {marker_}, kDeadline);
  ASSERT_TRUE(refused.ok());
  EXPECT_NE(refused->exit_code, 0) << refused->output;

  // The daemons may still be registering: the job waits for them.
  testing::RunResult submit =
      Cli({"submit", "--name", "mh", "--nnodes", "2:3", "--nproc-per-node", "1",
           "--wait-for-nodes", "--export", "NONE", "--working-dir", "", "--",
           BinDir() + "/elastrun-test-worker", "--steps", "40", "--step-ms", "50",
           "--ready-dir", ready});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  const std::string job(absl::StripAsciiWhitespace(submit.output));

  // All three hosts past their first collective, across namespaces.
  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.0.", 3, kDeadline).ok())
      << Cli({"status", job}).output;

  // Cut host 2 off the network: its daemon's lease expires, the service
  // ends the round and the two survivors re-form and finish.
  ASSERT_TRUE(Sh({"ip", "link", "set", Outer(2), "down"}));
  testing::RunResult waited = Cli({"wait", job});
  EXPECT_EQ(waited.exit_code, 0) << waited.output << Cli({"status", job}).output;

  testing::RunResult status = Cli({"status", job, "--output", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  auto j = nlohmann::json::parse(status.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << status.output;
  EXPECT_EQ(j["state"], "SUCCEEDED");
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["restarts"], 0);  // a lost node is not a failure-caused restart
  EXPECT_GE(j["round"].get<int>(), 1);
  // The last round ran on the two hosts that kept their link.
  ASSERT_FALSE(j["history"].empty());
  const nlohmann::json& last_nodes = j["history"].back()["assignment"]["nodes"];
  ASSERT_EQ(last_nodes.size(), 2u) << j["history"].back().dump();
  EXPECT_EQ(last_nodes.dump().find("host2"), std::string::npos) << last_nodes.dump();
  EXPECT_THAT(Cli({"status", job}).output, HasSubstr("node lost"));
}

}  // namespace
}  // namespace elastrun
