#include "common/progress.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun {
namespace {

TEST(ProgressTest, RoundTrip) {
  ProgressReport r;
  r.rank = 3;
  r.step = 1200;
  r.metrics = {{"loss", 0.25}, {"lr", 0.01}, {"bad name", 1}};
  auto back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->step, 1200);
  EXPECT_DOUBLE_EQ(back->metrics.at("loss"), 0.25);
  EXPECT_DOUBLE_EQ(back->metrics.at("lr"), 0.01);
  EXPECT_EQ(back->metrics.count("bad_name"), 1u);
}

TEST(ProgressTest, BeatRoundTripsAndIsNoMetric) {
  ProgressReport r;
  r.rank = 1;
  r.step = -1;  // A beat before any step.
  r.beat = 7;
  r.metrics = {{"beat", 3}};  // Would read back as the beat: left out.
  auto back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, -1);
  EXPECT_EQ(back->beat, 7);
  EXPECT_TRUE(back->metrics.empty());
  // No beat: none on the wire, 0 back.
  r.beat = 0;
  EXPECT_EQ(EncodeProgress(r).find("beat"), std::string::npos);
  EXPECT_EQ(DecodeProgress(EncodeProgress(r))->beat, 0);
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 beat=0").ok());
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 beat=x").ok());
}

TEST(ProgressTest, GarbageIsRejected) {
  EXPECT_FALSE(DecodeProgress("").ok());
  EXPECT_FALSE(DecodeProgress("step=1").ok());
  EXPECT_FALSE(DecodeProgress("rank=x step=1").ok());
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 loss=abc").ok());
  EXPECT_FALSE(DecodeProgress("rank=0 step=1 loss").ok());
  EXPECT_FALSE(DecodeProgress(std::string(5000, 'a')).ok());
}

TEST(BarrierArrivalTest, RoundTripAndErrors) {
  BarrierArrival a;
  a.rank = 5;
  a.local_world_size = 2;
  a.name = "exit.1";
  const std::string wire = EncodeBarrier(a);
  EXPECT_TRUE(IsBarrierDatagram(wire));
  EXPECT_FALSE(IsBarrierDatagram(EncodeProgress(ProgressReport{})));
  auto back = DecodeBarrier(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->local_world_size, 2);
  EXPECT_EQ(back->name, "exit.1");
  EXPECT_FALSE(DecodeBarrier("barrier rank=1 name=x").ok());  // no local_world_size
  EXPECT_FALSE(DecodeBarrier("barrier rank=1 local_world_size=1 name=a/b").ok());
  EXPECT_FALSE(ValidateBarrierName("").ok());
  EXPECT_TRUE(ValidateBarrierName("epoch-3_end.x").ok());
}

TEST(ProgressTest, JobTravelsAndOldFormHasNone) {
  ProgressReport r;
  r.job_id = "train-3";
  r.rank = 1;
  r.step = 7;
  r.metrics = {{"job", 5}, {"loss", 1}};  // a metric named "job" cannot travel
  auto back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "train-3");
  EXPECT_EQ(back->metrics.count("job"), 0u);
  // The service's run ids travel too ("<job>@<cluster>").
  r.job_id = "train-3@00c0ffee00c0ffee";
  EXPECT_EQ(DecodeProgress(EncodeProgress(r))->job_id, "train-3@00c0ffee00c0ffee");
  r.job_id = "train-3";
  EXPECT_EQ(back->metrics.count("loss"), 1u);
  // A job that cannot travel is left out rather than garbling the report.
  r.job_id = "a b";
  back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "");
  // The form without a job (older workers) still decodes.
  back = DecodeProgress("rank=0 step=3");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "");
  EXPECT_FALSE(DecodeProgress("job=a/b rank=0 step=3").ok());
}

TEST(BarrierArrivalTest, JobTravelsAndOldFormHasNone) {
  BarrierArrival a;
  a.job_id = "train-3";
  a.local_world_size = 1;
  a.name = "x";
  auto back = DecodeBarrier(EncodeBarrier(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "train-3");
  back = DecodeBarrier("barrier rank=0 local_world_size=1 name=x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, "");
  EXPECT_FALSE(DecodeBarrier("barrier job= rank=0 local_world_size=1 name=x").ok());
}

}  // namespace
TEST(ProgressTest, SecretTravelsAndBadOnesAreRejected) {
  const std::string secret = NewAgentSecret();
  ASSERT_EQ(secret.size(), 32u);
  EXPECT_TRUE(ValidSecret(secret));
  EXPECT_NE(secret, NewAgentSecret());
  ProgressReport r;
  r.secret = secret;
  r.rank = 2;
  r.step = 9;
  r.metrics["secret"] = 1;  // cannot pose as the secret
  auto back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->secret, secret);
  EXPECT_TRUE(back->metrics.empty());
  // A secret that is not hex never travels; a datagram with one is refused.
  r.secret = "not hex";
  EXPECT_EQ(DecodeProgress(EncodeProgress(r))->secret, "");
  EXPECT_FALSE(DecodeProgress("secret=XYZ rank=0 step=1").ok());
  EXPECT_EQ(DecodeProgress("rank=0 step=1")->secret, "");

  BarrierArrival a;
  a.secret = secret;
  a.name = "b";
  auto arrival = DecodeBarrier(EncodeBarrier(a));
  ASSERT_TRUE(arrival.ok()) << arrival.status();
  EXPECT_EQ(arrival->secret, secret);
  EXPECT_FALSE(DecodeBarrier("barrier secret=G rank=0 local_world_size=1 name=b").ok());
}

}  // namespace elastrun
