// The service's caller checks over real gRPC on loopback: the token, user
// credentials, job owners.
#include <grpcpp/grpcpp.h>

#include "common/auth.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/server.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "cluster-s3cret";

// How a test call identifies itself.
struct As {
  std::string bearer;      // "authorization: Bearer ..." when set
  std::string credential;  // x-elastrun-credential when set
  std::string owner;       // x-elastrun-owner when set
};

As User(uint32_t uid, const std::string& name, const std::string& token = kToken) {
  return As{"",
            *auth::SignCredential(token, auth::Identity{uid, uid, name},
                                  absl::Now() + absl::Minutes(5)),
            ""};
}
As Cluster(const std::string& owner = "") { return As{kToken, "", owner}; }

class ServerAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.token = kToken;
    o.timer_thread = false;
    absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    auto channel =
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::Jobs::NewStub(channel);
    rdzv_ = v1::Rendezvous::NewStub(channel);
  }

  static void Prepare(grpc::ClientContext& ctx, const As& as) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!as.bearer.empty()) ctx.AddMetadata("authorization", "Bearer " + as.bearer);
    if (!as.credential.empty()) ctx.AddMetadata("x-elastrun-credential", as.credential);
    if (!as.owner.empty()) ctx.AddMetadata("x-elastrun-owner", as.owner);
  }

  grpc::Status Submit(const As& as, std::string* job, v1::JobOwner claimed = {}) {
    v1::SubmitRequest r;
    r.mutable_spec()->set_name("train");
    r.mutable_spec()->set_min_nodes(1);
    r.mutable_spec()->set_max_nodes(1);
    r.mutable_spec()->set_nproc_per_node(1);
    r.mutable_spec()->add_argv("worker");
    r.mutable_spec()->set_wait_for_nodes(true);
    if (claimed.uid() != 0 || !claimed.user().empty())
      *r.mutable_spec()->mutable_owner() = claimed;
    grpc::ClientContext ctx;
    Prepare(ctx, as);
    v1::SubmitResponse resp;
    grpc::Status st = jobs_->Submit(&ctx, r, &resp);
    *job = resp.job_id();
    return st;
  }

  v1::JobOwner Owner(const std::string& job) {
    grpc::ClientContext ctx;
    Prepare(ctx, Cluster());
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::JobStatus s;
    EXPECT_TRUE(jobs_->Get(&ctx, r, &s).ok());
    return s.spec().owner();
  }

  grpc::Status Cancel(const As& as, const std::string& job) {
    grpc::ClientContext ctx;
    Prepare(ctx, as);
    v1::CancelJobRequest r;
    r.set_job_id(job);
    v1::JobStatus resp;
    return jobs_->Cancel(&ctx, r, &resp);
  }

  grpc::Status Logs(const As& as, const std::string& job) {
    grpc::ClientContext ctx;
    Prepare(ctx, as);
    v1::StreamLogsRequest r;
    r.set_job_id(job);
    r.set_rank(-1);
    auto reader = jobs_->StreamLogs(&ctx, r);
    v1::LogChunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish();
  }

  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::unique_ptr<v1::Rendezvous::Stub> rdzv_;
};

TEST_F(ServerAuthTest, UserJobBelongsToTheCredentialsUserNotTheClaimedOne) {
  std::string job;
  v1::JobOwner claimed;
  claimed.set_uid(0);
  claimed.set_user("root");
  ASSERT_TRUE(Submit(User(1000, "alice"), &job, claimed).ok());
  v1::JobOwner owner = Owner(job);
  EXPECT_EQ(owner.uid(), 1000u);
  EXPECT_EQ(owner.user(), "alice");
}

TEST_F(ServerAuthTest, ClusterCallerStatesTheOwner) {
  std::string job;
  ASSERT_TRUE(Submit(Cluster("1001:1001:bob"), &job).ok());
  EXPECT_EQ(Owner(job).uid(), 1001u);
  EXPECT_EQ(Owner(job).user(), "bob");
  ASSERT_TRUE(Submit(Cluster(), &job).ok());
  EXPECT_EQ(Owner(job).user(), "");  // none stated: the daemon's own user
}

TEST_F(ServerAuthTest, OnlyOwnerRootOrClusterCancelsOrReadsLogs) {
  std::string job;
  ASSERT_TRUE(Submit(User(1000, "alice"), &job).ok());
  grpc::Status st = Cancel(User(1001, "bob"), job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("belongs to alice (uid 1000)"));
  EXPECT_EQ(Logs(User(1001, "bob"), job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Anyone identified may look at the queue (as squeue).
  {
    grpc::ClientContext ctx;
    Prepare(ctx, User(1001, "bob"));
    v1::ListJobsResponse resp;
    EXPECT_TRUE(jobs_->List(&ctx, v1::ListJobsRequest(), &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 1);
  }
  EXPECT_TRUE(Logs(User(1000, "alice"), job).ok());
  EXPECT_TRUE(Logs(User(0, "root"), job).ok());
  EXPECT_TRUE(Cancel(User(1000, "alice"), job).ok());

  ASSERT_TRUE(Submit(User(1000, "alice"), &job).ok());
  EXPECT_TRUE(Cancel(Cluster(), job).ok());
}

TEST_F(ServerAuthTest, UserCredentialCannotActAsADaemon) {
  v1::RegisterNodeRequest r;
  r.set_node_id("n0");
  r.set_incarnation("i");
  r.set_addr("127.0.0.1");
  r.set_slots(1);
  grpc::ClientContext ctx;
  Prepare(ctx, User(1000, "alice"));
  v1::RegisterNodeResponse resp;
  grpc::Status st = rdzv_->RegisterNode(&ctx, r, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("RegisterNode"));
}

TEST_F(ServerAuthTest, ForgedExpiredOrMissingCredentialIsUnauthenticated) {
  std::string job;
  grpc::Status st = Submit(User(0, "root", "a-guessed-token"), &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("bad signature"));
  As expired{"",
             *auth::SignCredential(kToken, auth::Identity{1000, 1000, "alice"},
                                   absl::Now() - absl::Seconds(1)),
             ""};
  st = Submit(expired, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(st.error_message(), HasSubstr("expired"));
  st = Submit(As{}, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  st = Submit(As{"wrong", "", ""}, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace elastrun::rendezvous
