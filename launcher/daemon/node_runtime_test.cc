// NodeRuntime, the runtime elastrund and `elastrun run`'s multi-node form
// share, against a fake service whose Watch stream the test feeds and a
// runner whose attempts end when stopped: it serves the service's commands,
// leaves in order (workers stopped with the signal, stream closed, the
// Daemon out of the agent's reach), and says why when the service refuses
// the node. Waits are on events with generous deadlines.
#include "launcher/daemon/node_runtime.h"

#include <signal.h>

#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon/daemon_fakes.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(60);

DaemonOptions NodeDaemon() {
  DaemonOptions d;
  d.node_id = "n1";
  d.log_dir = testing::MakeTempDir("node_runtime_test");
  d.slots = 2;
  return d;
}

SessionOptions NodeSession() {
  SessionOptions s;
  s.node_id = "n1";
  s.incarnation = NewIncarnation();
  s.addr = "10.0.0.7";
  s.slots = 2;
  s.initial_backoff = absl::Milliseconds(1);
  s.max_backoff = absl::Milliseconds(4);
  return s;
}

// A StartAttempt of one worker on n1.
v1::Command StartOnN1(const std::string& job, int64_t round) {
  v1::Command c;
  v1::StartAttempt* s = c.mutable_start();
  s->set_job_id(job);
  s->mutable_spec()->add_argv("worker");
  s->mutable_spec()->set_nproc_per_node(1);
  v1::NodeAssignment* n = s->mutable_assignment()->add_nodes();
  n->set_node_id("n1");
  n->set_local_world_size(1);
  s->mutable_assignment()->set_round(round);
  return c;
}

TEST(NodeRuntimeTest, ServesTheServicesCommandsThenLeavesWithTheStopSignal) {
  FakeService service;
  IdleRunner runner(/*end_on_stop=*/true);
  StopRequest stop;
  std::atomic<Daemon*> router{nullptr};
  NodeRuntime node(NodeDaemon(), NodeSession(), &service, &runner, &router, &stop);
  EXPECT_EQ(router.load(), &node.daemon()) << "the agent's hooks cannot reach the Daemon";
  const v1::RegisterNodeRequest reg = service.AwaitRegister(1);
  EXPECT_EQ(reg.node_id(), "n1");
  EXPECT_EQ(reg.incarnation().size(), 16u);
  service.stream(0)->Push(StartOnN1("j-1", 0));
  ASSERT_TRUE(runner.AwaitStarts(1));

  EXPECT_TRUE(node.Leave(SIGINT, kWait));
  EXPECT_THAT(runner.stop_signals(), ElementsAre(SIGINT));
  EXPECT_EQ(router.load(), nullptr) << "the Daemon is gone; the hooks must not reach it";
  EXPECT_TRUE(absl::IsCancelled(service.stream(0)->Finish()))
      << "the Watch stream stays open: the service would wait a lease for this node";
  EXPECT_TRUE(node.session_status().ok());
  EXPECT_EQ(stop.WaitFor(absl::ZeroDuration()), 0) << "leaving is no refusal";
}

TEST(NodeRuntimeTest, ARefusedNodeRequestsAStopAndSaysWhy) {
  FakeService service;
  service.set_register_status(absl::InvalidArgumentError("node id 'n1' has a bad label"));
  IdleRunner runner;
  StopRequest stop;
  std::atomic<Daemon*> router{nullptr};
  NodeRuntime node(NodeDaemon(), NodeSession(), &service, &runner, &router, &stop);
  EXPECT_EQ(stop.WaitFor(kWait), -1);
  EXPECT_TRUE(absl::IsInvalidArgument(node.session_status()));
  EXPECT_THAT(node.session_status().message(), HasSubstr("bad label"));
  EXPECT_TRUE(node.Leave(SIGTERM, kWait));
}

TEST(NodeRuntimeTest, WorkersThatOutlastTheTimeoutAreSaid) {
  FakeService service;
  IdleRunner runner(/*end_on_stop=*/false);  // workers that ignore the signal
  StopRequest stop;
  std::atomic<Daemon*> router{nullptr};
  NodeRuntime node(NodeDaemon(), NodeSession(), &service, &runner, &router, &stop);
  service.AwaitRegister(1);
  service.stream(0)->Push(StartOnN1("j-1", 0));
  ASSERT_TRUE(runner.AwaitStarts(1));
  EXPECT_FALSE(node.Leave(SIGTERM, absl::Milliseconds(100)));
  EXPECT_THAT(runner.stop_signals(), ElementsAre(SIGTERM));
}

TEST(WorkerEnvironmentTest, TheLaunchersSettingsStayWithTheLauncher) {
  char path[] = "PATH=/usr/bin", token[] = "ELASTRUN_TOKEN=secret",
       tls[] = "ELASTRUN_TLS_KEY=/etc/key.pem", home[] = "HOME=/home/u",
       own[] = "ELASTRUN_VERBOSE=1";
  char* env[] = {path, token, tls, home, own, nullptr};
  EXPECT_THAT(WorkerEnvironment(env),
              ElementsAre("PATH=/usr/bin", "HOME=/home/u", "ELASTRUN_VERBOSE=1"));
}

}  // namespace
}  // namespace elastrun::launcher
