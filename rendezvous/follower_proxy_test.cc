// A follower's port passing calls to the leader: real services on loopback
// (the leader is a real RendezvousServer with a token), real gRPC stubs
// dialing the proxy. No sleeps: every wait is on an event or a poll with a
// generous deadline.
#include "rendezvous/follower_proxy.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/server.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "cluster-s3cret";
constexpr absl::Duration kWait = absl::Seconds(20);

std::unique_ptr<RendezvousServer> Leader(const std::string& listen = "127.0.0.1:0") {
  ServerOptions o;
  o.listen = listen;
  o.token = kToken;
  o.timer_thread = false;
  absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<FollowerProxy> Proxy(
    std::function<absl::StatusOr<std::string>()> find = {}) {
  FollowerProxyOptions o;
  o.listen = "127.0.0.1:0";
  o.find_leader = std::move(find);
  absl::StatusOr<std::unique_ptr<FollowerProxy>> p = FollowerProxy::Start(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

void Prepare(grpc::ClientContext& ctx, const std::string& token = kToken) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  ctx.AddMetadata("authorization", "Bearer " + token);
}

grpc::Status Submit(v1::Jobs::Stub& jobs, const std::string& token, std::string* id) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_name("train");
  r.mutable_spec()->set_min_nodes(1);
  r.mutable_spec()->set_max_nodes(1);
  r.mutable_spec()->set_nproc_per_node(1);
  r.mutable_spec()->add_argv("worker");
  r.mutable_spec()->set_wait_for_nodes(true);  // queued where no node is up
  grpc::ClientContext ctx;
  Prepare(ctx, token);
  v1::SubmitResponse resp;
  grpc::Status st = jobs.Submit(&ctx, r, &resp);
  *id = resp.job_id();
  return st;
}

std::shared_ptr<grpc::Channel> Dial(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// A daemon's Watch stream, read on its own thread.
class Watch {
 public:
  Watch(v1::Rendezvous::Stub& stub, const std::string& node) {
    Prepare(ctx_);
    ctx_.set_deadline(std::chrono::system_clock::time_point::max());
    v1::WatchRequest w;
    w.set_node_id(node);
    w.set_incarnation("inc-1");
    reader_ = stub.Watch(&ctx_, w);
    thread_ = std::thread([this] {
      v1::Command c;
      while (reader_->Read(&c)) {
        absl::MutexLock lock(&mu_);
        commands_.push_back(c);
      }
      grpc::Status st = reader_->Finish();
      absl::MutexLock lock(&mu_);
      end_ = st;
    });
  }
  ~Watch() {
    ctx_.TryCancel();
    thread_.join();
  }
  // Waits for the n-th command (from 1).
  v1::Command Await(size_t n) {
    absl::MutexLock lock(&mu_);
    auto got = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return commands_.size() >= n || end_.has_value();
    };
    mu_.AwaitWithTimeout(absl::Condition(&got), kWait);
    EXPECT_GE(commands_.size(), n) << (end_ ? end_->error_message() : "nothing came");
    return commands_.size() >= n ? commands_[n - 1] : v1::Command();
  }
  // Waits for the stream's end.
  grpc::Status End() {
    absl::MutexLock lock(&mu_);
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return end_.has_value(); };
    mu_.AwaitWithTimeout(absl::Condition(&ended), kWait);
    return end_.value_or(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "still open"));
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::Command>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<v1::Command> commands_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);
};

grpc::Status Register(v1::Rendezvous::Stub& stub, const std::string& node) {
  v1::RegisterNodeRequest r;
  r.set_node_id(node);
  r.set_incarnation("inc-1");
  r.set_addr(node + ".test");
  r.set_slots(1);
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::RegisterNodeResponse resp;
  return stub.RegisterNode(&ctx, r, &resp);
}

// Unary and streaming calls reach the leader through the proxy with the
// caller's identity, and its answers (statuses and messages too) come back.
TEST(FollowerProxyTest, PassesCallsWithTheCallersIdentityAndTheLeadersAnswers) {
  std::unique_ptr<RendezvousServer> leader = Leader();
  std::unique_ptr<FollowerProxy> proxy = Proxy();
  ASSERT_TRUE(leader && proxy);
  proxy->SetLeader(leader->address());
  auto channel = Dial(proxy->address());
  auto jobs = v1::Jobs::NewStub(channel);
  auto rdzv = v1::Rendezvous::NewStub(channel);

  // The token goes with the call: a wrong one is the leader's refusal.
  std::string id;
  grpc::Status wrong = Submit(*jobs, "a-guessed-token", &id);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("token"));

  // A daemon registers and watches through the proxy; a job submitted
  // through it is placed on the node: the JoinRound comes down the stream.
  ASSERT_TRUE(Register(*rdzv, "n1").ok());
  Watch watch(*rdzv, "n1");
  EXPECT_TRUE(watch.Await(1).has_welcome());
  grpc::Status st = Submit(*jobs, kToken, &id);
  ASSERT_TRUE(st.ok()) << st.error_message();
  v1::Command join = watch.Await(2);
  EXPECT_EQ(join.join_round().job_id(), id) << join.DebugString();

  // The job is the leader's: asked directly, it knows it.
  auto direct = v1::Jobs::NewStub(Dial(leader->address()));
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::JobStatus job;
  ASSERT_TRUE(direct->Get(&ctx, get, &job).ok());
  EXPECT_EQ(job.spec().name(), "train");
  EXPECT_GE(proxy->calls(), 4u);
}

// With no leader known a call fails UNAVAILABLE (clients retry); once the
// leader it reached is gone, the proxy asks the election again and follows
// the next one.
TEST(FollowerProxyTest, FollowsTheNextLeaderTheElectionNames) {
  std::unique_ptr<RendezvousServer> first = Leader();
  std::unique_ptr<RendezvousServer> second = Leader();
  ASSERT_TRUE(first && second);
  absl::Mutex mu;
  std::string elected;  // what the election says now
  std::unique_ptr<FollowerProxy> proxy = Proxy([&]() -> absl::StatusOr<std::string> {
    absl::MutexLock lock(&mu);
    return elected;
  });
  ASSERT_TRUE(proxy);
  auto jobs = v1::Jobs::NewStub(Dial(proxy->address()));
  std::string id;
  grpc::Status none = Submit(*jobs, kToken, &id);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(none.error_message(), HasSubstr("no leader"));

  proxy->SetLeader(first->address());
  grpc::Status led = Submit(*jobs, kToken, &id);
  ASSERT_TRUE(led.ok()) << led.error_code() << ": " << led.error_message();
  first->Shutdown();
  first.reset();
  {
    absl::MutexLock lock(&mu);
    elected = second->address();
  }
  // The first call after the loss fails (it reached the old leader); the
  // proxy follows the next within its polls.
  const absl::Time deadline = absl::Now() + kWait;
  grpc::Status st;
  while (absl::Now() < deadline) {
    st = Submit(*jobs, kToken, &id);
    if (st.ok()) break;
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(st.ok()) << st.error_message();
  auto direct = v1::Jobs::NewStub(Dial(second->address()));
  grpc::ClientContext ctx;
  Prepare(ctx);
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::JobStatus job;
  EXPECT_TRUE(direct->Get(&ctx, get, &job).ok()) << "the job went elsewhere";
}

// The replica takes over: streams passed on end UNAVAILABLE, and the port
// is free for the service at once.
TEST(FollowerProxyTest, ShutdownEndsStreamsUnavailableAndFreesThePort) {
  std::unique_ptr<RendezvousServer> leader = Leader();
  std::unique_ptr<FollowerProxy> proxy = Proxy();
  ASSERT_TRUE(leader && proxy);
  proxy->SetLeader(leader->address());
  const std::string address = proxy->address();
  auto rdzv = v1::Rendezvous::NewStub(Dial(address));
  ASSERT_TRUE(Register(*rdzv, "n1").ok());
  Watch watch(*rdzv, "n1");
  EXPECT_TRUE(watch.Await(1).has_welcome());
  proxy->Shutdown();
  grpc::Status end = watch.End();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << end.error_message();
  EXPECT_THAT(end.error_message(), HasSubstr("takes over"));
  leader->Shutdown();
  leader.reset();
  std::unique_ptr<RendezvousServer> next = Leader(address);
  ASSERT_TRUE(next) << "the port " << address << " was not freed";
  EXPECT_EQ(next->address(), address);
}

}  // namespace
}  // namespace elastrun::rendezvous
