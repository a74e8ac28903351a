#include "rendezvous/job_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/codec.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Good() {
  v1::JobSpec s;
  s.set_name("train");
  s.set_min_nodes(2);
  s.set_max_nodes(3);
  s.set_nproc_per_node(2);
  s.set_max_restarts(1);
  s.add_argv("python3");
  s.add_argv("train.py");
  (*s.mutable_env())["SEED"] = "1";
  return s;
}

void ExpectBad(const v1::JobSpec& s, const std::string& field, const std::string& what) {
  absl::Status st = ValidateJobSpec(s);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("spec." + field + ":"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(what));
}

TEST(JobSpecTest, GoodSpecPassesAndMapsToRoundConfig) {
  EXPECT_TRUE(ValidateJobSpec(Good()).ok());
  RoundConfig c = RoundConfigFromSpec(Good());
  EXPECT_EQ(c.min_nodes, 2);
  EXPECT_EQ(c.max_nodes, 3);
  EXPECT_EQ(c.max_restarts, 1);
  EXPECT_EQ(c.last_call_timeout, kDefaultLastCallTimeout);
  EXPECT_EQ(c.join_timeout, kDefaultJoinTimeout);
  EXPECT_TRUE(ValidateRoundConfig(c).ok());
}

TEST(JobSpecTest, DefaultsFillNameAndTimeouts) {
  v1::JobSpec s = Good();
  s.clear_name();
  *s.mutable_last_call_timeout() = ToProto(absl::Milliseconds(250));
  v1::JobSpec d = WithDefaults(s);
  EXPECT_EQ(d.name(), "job");
  EXPECT_EQ(FromProto(d.last_call_timeout()), absl::Milliseconds(250));
  EXPECT_EQ(FromProto(d.join_timeout()), kDefaultJoinTimeout);
}

TEST(JobSpecTest, EveryErrorNamesItsField) {
  v1::JobSpec s = Good();
  s.set_min_nodes(4);
  ExpectBad(s, "min_nodes", "MIN (4) is greater than MAX (3)");
  s = Good();
  s.set_min_nodes(0);
  ExpectBad(s, "min_nodes", "out of range");
  s = Good();
  s.set_max_nodes(kMaxNodes + 1);
  ExpectBad(s, "max_nodes", "out of range");
  s = Good();
  s.set_nproc_per_node(0);
  ExpectBad(s, "nproc_per_node", "0 is out of range");
  s = Good();
  s.set_max_restarts(-1);
  ExpectBad(s, "max_restarts", "negative");
  s = Good();
  s.clear_argv();
  ExpectBad(s, "argv", "no command");
  s = Good();
  s.set_argv(0, "");
  ExpectBad(s, "argv[0]", "empty");
  s = Good();
  s.set_name("bad name!");
  ExpectBad(s, "name", "outside [A-Za-z0-9._-]");
  s = Good();
  (*s.mutable_env())["1BAD"] = "x";
  ExpectBad(s, "env", "not a variable name");
  s = Good();
  s.mutable_join_timeout()->set_seconds(-5);
  ExpectBad(s, "join_timeout", "non-negative");
  s = Good();
  *s.mutable_join_timeout() = ToProto(absl::ZeroDuration());
  ExpectBad(s, "join_timeout", "greater than 0");
  s = Good();
  s.mutable_last_call_timeout()->set_seconds(int64_t{1} << 40);
  ExpectBad(s, "last_call_timeout", "too long");
  s = Good();
  s.mutable_hang_timeout()->set_seconds(int64_t{1} << 40);
  ExpectBad(s, "hang_timeout", "at most");
  s = Good();
  s.mutable_hang_timeout()->set_seconds(1);
  s.mutable_hang_timeout()->set_nanos(-5);
  ExpectBad(s, "hang_timeout", "not a duration");
  s = Good();
  s.set_pool("a pool");
  ExpectBad(s, "pool", "outside [A-Za-z0-9._-]");
  s.set_pool(std::string(65, 'p'));
  ExpectBad(s, "pool", "65 characters; at most 64");
}

// What exec could never start, or would start cut short, is refused here
// rather than failing (or running something else) on a node.
TEST(JobSpecTest, WhatExecCannotTakeIsRefused) {
  v1::JobSpec s = Good();
  s.add_argv(std::string("--out=a\0b", 9));
  ExpectBad(s, "argv[2]", "NUL byte");
  s = Good();
  (*s.mutable_env())["PATH_X"] = std::string("a\0b", 3);
  ExpectBad(s, "env.PATH_X", "NUL byte");
  s = Good();
  s.set_working_dir(std::string("/tmp\0/x", 7));
  ExpectBad(s, "working_dir", "NUL byte");
  // 3 MB of arguments, each within its own bound: beyond what exec takes.
  s = Good();
  for (int i = 0; i < 48; ++i) s.add_argv(std::string(64 * 1024 - 1, 'x'));
  ExpectBad(s, "argv", "bytes of arguments and environment");
  s = Good();
  for (int i = 0; i < 8; ++i) s.add_argv(std::string(64 * 1024 - 1, 'x'));
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
}

TEST(JobSpecTest, RunIdIsPrintableAndBounded) {
  v1::JobSpec s = Good();
  s.set_run_id("resnet run/2 @lab");
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.set_run_id(std::string("a\0b", 3));
  ExpectBad(s, "run_id", "control character");
  s.set_run_id("a\nb");
  ExpectBad(s, "run_id", "control character");
  s.set_run_id(std::string(257, 'r'));
  ExpectBad(s, "run_id", "257 characters; at most 256");
}

TEST(JobSpecTest, HangTimeoutNegativeIsOffAndZeroDerived) {
  v1::JobSpec s = Good();
  for (absl::Duration d : {absl::Seconds(-1), absl::ZeroDuration(), absl::Seconds(90)}) {
    *s.mutable_hang_timeout() = ToProto(d);
    EXPECT_TRUE(ValidateJobSpec(s).ok()) << d;
  }
}

}  // namespace
}  // namespace elastrun::rendezvous
