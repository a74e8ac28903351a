#include "launcher/cli/run_host.h"

#include <sys/stat.h>

#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/codec.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

RunOptions Options(const std::vector<std::string>& args) {
  auto o = ParseRunOptions(args, Env({}),
                           [](const std::string& h) { return h == "127.0.0.1"; });
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : RunOptions{};
}

TEST(RunHostTest, TokenFromConfFileVariableOrDerived) {
  const std::string dir = testing::MakeTempDir("run-host");
  const std::string file = testing::WriteOwnerOnlyFile(dir + "/token", "from-file\n");
  ASSERT_FALSE(file.empty());
  bool derived = true;
  RunOptions o = Options({"--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-id",
                          "j9", "--rdzv-conf", "token_file=" + file, "w"});
  EXPECT_EQ(*RendezvousToken(o, Env({{"ELASTRUN_TOKEN", "var"}}), &derived), "from-file");
  EXPECT_FALSE(derived);

  o.rdzv_conf.token_file.clear();
  EXPECT_EQ(*RendezvousToken(o, Env({{"ELASTRUN_TOKEN_FILE", file}}), &derived),
            "from-file");
  EXPECT_EQ(*RendezvousToken(o, Env({{"ELASTRUN_TOKEN", " var\n"}}), &derived), "var");
  EXPECT_FALSE(derived);
  auto own = RendezvousToken(o, Env({}), &derived);
  EXPECT_TRUE(derived);
  EXPECT_THAT(*own, HasSubstr("j9"));

  o.rdzv_conf.token_file = dir + "/missing";
  auto missing = RendezvousToken(o, Env({}), &derived);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("--rdzv-conf token_file"));
}

TEST(RunHostTest, ARunAtARunningServiceIsInAPoolOfItsOwnAndNeedsItsToken) {
  RunOptions o =
      Options({"--nnodes", "2", "--rdzv-backend", "elastrun", "--rdzv-endpoint",
               "127.0.0.1:1,127.0.0.1:2", "--rdzv-id", "job7", "w"});
  EXPECT_EQ(RunPool("job7"), "run.job7");
  EXPECT_EQ(MultinodeJobSpec(o, 2, {"w"}).pool(), "run.job7");
  // A run id the service does not take as a name: a fixed digest of it,
  // the same on every node, another for another id.
  EXPECT_EQ(RunPool("j+1"), RunPool("j+1"));
  EXPECT_THAT(RunPool("j+1"), ::testing::MatchesRegex("run\\.[0-9a-f]{16}"));
  EXPECT_NE(RunPool("j+1"), RunPool("j+2"));
  EXPECT_EQ(RunPool(std::string(61, 'a')).size(), 20u);
  // The embedded service's job is in the default pool.
  EXPECT_EQ(MultinodeJobSpec(Options({"--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1",
                                      "--rdzv-id", "job7", "w"}),
                             2, {"w"})
                .pool(),
            "");
  // No token is derived for a service that has its own.
  bool derived = false;
  auto token = RendezvousToken(o, Env({}), &derived);
  ASSERT_FALSE(token.ok());
  EXPECT_THAT(std::string(token.status().message()),
              HasSubstr("--rdzv-backend elastrun needs the service's token"));
  EXPECT_EQ(*RendezvousToken(o, Env({{"ELASTRUN_TOKEN", "cluster"}}), &derived),
            "cluster");
}

TEST(RunHostTest, JobSpecAndServerOptionsFollowTheFlags) {
  RunOptions o = Options({"--nnodes", "2:5", "--max-restarts", "3", "--rdzv-endpoint",
                          "127.0.0.1:29999", "--rdzv-id", "j+1", "--rdzv-conf",
                          "join_timeout=20,last_call_timeout=2,keep_alive_interval=0.5,"
                          "keep_alive_max_attempt=4",
                          "w"});
  // A run id the service refuses as a job name ([A-Za-z0-9._-]) only
  // changes the job's id, not the run's.
  EXPECT_EQ(o.run_id, "j+1");
  const v1::JobSpec spec = MultinodeJobSpec(o, 4, {"python3", "-u", "t.py"});
  EXPECT_EQ(spec.name(), "run");
  EXPECT_EQ(spec.run_id(), "j+1");  // the workers' TORCHELASTIC_RUN_ID, as torchrun's
  EXPECT_EQ(spec.min_nodes(), 2);
  EXPECT_EQ(spec.max_nodes(), 5);
  EXPECT_EQ(spec.nproc_per_node(), 4);
  EXPECT_EQ(spec.max_restarts(), 3);
  EXPECT_THAT(spec.argv(), ElementsAre("python3", "-u", "t.py"));
  EXPECT_EQ(rendezvous::FromProto(spec.join_timeout()), absl::Seconds(20));
  EXPECT_EQ(rendezvous::FromProto(spec.last_call_timeout()), absl::Seconds(2));
  EXPECT_TRUE(spec.wait_for_nodes());
  o.run_id = "job7";
  EXPECT_EQ(MultinodeJobSpec(o, 1, {"w"}).name(), "job7");

  const rendezvous::ServerOptions so = EmbeddedServerOptions(o, "tok");
  EXPECT_EQ(so.listen, "127.0.0.1:29999");
  EXPECT_EQ(so.token, "tok");
  EXPECT_EQ(so.coordinator.lease.heartbeat_interval, absl::Milliseconds(500));
  EXPECT_EQ(so.coordinator.lease.lease_timeout, absl::Seconds(2));
  EXPECT_TRUE(so.coordinator.state_path.empty());  // in memory
  o.endpoint_is_this_host = false;  // is_host=1 on a node the endpoint does not name
  EXPECT_EQ(EmbeddedServerOptions(o, "tok").listen, "0.0.0.0:29999");
  // Plaintext, as torchrun's c10d store: no --insecure for `elastrun run`.
  EXPECT_TRUE(EmbeddedServerOptions(o, "tok").insecure);
  // This node's name or address: every address (its name may resolve to a
  // loopback address here while the others reach it by another).
  o.rdzv_endpoint = "node1:29999";
  o.endpoint_is_this_host = true;
  EXPECT_EQ(EmbeddedServerOptions(o, "tok").listen, "0.0.0.0:29999");
  o.rdzv_endpoint = "[fd00::1]:29999";
  EXPECT_EQ(EmbeddedServerOptions(o, "tok").listen, "[::]:29999");
}

TEST(RunHostTest, TheFirstToBindTheEndpointHosts) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string endpoint = absl::StrCat("127.0.0.1:", port);
  RunOptions o =
      Options({"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "h", "w"});
  auto first = MaybeHostRendezvous(o, "tok");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_NE(*first, nullptr);
  EXPECT_EQ((*first)->port(), port);
  // Another node of this host finds the port taken: it joins instead.
  auto second = MaybeHostRendezvous(o, "tok");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, nullptr);
  // is_host=1 must host: a taken port is an error naming the endpoint.
  o.rdzv_conf.is_host = true;
  auto forced = MaybeHostRendezvous(o, "tok");
  ASSERT_FALSE(forced.ok());
  EXPECT_THAT(std::string(forced.status().message()),
              HasSubstr("cannot host the rendezvous at " + endpoint));
  // is_host=0 never hosts, and an endpoint on another host is not hosted.
  first->reset();
  o.rdzv_conf.is_host = false;
  EXPECT_EQ(*MaybeHostRendezvous(o, "tok"), nullptr);
  o.rdzv_conf.is_host.reset();
  o.endpoint_is_this_host = false;
  EXPECT_EQ(*MaybeHostRendezvous(o, "tok"), nullptr);
}

}  // namespace
}  // namespace elastrun::launcher
