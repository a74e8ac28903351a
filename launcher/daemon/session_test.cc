// DaemonSession against a fake service: registration, the Watch stream
// feeding the Daemon, and reconnection with the same incarnation and the
// running attempts. Waits are on events with generous deadlines.
#include "launcher/daemon/session.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/daemon/daemon_fakes.h"
#include "rendezvous/codec.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

SessionOptions TestOptions() {
  SessionOptions s;
  s.node_id = "n1";
  s.incarnation = "inc-7";
  s.addr = "10.0.0.7";
  s.slots = 2;
  s.labels = {{"zone", "a"}};
  s.initial_backoff = absl::Milliseconds(1);
  s.max_backoff = absl::Milliseconds(4);
  return s;
}

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    DaemonOptions d;
    d.node_id = "n1";
    d.log_dir = testing::MakeTempDir("session_test");
    d.slots = 2;
    daemon_ = std::make_unique<Daemon>(d, &service_, &runner_);
    session_ = std::make_unique<DaemonSession>(TestOptions(), &service_, daemon_.get());
  }
  ~SessionTest() override {
    session_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  void Run() {
    thread_ = std::thread([this] { result_ = session_->Run(); });
  }

  FakeService service_;
  IdleRunner runner_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<DaemonSession> session_;
  std::thread thread_;
  absl::Status result_;
};

v1::Command StartCommand() {
  v1::Command c;
  v1::StartAttempt* s = c.mutable_start();
  s->set_job_id("j-1");
  s->mutable_spec()->add_argv("worker");
  s->mutable_spec()->set_nproc_per_node(1);
  v1::NodeAssignment* n = s->mutable_assignment()->add_nodes();
  n->set_node_id("n1");
  n->set_local_world_size(1);
  s->mutable_assignment()->set_round(4);
  return c;
}

TEST_F(SessionTest, ReconnectsWithSameIncarnationAndRunningAttempt) {
  Run();
  v1::RegisterNodeRequest first = service_.AwaitRegister(1);
  EXPECT_EQ(first.node_id(), "n1");
  EXPECT_EQ(first.addr(), "10.0.0.7");
  EXPECT_EQ(first.slots(), 2);
  EXPECT_EQ(first.labels().at("zone"), "a");
  EXPECT_EQ(first.running_size(), 0);
  service_.stream(0)->Push(StartCommand());
  service_.stream(0)->End(absl::UnavailableError("service restarted"));
  v1::RegisterNodeRequest second = service_.AwaitRegister(2);
  EXPECT_EQ(second.incarnation(), "inc-7");
  ASSERT_EQ(second.running_size(), 1);
  EXPECT_EQ(second.running(0).job_id(), "j-1");
  EXPECT_EQ(second.running(0).round(), 4);
}

TEST_F(SessionTest, RetriesWhileTheServiceIsAway) {
  service_.set_register_status(absl::UnavailableError("down"));
  Run();
  service_.AwaitRegister(3);  // backing off, retrying
  service_.set_register_status(absl::OkStatus());
  service_.AwaitRegister(4);
}

TEST_F(SessionTest, HeartbeatNotFoundReRegisters) {
  service_.set_heartbeat_status(absl::NotFoundError("lost: register again"));
  Run();
  service_.AwaitRegister(1);
  // The heartbeat thread cancels the stream; the session registers again.
  service_.AwaitRegister(2);
}

TEST_F(SessionTest, HeartbeatsAtTheIntervalTheLastReplyGave) {
  // Registered with a 5 ms interval; the first reply stretches it to an
  // hour, as a service with a large cluster does (--max-heartbeat-rate).
  v1::HeartbeatResponse stretched;
  *stretched.mutable_heartbeat_interval() = rendezvous::ToProto(absl::Hours(1));
  *stretched.mutable_lease_timeout() = rendezvous::ToProto(absl::Hours(3));
  service_.set_heartbeat_response(stretched);
  Run();
  service_.AwaitRegister(1);
  service_.AwaitHeartbeats(1);
  // Nothing happening has no event to wait on: 300 ms is 60 intervals at
  // the registration's 5 ms, and not one at the reply's hour.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(service_.heartbeats(), 1) << "the reply's interval was not taken";
}

TEST_F(SessionTest, AReplyWithoutACadenceKeepsTheRegistrations) {
  // An older service answers heartbeats without interval and lease.
  Run();
  service_.AwaitRegister(1);
  EXPECT_GE(service_.AwaitHeartbeats(20), 20);  // at the 5 ms of the registration
}

TEST_F(SessionTest, RefusedRegistrationEndsRun) {
  service_.set_register_status(absl::InvalidArgumentError("RegisterNode.node_id: bad"));
  Run();
  thread_.join();
  EXPECT_TRUE(absl::IsInvalidArgument(result_)) << result_;
}

TEST_F(SessionTest, NodeIdHeldByAnotherDaemonAtFirstRegistrationEndsRun) {
  service_.set_register_status(absl::AlreadyExistsError("node \"n1\" is held"));
  Run();
  thread_.join();
  EXPECT_TRUE(absl::IsAlreadyExists(result_)) << result_;
  EXPECT_EQ(service_.streams_opened(), 0u);  // never watched, so never ran anything
}

TEST_F(SessionTest, NodeIdTakenWhileAwayStopsTheWorkersAndKeepsRetrying) {
  Run();
  service_.AwaitRegister(1);
  service_.stream(0)->Push(StartCommand());
  ASSERT_TRUE(runner_.AwaitStarts(1));
  // The service lost this node and another daemon registered its id.
  service_.set_register_status(absl::AlreadyExistsError("node \"n1\" is held"));
  service_.stream(0)->End(absl::UnavailableError("node lost"));
  service_.AwaitRegister(4);  // refused, retrying
  EXPECT_TRUE(runner_.AwaitStops(1)) << "the workers of a lost round go on";
  EXPECT_TRUE(daemon_->Running().empty());
  EXPECT_EQ(service_.streams_opened(), 1u);
  // The other daemon left: this one is taken back and runs nothing old.
  service_.set_register_status(absl::OkStatus());
  service_.stream(1);
}

TEST(ClaimNodeIdTest, RetriesWhileAwayThenRegistersWithoutRunningAttempts) {
  FakeService service;
  service.set_register_status(absl::UnavailableError("down"));
  int waits = 0;
  absl::Status claimed;
  std::thread t([&] {
    claimed = ClaimNodeId(TestOptions(), &service, [&](absl::Duration) {
      if (++waits == 3) service.set_register_status(absl::OkStatus());
      return true;
    });
  });
  t.join();
  EXPECT_TRUE(claimed.ok()) << claimed;
  v1::RegisterNodeRequest last = service.AwaitRegister(4);
  EXPECT_EQ(last.node_id(), "n1");
  EXPECT_EQ(last.incarnation(), "inc-7");
  EXPECT_EQ(last.running_size(), 0);
}

TEST(ClaimNodeIdTest, HeldNodeIdIsReturnedAndAStopEndsTheWait) {
  FakeService service;
  service.set_register_status(absl::AlreadyExistsError("node \"n1\" is held"));
  absl::Status held = ClaimNodeId(TestOptions(), &service,
                                  [](absl::Duration) { return true; });
  EXPECT_TRUE(absl::IsAlreadyExists(held)) << held;
  service.set_register_status(absl::UnavailableError("down"));
  absl::Status stopped = ClaimNodeId(TestOptions(), &service,
                                     [](absl::Duration) { return false; });
  EXPECT_TRUE(absl::IsCancelled(stopped)) << stopped;
}

}  // namespace
}  // namespace elastrun::launcher
