// A read command against a real gRPC server that is not up yet when the
// command starts: the command retries until the server listens, then prints
// what it got. The server starts only once the command has failed a first
// call (its first backoff pause), so the test exercises the retry every time.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/cli/cli.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

// A Jobs service that knows one RUNNING job, "j-1".
class OneJobService final : public v1::Jobs::Service {
  grpc::Status Get(grpc::ServerContext*, const v1::GetJobRequest* req,
                   v1::JobStatus* resp) override {
    if (req->job_id() != "j-1") return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job");
    resp->set_job_id("j-1");
    resp->set_state(v1::JOB_STATE_RUNNING);
    return grpc::Status::OK;
  }
};

TEST(CliRetryTest, StatusWaitsForAServiceThatComesUpLate) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0) << "no loopback port could be bound";
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::Notification first_failure;
  std::ostringstream out, err;
  CliContext ctx = RealCliContext();
  ctx.out = &out;
  ctx.err = &err;
  // The real pause, after telling the test that a call has failed.
  ctx.sleep = [&](absl::Duration d) {
    if (!first_failure.HasBeenNotified()) first_failure.Notify();
    absl::SleepFor(d);
  };
  int rc = -1;
  std::thread cli([&] {
    rc = RunCli({"status", "j-1", "--rendezvous", address, "--retry-for", "60s", "--token", "t"},
                ctx);
  });
  // EXPECT, not ASSERT: the thread must be joined whatever happens.
  EXPECT_TRUE(first_failure.WaitForNotificationWithTimeout(absl::Seconds(60)));

  OneJobService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr) << "cannot listen on " << address;
  cli.join();
  if (server) server->Shutdown();

  EXPECT_EQ(rc, kExitOk) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("RUNNING"));
  EXPECT_THAT(err.str(), HasSubstr("service at " + address + " unavailable; retrying"));
}

// gRPC cancels calls that arrive while a server shuts down (a service
// stopping, a follower replica taking over its port): the first call here
// ends CANCELLED as those do, and the command retries it as an outage.
class CancelsFirstCallService final : public v1::Jobs::Service {
  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                   v1::JobStatus* resp) override {
    if (calls_++ == 0) return grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled");
    return static_cast<v1::Jobs::Service&>(one_).Get(ctx, req, resp);
  }
  std::atomic<int> calls_{0};
  OneJobService one_;
};

TEST(CliRetryTest, ACallTheServiceCancelledIsRetried) {
  CancelsFirstCallService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::ostringstream out, err;
  CliContext ctx = RealCliContext();
  ctx.out = &out;
  ctx.err = &err;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const int rc = RunCli(
      {"status", "j-1", "--rendezvous", address, "--retry-for", "60s", "--token", "t"},
      ctx);
  server->Shutdown();
  EXPECT_EQ(rc, kExitOk) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("RUNNING"));
  EXPECT_THAT(err.str(), HasSubstr("closed the call"));
}

}  // namespace
}  // namespace elastrun::launcher
