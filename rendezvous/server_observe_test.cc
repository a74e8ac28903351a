// The service's observability over its real ports: gRPC's health service
// and the Events RPC on the gRPC port, the Prometheus endpoint over HTTP,
// and a real Prometheus (Debian's `prometheus`) scraping it.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/server.h"
#include "tests/testing/http.h"
#include "tests/testing/subprocess.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;
constexpr absl::Duration kWait = absl::Seconds(90);

std::unique_ptr<RendezvousServer> StartServer() {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::shared_ptr<grpc::Channel> Dial(const RendezvousServer& s) {
  return grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials());
}

// A pending job (no node registered; it waits for nodes).
std::string SubmitPending(const RendezvousServer& s) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_name("observed");
  r.mutable_spec()->set_min_nodes(1);
  r.mutable_spec()->set_max_nodes(1);
  r.mutable_spec()->set_nproc_per_node(1);
  r.mutable_spec()->add_argv("worker");
  r.mutable_spec()->set_wait_for_nodes(true);
  v1::SubmitResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = v1::Jobs::NewStub(Dial(s))->Submit(&ctx, r, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.job_id();
}

// grpc.health.v1.Health/Check for `service` through a generic call: Debian
// ships no health proto, so the request is encoded here (field 1, the
// service name) and the answer's bytes are returned (08 01: SERVING).
struct HealthAnswer {
  grpc::Status status;
  std::string bytes;
};
HealthAnswer CheckHealth(std::shared_ptr<grpc::Channel> channel, const std::string& service) {
  std::string request;
  if (!service.empty()) {
    request = absl::StrCat(std::string(1, '\x0a'),
                           std::string(1, static_cast<char>(service.size())), service);
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  grpc::ByteBuffer resp;
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
  HealthAnswer answer;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status st) {
                   answer.status = st;
                   done.Notify();
                 });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(kWait + absl::Seconds(5)));
  std::vector<grpc::Slice> slices;
  if (answer.status.ok() && resp.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      answer.bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return answer;
}

TEST(ServerHealthTest, HealthServiceAnswersServingOnTheGrpcPort) {
  std::unique_ptr<RendezvousServer> s = StartServer();
  ASSERT_NE(s, nullptr);
  const HealthAnswer overall = CheckHealth(Dial(*s), "");
  ASSERT_TRUE(overall.status.ok()) << overall.status.error_message();
  EXPECT_EQ(overall.bytes, std::string("\x08\x01", 2));  // status: SERVING
  // An unknown service name is NOT_FOUND, as the health protocol says.
  const HealthAnswer unknown = CheckHealth(Dial(*s), "no.such.Service");
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(ServerEventsTest, EventsRpcAndMetricsEndpointShowASubmittedJob) {
  std::unique_ptr<RendezvousServer> s = StartServer();
  ASSERT_NE(s, nullptr);
  const std::string job = SubmitPending(*s);
  v1::EventsRequest r;
  r.set_job_id(job);
  v1::EventsResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(v1::Jobs::NewStub(Dial(*s))->Events(&ctx, r, &resp).ok());
  ASSERT_EQ(resp.events_size(), 1);
  EXPECT_EQ(resp.events(0).kind(), "submitted");

  ASSERT_THAT(s->metrics_address(), ::testing::StartsWith("127.0.0.1:"));
  absl::StatusOr<testing::HttpAnswer> m = testing::HttpGet(s->metrics_address(), "/metrics");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->status, 200);
  EXPECT_THAT(m->head, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(m->body, HasSubstr("\nelastrun_jobs{state=\"pending\"} 1\n"));
  EXPECT_THAT(m->body, HasSubstr("\nelastrun_rounds_total 0\n"));
  absl::StatusOr<testing::HttpAnswer> other = testing::HttpGet(s->metrics_address(), "/");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->status, 404);
}

bool HavePrometheus() {
  absl::StatusOr<testing::RunResult> r =
      testing::Run({"prometheus", "--version"}, {}, absl::Seconds(30));
  return r.ok() && r->exit_code == 0;
}

// Asks Prometheus's API for `query` until an answer holds `want`, polling
// (Prometheus scrapes on its own schedule) up to kWait.
bool QueryUntil(const std::string& api, const std::string& query, const std::string& want,
                std::string* last) {
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    absl::StatusOr<testing::HttpAnswer> a =
        testing::HttpGet(api, "/api/v1/query?query=" + query);
    if (a.ok()) {
      *last = a->body;
      if (a->status == 200 && absl::StrContains(a->body, want)) return true;
    }
    absl::SleepFor(absl::Milliseconds(100));  // a poll interval, not a wait for an event
  }
  return false;
}

TEST(PrometheusTest, RealPrometheusScrapesTheService) {
  if (!HavePrometheus()) {
    GTEST_SKIP() << "prometheus is not installed (Debian package prometheus; "
                    "scripts/setup.sh installs it)";
  }
  std::unique_ptr<RendezvousServer> s = StartServer();
  ASSERT_NE(s, nullptr);
  SubmitPending(*s);
  const std::string dir = testing::MakeTempDir("prometheus_test");
  const std::string config = dir + "/prometheus.yml";
  FILE* f = std::fopen(config.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f,
               "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
               "scrape_configs:\n  - job_name: elastrun\n    static_configs:\n"
               "      - targets: ['%s']\n",
               s->metrics_address().c_str());
  std::fclose(f);
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string api = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> prom = testing::Subprocess::Start(
      {"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + dir + "/data",
       "--web.listen-address=" + api});
  ASSERT_TRUE(prom.ok()) << prom.status();

  std::string last;
  // up == 1: Prometheus scraped the endpoint and could parse what it read.
  EXPECT_TRUE(QueryUntil(api, "up", "\"value\":[", &last) &&
              absl::StrContains(last, "\"job\":\"elastrun\"") &&
              QueryUntil(api, "up", "\"1\"]", &last))
      << last << "\n" << (*prom)->Output();
  EXPECT_TRUE(QueryUntil(api, "elastrun_jobs%7Bstate%3D%22pending%22%7D", "\"1\"]", &last))
      << last << "\n" << (*prom)->Output();

  (*prom)->Signal(SIGTERM);
  EXPECT_TRUE((*prom)->Wait(kWait).ok());
  EXPECT_TRUE(testing::Run({"rm", "-rf", dir}).ok());
}

}  // namespace
}  // namespace elastrun::rendezvous
