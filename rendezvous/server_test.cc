// The service in-process on 127.0.0.1:0, driven through real gRPC stubs by
// test daemons. Time is a FakeClock; the timer thread is off and tests call
// Tick(). No sleeps: every wait is on an event with a generous deadline.
#include "rendezvous/server.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;
constexpr absl::Duration kWait = absl::Seconds(20);

std::string TempDir() {
  char tmpl[] = "/tmp/elastrun_server_test.XXXXXX";
  return std::string(mkdtemp(tmpl));
}

std::shared_ptr<grpc::Channel> Dial(const RendezvousServer& s) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", s.port()),
                             grpc::InsecureChannelCredentials());
}

// Plays one elastrund: registers, watches, joins, reports.
class TestDaemon {
 public:
  TestDaemon(std::shared_ptr<grpc::Channel> channel, std::string id,
             std::string incarnation = "inc-1")
      : stub_(v1::Rendezvous::NewStub(channel)),
        id_(std::move(id)),
        incarnation_(std::move(incarnation)) {}
  ~TestDaemon() { StopWatch(); }

  const std::string& id() const { return id_; }
  std::string addr() const { return id_ + ".test"; }

  absl::Status Register(int slots = 2, std::vector<v1::RunningAttempt> running = {}) {
    v1::RegisterNodeRequest r;
    r.set_node_id(id_);
    r.set_incarnation(incarnation_);
    r.set_addr(addr());
    r.set_slots(slots);
    for (auto& a : running) *r.add_running() = a;
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    return rpc::FromGrpcStatus(stub_->RegisterNode(&ctx, r, &resp));
  }
  // Registers, opens the Watch stream and waits for its Welcome.
  void Start(int slots = 2, std::vector<v1::RunningAttempt> running = {}) {
    ASSERT_TRUE(Register(slots, std::move(running)).ok());
    v1::WatchRequest w;
    w.set_node_id(id_);
    w.set_incarnation(incarnation_);
    reader_ = stub_->Watch(&watch_ctx_, w);
    thread_ = std::thread([this] {
      v1::Command c;
      while (reader_->Read(&c)) {
        absl::MutexLock lock(&mu_);
        commands_.push_back(c);
      }
      grpc::Status st = reader_->Finish();
      absl::MutexLock lock(&mu_);
      ended_ = true;
      end_status_ = rpc::FromGrpcStatus(st);
    });
    ASSERT_EQ(Next().kind_case(), v1::Command::kWelcome);
  }
  void StopWatch() {
    if (!thread_.joinable()) return;
    watch_ctx_.TryCancel();
    thread_.join();
  }

  // The next command; fails the test after kWait.
  v1::Command Next() {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !commands_.empty() || ended_;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), kWait) || commands_.empty()) {
      ADD_FAILURE() << id_ << ": no command (stream ended: " << ended_ << ")";
      return v1::Command();
    }
    v1::Command c = commands_.front();
    commands_.pop_front();
    return c;
  }
  // Waits for the stream's end and returns its status.
  absl::Status WaitEnded() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&ended_), kWait);
    return ended_ ? end_status_ : absl::DeadlineExceededError("stream still open");
  }

  absl::Status Heartbeat() {
    v1::HeartbeatRequest r;
    r.set_node_id(id_);
    r.set_incarnation(incarnation_);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    return rpc::FromGrpcStatus(stub_->Heartbeat(&ctx, r, &resp));
  }
  absl::StatusOr<v1::JoinRoundResponse> Join(const std::string& job, int64_t round,
                                             int nproc = 2) {
    v1::JoinRoundRequest r;
    r.set_job_id(job);
    r.set_round(round);
    r.set_node_id(id_);
    r.set_master_port(30000 + static_cast<int>(id_.back()));
    r.set_local_world_size(nproc);
    v1::JoinRoundResponse resp;
    grpc::ClientContext ctx;
    absl::Status st = rpc::FromGrpcStatus(stub_->JoinRound(&ctx, r, &resp));
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status Exit(const std::string& job, int64_t round, bool ok, int rank = 0) {
    v1::ReportExitRequest r;
    r.set_job_id(job);
    r.set_round(round);
    r.set_node_id(id_);
    if (ok) {
      r.set_succeeded(true);
    } else {
      r.mutable_failure()->set_rank(rank);
      r.mutable_failure()->set_exit_code(3);
      r.mutable_failure()->set_message("boom");
    }
    v1::ReportExitResponse resp;
    grpc::ClientContext ctx;
    return rpc::FromGrpcStatus(stub_->ReportExit(&ctx, r, &resp));
  }
  absl::Status Barrier(const std::string& job, int64_t round, const std::string& name) {
    v1::BarrierRequest r;
    r.set_job_id(job);
    r.set_round(round);
    r.set_name(name);
    r.set_participant(id_);
    v1::BarrierResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return rpc::FromGrpcStatus(stub_->Barrier(&ctx, r, &resp));
  }

 private:
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string id_;
  const std::string incarnation_;
  grpc::ClientContext watch_ctx_;
  std::unique_ptr<grpc::ClientReader<v1::Command>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::deque<v1::Command> commands_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
};

class ServerTest : public ::testing::Test {
 protected:
  // ServerOptions::logs_max_jobs of the next StartServer.
  size_t logs_max_jobs_ = 256;
  void StartServer(const std::string& state_path = "") {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.timer_thread = false;
    o.coordinator.clock = &clock_;
    o.coordinator.state_path = state_path;
    o.logs_max_jobs = logs_max_jobs_;
    absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    jobs_ = v1::Jobs::NewStub(Dial(*server_));
  }
  std::unique_ptr<TestDaemon> Daemon(const std::string& id, std::string inc = "inc-1") {
    auto d = std::make_unique<TestDaemon>(Dial(*server_), id, std::move(inc));
    d->Start();
    return d;
  }
  // A MIN:MAX x 2 job; `wait_for_nodes` for one submitted before its nodes
  // registered.
  std::string Submit(int min, int max, int max_restarts = 1,
                     bool wait_for_nodes = false) {
    v1::SubmitResponse resp;
    grpc::Status st = TrySubmit(min, max, max_restarts, wait_for_nodes, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }
  grpc::Status TrySubmit(int min, int max, int max_restarts, bool wait_for_nodes,
                         v1::SubmitResponse* resp) {
    v1::SubmitRequest r;
    r.mutable_spec()->set_name("train");
    r.mutable_spec()->set_min_nodes(min);
    r.mutable_spec()->set_max_nodes(max);
    r.mutable_spec()->set_nproc_per_node(2);
    r.mutable_spec()->set_max_restarts(max_restarts);
    r.mutable_spec()->add_argv("worker");
    r.mutable_spec()->set_wait_for_nodes(wait_for_nodes);
    grpc::ClientContext ctx;
    return jobs_->Submit(&ctx, r, resp);
  }
  v1::JobStatus Get(const std::string& job) {
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::JobStatus s;
    grpc::ClientContext ctx;
    grpc::Status st = jobs_->Get(&ctx, r, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }
  // Every daemon expects JoinRound{job, round} and joins; returns the
  // StartAttempt each then gets (after `close` runs, e.g. a Tick).
  std::vector<v1::StartAttempt> JoinAll(const std::vector<TestDaemon*>& ds,
                                        const std::string& job, int64_t round,
                                        const std::function<void()>& close = {}) {
    for (TestDaemon* d : ds) {
      v1::Command c = d->Next();
      EXPECT_EQ(c.join_round().job_id(), job) << d->id() << ": " << c.DebugString();
      EXPECT_EQ(c.join_round().round(), round) << d->id();
      absl::StatusOr<v1::JoinRoundResponse> r = d->Join(job, round);
      EXPECT_TRUE(r.ok()) << r.status();
    }
    if (close) close();
    std::vector<v1::StartAttempt> starts;
    for (TestDaemon* d : ds) {
      v1::Command c = d->Next();
      EXPECT_TRUE(c.has_start()) << d->id() << ": " << c.DebugString();
      starts.push_back(c.start());
    }
    return starts;
  }

  FakeClock clock_;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
};

// Each node's StartAttempt carries only its own entry; together they must
// cover ranks 0..world_size-1 once, with one round, master and world size.
void ExpectConsistent(const std::vector<v1::StartAttempt>& starts, int64_t round,
                      int world_size) {
  ASSERT_FALSE(starts.empty());
  const v1::Assignment& a0 = starts[0].assignment();
  std::multiset<int> ranks;
  std::string rank0_node;
  for (const v1::StartAttempt& s : starts) {
    const v1::Assignment& a = s.assignment();
    EXPECT_EQ(a.round(), round);
    EXPECT_EQ(a.world_size(), world_size);
    EXPECT_EQ(a.group_world_size(), static_cast<int>(starts.size()));
    EXPECT_EQ(a.master_addr(), a0.master_addr());
    EXPECT_EQ(a.master_port(), a0.master_port());
    ASSERT_EQ(a.nodes_size(), 1);  // its own entry only
    const v1::NodeAssignment& n = a.nodes(0);
    for (int l = 0; l < n.local_world_size(); ++l) ranks.insert(n.rank_offset() + l);
    if (n.group_rank() == 0) rank0_node = n.node_id();
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), world_size);
  EXPECT_EQ(static_cast<int>(std::set<int>(ranks.begin(), ranks.end()).size()), world_size);
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), world_size - 1);
  ASSERT_FALSE(rank0_node.empty());
  EXPECT_EQ(a0.master_addr(), rank0_node + ".test");
  EXPECT_EQ(a0.master_port(), 30000 + rank0_node.back());
}

TEST_F(ServerTest, ThreeByTwoJobRestartsOnFailureThenSucceeds) {
  StartServer();
  auto a = Daemon("a"), b = Daemon("b"), c = Daemon("c");
  const std::string job = Submit(3, 3);
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_PENDING);
  std::vector<TestDaemon*> all = {a.get(), b.get(), c.get()};
  ExpectConsistent(JoinAll(all, job, 0), 0, 6);
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_RUNNING);

  ASSERT_TRUE(b->Exit(job, 0, /*ok=*/false, /*rank=*/2).ok());
  for (TestDaemon* d : all) {
    v1::Command stop = d->Next();
    EXPECT_EQ(stop.stop().round(), 0) << stop.DebugString();
    EXPECT_EQ(stop.stop().reason(), "failure");
  }
  std::vector<v1::StartAttempt> starts = JoinAll(all, job, 1);
  ExpectConsistent(starts, 1, 6);
  EXPECT_EQ(starts[0].assignment().restart_count(), 1);
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.restarts(), 1);
  ASSERT_EQ(st.history_size(), 2);
  EXPECT_EQ(st.history(0).end_reason(), "failure");
  EXPECT_EQ(st.root_cause().node_id(), "b");

  for (TestDaemon* d : all) ASSERT_TRUE(d->Exit(job, 1, /*ok=*/true).ok());
  for (TestDaemon* d : all) {
    v1::Command end = d->Next();
    EXPECT_EQ(end.end_job().state(), v1::JOB_STATE_SUCCEEDED) << end.DebugString();
  }
  st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(st.phase(), v1::ROUND_PHASE_DONE);
}

TEST_F(ServerTest, LeaseExpiryOpensRoundWithSurvivors) {
  StartServer();
  auto a = Daemon("a"), b = Daemon("b"), c = Daemon("c");
  const std::string job = Submit(2, 3);
  JoinAll({a.get(), b.get(), c.get()}, job, 0);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(a->Heartbeat().ok());
  ASSERT_TRUE(b->Heartbeat().ok());
  clock_.Advance(absl::Seconds(1));  // c silent for 3 s
  server_->Tick();
  EXPECT_TRUE(absl::IsUnavailable(c->WaitEnded()));
  for (TestDaemon* d : {a.get(), b.get()}) {
    EXPECT_EQ(d->Next().stop().reason(), "node lost");
  }
  // Two of MIN 2 joined: the round closes after the last call (1 s).
  std::vector<v1::StartAttempt> starts = JoinAll({a.get(), b.get()}, job, 1, [&] {
    clock_.Advance(absl::Seconds(1));
    server_->Tick();
  });
  ExpectConsistent(starts, 1, 4);
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.restarts(), 0);  // a membership change is not a restart
  EXPECT_EQ(st.history(0).end_reason(), "node lost");
  EXPECT_TRUE(absl::IsNotFound(c->Heartbeat()));
}

TEST_F(ServerTest, BrokenWatchStreamIsANodeLossAtOnce) {
  StartServer();
  auto a = Daemon("a"), b = Daemon("b"), c = Daemon("c");
  const std::string job = Submit(2, 3);
  JoinAll({a.get(), b.get(), c.get()}, job, 0);
  c.reset();  // the daemon dies: its stream breaks
  for (TestDaemon* d : {a.get(), b.get()}) {
    EXPECT_EQ(d->Next().stop().reason(), "node lost");
    EXPECT_EQ(d->Next().join_round().round(), 1);
  }
}

TEST_F(ServerTest, BarrierReleasesWhenEveryNodeArrived) {
  StartServer();
  auto a = Daemon("a"), b = Daemon("b");
  const std::string job = Submit(2, 2);
  JoinAll({a.get(), b.get()}, job, 0);
  absl::Status first;
  std::thread waiter([&] { first = a->Barrier(job, 0, "exit"); });
  EXPECT_TRUE(b->Barrier(job, 0, "exit").ok());
  waiter.join();
  EXPECT_TRUE(first.ok()) << first;
  // A completed barrier stays complete for a retrying participant.
  EXPECT_TRUE(a->Barrier(job, 0, "exit").ok());
  // A waiting barrier is aborted when the round ends.
  std::thread aborted([&] { first = a->Barrier(job, 0, "epoch"); });
  // Whether the waiter arrives before or after the round ends, it gets
  // ABORTED: a pending wait is aborted, a late arrival names an ended round.
  ASSERT_TRUE(b->Exit(job, 0, /*ok=*/false).ok());
  aborted.join();
  EXPECT_TRUE(absl::IsAborted(first)) << first;
}

TEST_F(ServerTest, JobWaitsPendingUntilEnoughNodes) {
  StartServer();
  auto a = Daemon("a");
  // One node of two: refused, unless it asks to wait for nodes.
  v1::SubmitResponse refused;
  grpc::Status no = TrySubmit(2, 2, 1, /*wait_for_nodes=*/false, &refused);
  EXPECT_EQ(no.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << no.error_message();
  EXPECT_THAT(
      no.error_message(),
      HasSubstr("job needs 2 node(s) with 2 slots each; registered: a (2 slots)"));
  const std::string job = Submit(2, 2, 1, /*wait_for_nodes=*/true);
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(st.phase(), v1::ROUND_PHASE_QUEUED);
  EXPECT_THAT(st.pending_reason(), HasSubstr("waiting for nodes"));
  auto b = Daemon("b");
  ExpectConsistent(JoinAll({a.get(), b.get()}, job, 0), 0, 4);
}

TEST_F(ServerTest, BadSpecIsRefusedNamingTheField) {
  StartServer();
  v1::SubmitRequest r;
  r.mutable_spec()->set_min_nodes(1);
  r.mutable_spec()->set_max_nodes(1);
  r.mutable_spec()->set_nproc_per_node(0);
  r.mutable_spec()->add_argv("x");
  v1::SubmitResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = jobs_->Submit(&ctx, r, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("spec.nproc_per_node"));
  v1::ListJobsResponse list;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(jobs_->List(&ctx2, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);  // nothing half-created
}

// A Submit sent again with its request_id (its answer was lost, the
// service restarted in between) gets the job it made; nothing is
// submitted twice. A bad request_id is refused naming it.
TEST_F(ServerTest, ASubmitSentAgainWithItsRequestIdMakesOneJob) {
  const std::string path = TempDir() + "/state.db";
  StartServer(path);
  v1::SubmitRequest r;
  r.mutable_spec()->set_name("once");
  r.mutable_spec()->set_min_nodes(1);
  r.mutable_spec()->set_max_nodes(1);
  r.mutable_spec()->set_nproc_per_node(1);
  r.mutable_spec()->add_argv("worker");
  r.mutable_spec()->set_wait_for_nodes(true);
  r.set_request_id("0123456789abcdef");
  auto submit = [&](const v1::SubmitRequest& req) {
    grpc::ClientContext ctx;
    v1::SubmitResponse resp;
    grpc::Status st = jobs_->Submit(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  };
  const std::string first = submit(r);
  EXPECT_EQ(submit(r), first);
  server_.reset();
  StartServer(path);
  EXPECT_EQ(submit(r), first);
  v1::SubmitRequest other = r;
  other.set_request_id("another");
  EXPECT_NE(submit(other), first);
  v1::ListJobsResponse list;
  grpc::ClientContext ctx;
  ASSERT_TRUE(jobs_->List(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 2);
  other.set_request_id("not allowed/");
  grpc::ClientContext bad_ctx;
  v1::SubmitResponse resp;
  grpc::Status st = jobs_->Submit(&bad_ctx, other, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("request_id"));
}

TEST_F(ServerTest, RestartKeepsJobsHistoryAndRunningAttempts) {
  const std::string path = TempDir() + "/state.db";
  StartServer(path);
  std::string job;
  {
    auto a = Daemon("a"), b = Daemon("b");
    job = Submit(2, 2);
    JoinAll({a.get(), b.get()}, job, 0);
    ASSERT_TRUE(a->Exit(job, 0, /*ok=*/false).ok());
    EXPECT_EQ(a->Next().stop().round(), 0);
    EXPECT_EQ(b->Next().stop().round(), 0);
    JoinAll({a.get(), b.get()}, job, 1);
    server_.reset();  // the service goes away; daemons keep their workers
  }
  StartServer(path);
  v1::JobStatus st = Get(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(st.round(), 1);
  EXPECT_EQ(st.restarts(), 1);
  ASSERT_EQ(st.history_size(), 2);
  EXPECT_EQ(st.history(0).end_reason(), "failure");
  // The daemons reconnect within the lease with what they still run: the
  // service re-sends the same attempt (a no-op for them), no stop, no loss.
  v1::RunningAttempt running;
  running.set_job_id(job);
  running.set_round(1);
  TestDaemon a(Dial(*server_), "a"), b(Dial(*server_), "b");
  a.Start(2, {running});
  b.Start(2, {running});
  for (TestDaemon* d : {&a, &b}) {
    v1::Command c = d->Next();
    ASSERT_TRUE(c.has_start()) << c.DebugString();
    EXPECT_EQ(c.start().assignment().round(), 1);
  }
  st = Get(job);
  EXPECT_EQ(st.round(), 1);
  EXPECT_EQ(st.phase(), v1::ROUND_PHASE_RUNNING);
  for (TestDaemon* d : {&a, &b}) ASSERT_TRUE(d->Exit(job, 1, /*ok=*/true).ok());
  EXPECT_EQ(Get(job).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST(ServerSecurityTest, TokenAndTlsOrInsecureRequiredOffLoopback) {
  ServerOptions o;
  for (const char* loopback : {"127.0.0.1:0", "[::1]:0"}) {
    o.listen = loopback;
    EXPECT_TRUE(CheckListenSecurity(o).ok()) << loopback;
  }
  o.listen = "0.0.0.0:0";
  absl::Status st = CheckListenSecurity(o);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), HasSubstr("--token"));
  EXPECT_FALSE(RendezvousServer::Create(o).ok());
  // A token alone: it would travel in clear.
  o.token = "s3cret";
  st = CheckListenSecurity(o);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), HasSubstr("no TLS"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("--tls-cert"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("--insecure"));
  EXPECT_FALSE(RendezvousServer::Create(o).ok());
  o.tls.cert = "server.crt";  // TLS (checked when the files are read)
  EXPECT_TRUE(CheckListenSecurity(o).ok());
  o.tls.cert.clear();
  o.insecure = true;  // said out loud
  EXPECT_TRUE(CheckListenSecurity(o).ok());
  o.timer_thread = false;
  absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto jobs = v1::Jobs::NewStub(Dial(**s));
  auto call = [&](const std::string& auth) {
    grpc::ClientContext ctx;
    if (!auth.empty()) ctx.AddMetadata("authorization", auth);
    v1::ListNodesResponse resp;
    return jobs->ListNodes(&ctx, v1::ListNodesRequest(), &resp).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer s3cret"), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace elastrun::rendezvous

namespace elastrun::rendezvous {
namespace {

// Reads StreamLogs to its end.
std::vector<v1::LogChunk> ReadLogs(v1::Jobs::Stub& jobs, const std::string& job, int rank,
                                   int64_t after, grpc::Status* status) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StreamLogsRequest req;
  req.set_job_id(job);
  req.set_rank(rank);
  req.set_after_seq(after);
  auto reader = jobs.StreamLogs(&ctx, req);
  std::vector<v1::LogChunk> out;
  v1::LogChunk c;
  while (reader->Read(&c)) out.push_back(c);
  *status = reader->Finish();
  return out;
}

TEST_F(ServerTest, PushedLogsAreStreamedBackByCursorAndRank) {
  StartServer();
  TestDaemon n0(Dial(*server_), "n0");
  ASSERT_TRUE(n0.Register(2).ok());
  const std::string job = Submit(1, 1, 1, /*wait_for_nodes=*/true);
  auto rdzv = v1::Rendezvous::NewStub(Dial(*server_));
  v1::PushLogsRequest push;
  push.set_node_id("n0");
  push.set_job_id(job);
  for (int i = 0; i < 3; ++i) {
    v1::LogChunk* c = push.add_chunks();
    c->set_rank(i % 2);
    c->set_stream("stdout");
    c->set_data("line " + std::to_string(i) + "\n");
  }
  {
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    ASSERT_TRUE(rdzv->PushLogs(&ctx, push, &resp).ok());
  }
  grpc::Status st;
  auto all = ReadLogs(*jobs_, job, -1, 0, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].data(), "line 2\n");
  auto rest = ReadLogs(*jobs_, job, -1, all[0].seq(), &st);
  EXPECT_EQ(rest.size(), 2u);
  auto rank1 = ReadLogs(*jobs_, job, 1, 0, &st);
  ASSERT_EQ(rank1.size(), 1u);
  EXPECT_EQ(rank1[0].data(), "line 1\n");

  // A node that is not the job's: refused, and its chunks dropped.
  {
    v1::PushLogsRequest stray = push;
    stray.set_node_id("stranger");
    stray.mutable_chunks(0)->set_data("forged\n");
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    grpc::Status pushed = rdzv->PushLogs(&ctx, stray, &resp);
    EXPECT_EQ(pushed.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(pushed.error_message(), HasSubstr("stranger"));
    EXPECT_EQ(ReadLogs(*jobs_, job, -1, 0, &st).size(), 3u);
  }

  // A numbered push sent again (its answer was lost) is stored once; a
  // negative number is refused.
  {
    v1::PushLogsRequest numbered = push;
    numbered.set_incarnation("inc-1");
    numbered.set_first_chunk(1);
    for (int i = 0; i < 2; ++i) {
      grpc::ClientContext ctx;
      v1::PushLogsResponse resp;
      ASSERT_TRUE(rdzv->PushLogs(&ctx, numbered, &resp).ok());
    }
    EXPECT_EQ(ReadLogs(*jobs_, job, -1, 0, &st).size(), 6u);
    numbered.set_first_chunk(-1);
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    grpc::Status pushed = rdzv->PushLogs(&ctx, numbered, &resp);
    EXPECT_EQ(pushed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(pushed.error_message(), HasSubstr("first_chunk"));
  }

  // A chunk of no rank of the job (-3, or beyond its largest world):
  // refused, naming the chunk, and nothing of the push is stored.
  for (int rank : {-3, 2}) {  // the job: 1 node x 2 workers
    v1::PushLogsRequest bad = push;
    bad.mutable_chunks(1)->set_rank(rank);
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    grpc::Status pushed = rdzv->PushLogs(&ctx, bad, &resp);
    EXPECT_EQ(pushed.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << rank;
    EXPECT_THAT(pushed.error_message(), HasSubstr("chunks[1].rank: " + std::to_string(rank)));
    EXPECT_EQ(ReadLogs(*jobs_, job, -1, 0, &st).size(), 6u);
  }

  // Unknown jobs: pushing and reading are refused.
  ReadLogs(*jobs_, "no-such-job", -1, 0, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  push.set_job_id("no-such-job");
  grpc::ClientContext ctx;
  v1::PushLogsResponse resp;
  EXPECT_EQ(rdzv->PushLogs(&ctx, push, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// The service keeps the logs of logs_max_jobs jobs: a finished job's go
// first, never a live one's (its follower would skip lines); reading an
// evicted one says so and where the logs still are.
TEST_F(ServerTest, LiveJobsLogsAreNeverEvictedAndAnEvictedLogSaysSo) {
  logs_max_jobs_ = 2;
  StartServer();
  TestDaemon n0(Dial(*server_), "n0");
  ASSERT_TRUE(n0.Register(8).ok());
  auto rdzv = v1::Rendezvous::NewStub(Dial(*server_));
  auto push = [&](const std::string& job, const std::string& line) {
    v1::PushLogsRequest p;
    p.set_node_id("n0");
    p.set_job_id(job);
    v1::LogChunk* c = p.add_chunks();
    c->set_stream("stdout");
    c->set_data(line);
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    grpc::Status st = rdzv->PushLogs(&ctx, p, &resp);
    EXPECT_TRUE(st.ok()) << job << ": " << st.error_message();
  };
  auto cancel = [&](const std::string& job) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest r;
    r.set_job_id(job);
    v1::JobStatus resp;
    ASSERT_TRUE(jobs_->Cancel(&ctx, r, &resp).ok());
  };
  const std::string live = Submit(1, 1, 1, /*wait_for_nodes=*/true);
  push(live, "first line of the live job\n");
  std::vector<std::string> done;
  for (int i = 0; i < 3; ++i) {
    done.push_back(Submit(1, 1, 1, /*wait_for_nodes=*/true));
    push(done.back(), "finished\n");
    cancel(done.back());
  }
  grpc::Status st;
  const std::vector<v1::LogChunk> kept = ReadLogs(*jobs_, live, -1, 0, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].data(), "first line of the live job\n");
  EXPECT_EQ(ReadLogs(*jobs_, done[2], -1, 0, &st).size(), 1u);
  // done[0] and done[1] went (the two oldest finished ones).
  EXPECT_TRUE(ReadLogs(*jobs_, done[0], -1, 0, &st).empty());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(),
              HasSubstr("no longer keeps the logs of job " + done[0]));
  EXPECT_THAT(st.error_message(), HasSubstr("--log-dir"));
}

// `logs -f` knows it has a finished job's last lines once every node of
// it sent its last-lines mark, or is gone, or 30 s passed.
TEST_F(ServerTest, LogsAreCompleteOnceEveryNodeSentItsLastLines) {
  StartServer();
  auto n0 = Daemon("n0");
  auto n1 = Daemon("n1");
  const std::string job = Submit(2, 2, 0);
  ExpectConsistent(JoinAll({n0.get(), n1.get()}, job, 0), 0, 4);
  auto get = [&] { return Get(job); };
  EXPECT_FALSE(get().logs_complete());  // running
  ASSERT_TRUE(n0->Exit(job, 0, /*ok=*/false).ok());
  ASSERT_EQ(get().state(), v1::JOB_STATE_FAILED);
  EXPECT_FALSE(get().logs_complete());
  auto rdzv = v1::Rendezvous::NewStub(Dial(*server_));
  auto last = [&](const std::string& node) {
    v1::PushLogsRequest p;
    p.set_node_id(node);
    p.set_job_id(job);
    p.set_last(true);
    grpc::ClientContext ctx;
    v1::PushLogsResponse resp;
    EXPECT_TRUE(rdzv->PushLogs(&ctx, p, &resp).ok());
  };
  last("n0");
  EXPECT_FALSE(get().logs_complete());  // n1 is still to send its own
  last("n1");
  EXPECT_TRUE(get().logs_complete());
}

}  // namespace
}  // namespace elastrun::rendezvous
