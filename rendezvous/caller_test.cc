#include "rendezvous/caller.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret";
const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

CallMetadata WithCredential(const auth::Identity& who,
                            absl::Time expiry = kNow + absl::Minutes(5),
                            const std::string& token = kToken) {
  CallMetadata md;
  md.credential = *auth::SignCredential(token, who, expiry);
  return md;
}

v1::JobStatus JobOwnedBy(uint32_t uid, const std::string& name) {
  v1::JobStatus job;
  job.set_job_id("j-1");
  job.mutable_spec()->mutable_owner()->set_uid(uid);
  job.mutable_spec()->mutable_owner()->set_gid(uid);
  job.mutable_spec()->mutable_owner()->set_user(name);
  return job;
}

const auth::Identity kAlice{1000, 1000, "alice"};
const auth::Identity kBob{1001, 1001, "bob"};

TEST(AuthenticateTest, TokenMakesAClusterCallerWithItsStatedOwner) {
  CallMetadata md;
  md.authorization = "Bearer s3cret";
  md.owner = "1000:100:alice";
  absl::StatusOr<Caller> c = Authenticate(md, kToken, kNow);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->cluster);
  ASSERT_TRUE(c->user.has_value());
  EXPECT_EQ(c->user->uid, 1000u);
  EXPECT_EQ(c->user->gid, 100u);
  EXPECT_EQ(c->user->name, "alice");
}

TEST(AuthenticateTest, CredentialMakesAUserCallerAndIgnoresAStatedOwner) {
  CallMetadata md = WithCredential(kBob);
  md.owner = "0:0:root";  // only cluster callers may state an owner
  absl::StatusOr<Caller> c = Authenticate(md, kToken, kNow);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->cluster);
  EXPECT_EQ(c->user->uid, 1001u);
}

TEST(AuthenticateTest, MissingWrongForgedAndExpiredAreUnauthenticated) {
  EXPECT_THAT(Authenticate({}, kToken, kNow).status().message(),
              HasSubstr("no \"authorization"));
  CallMetadata wrong;
  wrong.authorization = "Bearer guess";
  EXPECT_TRUE(absl::IsUnauthenticated(Authenticate(wrong, kToken, kNow).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(
      Authenticate(WithCredential(kBob, kNow + absl::Minutes(5), "other"), kToken, kNow)
          .status()));
  absl::StatusOr<Caller> expired =
      Authenticate(WithCredential(kBob, kNow - absl::Seconds(1)), kToken, kNow);
  EXPECT_TRUE(absl::IsUnauthenticated(expired.status()));
  EXPECT_THAT(expired.status().message(), HasSubstr("expired"));
  CallMetadata bad_owner;
  bad_owner.authorization = "Bearer s3cret";
  bad_owner.owner = "alice";
  EXPECT_TRUE(absl::IsUnauthenticated(Authenticate(bad_owner, kToken, kNow).status()));
}

TEST(AuthenticateTest, NoTokenConfiguredMeansEveryCallerIsCluster) {
  absl::StatusOr<Caller> c = Authenticate({}, "", kNow);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cluster);
}

TEST(AccessTest, DaemonRpcsNeedTheToken) {
  EXPECT_TRUE(RequireCluster(Caller{true, std::nullopt}, "JoinRound").ok());
  absl::Status st = RequireCluster(Caller{false, kAlice}, "JoinRound");
  EXPECT_TRUE(absl::IsPermissionDenied(st));
  EXPECT_THAT(st.message(), HasSubstr("JoinRound"));
}

TEST(AccessTest, OnlyOwnerRootOrClusterMayTouchAJob) {
  const v1::JobStatus job = JobOwnedBy(1000, "alice");
  EXPECT_TRUE(CheckJobAccess(Caller{false, kAlice}, job, "cancel").ok());
  EXPECT_TRUE(
      CheckJobAccess(Caller{false, auth::Identity{0, 0, "root"}}, job, "cancel").ok());
  EXPECT_TRUE(CheckJobAccess(Caller{true, std::nullopt}, job, "cancel").ok());
  absl::Status st = CheckJobAccess(Caller{false, kBob}, job, "cancel");
  EXPECT_TRUE(absl::IsPermissionDenied(st));
  EXPECT_THAT(st.message(), HasSubstr("job j-1 belongs to alice (uid 1000)"));
}

TEST(AccessTest, JobWithoutOwnerOnlyForClusterAndRoot) {
  v1::JobStatus job;
  job.set_job_id("old-1");
  EXPECT_TRUE(
      absl::IsPermissionDenied(CheckJobAccess(Caller{false, kAlice}, job, "cancel")));
  EXPECT_TRUE(
      CheckJobAccess(Caller{false, auth::Identity{0, 0, "root"}}, job, "cancel").ok());
  EXPECT_TRUE(CheckJobAccess(Caller{true, std::nullopt}, job, "cancel").ok());
}

TEST(AccessTest, OnlyOwnerRootOrClusterSeeTheEnvironment) {
  v1::JobStatus job = JobOwnedBy(1000, "alice");
  job.mutable_spec()->add_argv("train.py");
  (*job.mutable_spec()->mutable_env())["API_KEY"] = "s3cret";
  for (const Caller& may : {Caller{false, kAlice}, Caller{false, auth::Identity{0, 0, "root"}},
                            Caller{true, std::nullopt}}) {
    v1::JobStatus seen = job;
    RedactForCaller(may, &seen);
    EXPECT_EQ(seen.spec().env().at("API_KEY"), "s3cret");
    EXPECT_FALSE(seen.spec().env_hidden());
  }
  v1::JobStatus seen = job;
  RedactForCaller(Caller{false, kBob}, &seen);
  EXPECT_TRUE(seen.spec().env().empty());
  EXPECT_TRUE(seen.spec().env_hidden());
  EXPECT_THAT(seen.spec().argv(), ::testing::ElementsAre("train.py"));  // the rest stays visible
}

TEST(OwnerTest, SubmittedOwnerIsTheCallersNotTheSpecs) {
  v1::JobSpec spec;
  spec.mutable_owner()->set_uid(0);
  spec.mutable_owner()->set_user("root");  // a user claiming root's job
  v1::JobSpec owned = WithOwner(Caller{false, kBob}, spec);
  EXPECT_EQ(owned.owner().uid(), 1001u);
  EXPECT_EQ(owned.owner().user(), "bob");
  EXPECT_FALSE(WithOwner(Caller{true, std::nullopt}, spec).has_owner());
}

TEST(NodeInJobTest, PlacedOrInAnyClosedRound) {
  v1::JobStatus job;
  job.add_nodes()->set_node_id("now");
  job.add_history()->mutable_assignment()->add_nodes()->set_node_id("before");
  EXPECT_TRUE(NodeInJob(job, "now"));
  EXPECT_TRUE(NodeInJob(job, "before"));
  EXPECT_FALSE(NodeInJob(job, "stranger"));
}

}  // namespace
}  // namespace elastrun::rendezvous
