#include "launcher/cli/format.h"

#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

// A job that failed once on n2 (rank 3, exit 1), re-formed, then failed
// again by a signal past max_restarts.
v1::JobStatus FailedJob() {
  v1::JobStatus s;
  s.set_job_id("mnist-7");
  s.mutable_spec()->set_name("mnist");
  s.mutable_spec()->set_min_nodes(2);
  s.mutable_spec()->set_max_nodes(3);
  s.mutable_spec()->set_nproc_per_node(2);
  s.mutable_spec()->set_max_restarts(1);
  s.mutable_spec()->add_argv("python");
  s.mutable_spec()->add_argv("train.py");
  s.set_state(v1::JOB_STATE_FAILED);
  s.set_phase(v1::ROUND_PHASE_DONE);
  s.set_round(2);
  s.set_restarts(1);
  s.set_world_size(4);
  s.set_finish_reason("max_restarts (1) exceeded");
  *s.mutable_submit_time() = At(1700000000);
  *s.mutable_finish_time() = At(1700000100);
  for (int id = 1; id <= 2; ++id) {
    v1::RoundRecord* r = s.add_history();
    r->set_id(id);
    r->set_end_reason(id == 1 ? "failure" : "failed");
    r->set_counted_as_restart(id == 1);
    *r->mutable_opened_time() = At(1700000000 + id);
    r->mutable_assignment()->set_round(id);
    r->mutable_assignment()->set_world_size(4);
    for (const char* node : {"n1", "n2"}) {
      r->mutable_assignment()->add_nodes()->set_node_id(node);
    }
    v1::WorkerFailure* f = r->add_failures();
    f->set_node_id("n2");
    f->set_round(id);
    f->set_rank(3);
    f->set_local_rank(1);
    if (id == 1) {
      f->set_exit_code(1);
      f->set_message("CUDA out of memory");
    } else {
      f->set_signal(9);
    }
  }
  *s.mutable_root_cause() = s.history(1).failures(0);
  v1::JobNode* n = s.add_nodes();
  n->set_node_id("n1");
  n->set_state("SUCCEEDED");
  n->set_group_rank(0);
  n = s.add_nodes();
  n->set_node_id("n2");
  n->set_state("LOST");
  n->set_group_rank(-1);
  v1::Progress* p = s.mutable_last_progress();
  p->set_node_id("n1");
  p->set_round(2);
  p->set_rank(0);
  p->set_step(120);
  (*p->mutable_metrics())["loss"] = 0.5;
  return s;
}

// The JSON is the proto's, printed by protobuf, with what scripts read
// made plain: short enum names, 64-bit integers as numbers, nulls.
TEST(CliFormatTest, StatusJsonIsTheProtoWithPlainValues) {
  const Json j = ProtoJson(FailedJob());
  for (const char* key :
       {"job_id", "spec", "state", "phase", "round", "restarts", "world_size", "history",
        "nodes", "last_progress", "root_cause", "finish_reason", "submit_time",
        "finish_time", "pending_reason"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["phase"], "DONE");
  EXPECT_EQ(j["round"], 2);  // an int64: a number, not "2"
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["spec"]["min_nodes"], 2);
  EXPECT_EQ(j["spec"]["max_nodes"], 3);
  EXPECT_EQ(j["submit_time"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["root_cause"]["node_id"], "n2");
  EXPECT_EQ(j["root_cause"]["signal"], 9);
  EXPECT_EQ(j["nodes"][1]["state"], "LOST");
  EXPECT_EQ(j["last_progress"]["step"], 120);
  EXPECT_EQ(j["last_progress"]["metrics"]["loss"], 0.5);
  ASSERT_EQ(j["history"].size(), 2u);
  EXPECT_EQ(j["history"][0]["id"], 1);
  EXPECT_EQ(j["history"][0]["end_reason"], "failure");
  EXPECT_EQ(j["history"][0]["counted_as_restart"], true);
  EXPECT_EQ(j["history"][0]["failures"][0]["exit_code"], 1);
  EXPECT_EQ(j["history"][0]["failures"][0]["message"], "CUDA out of memory");
  EXPECT_EQ(j["history"][0]["assignment"]["nodes"][1]["node_id"], "n2");
  EXPECT_TRUE(j["history"][0]["closed_time"].is_null());
}

TEST(CliFormatTest, PendingJobJsonHasNulls) {
  v1::JobStatus s;
  s.set_job_id("job-1");
  s.set_state(v1::JOB_STATE_PENDING);
  s.set_phase(v1::ROUND_PHASE_QUEUED);
  const Json j = ProtoJson(s);
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(j["phase"], "QUEUED");
  EXPECT_EQ(j["round"], 0);
  EXPECT_TRUE(j["root_cause"].is_null());
  EXPECT_TRUE(j["last_progress"].is_null());
  EXPECT_TRUE(j["finish_time"].is_null());
  EXPECT_TRUE(j["history"].is_array());
  EXPECT_TRUE(j["nodes"].is_array());
  // Every field is there: unset scalars with their zero value.
  EXPECT_EQ(j["restarts"], 0);
  EXPECT_EQ(j["finish_reason"], "");
  EXPECT_TRUE(j["spec"].is_null());
}

TEST(CliFormatTest, PendingJobTextSaysWhy) {
  v1::JobStatus s;
  s.set_job_id("job-1");
  s.set_state(v1::JOB_STATE_PENDING);
  s.set_phase(v1::ROUND_PHASE_QUEUED);
  *s.mutable_submit_time() = At(1700000000);
  const std::string text = FormatJobStatus(s);
  EXPECT_THAT(text, HasSubstr("PENDING (queued: waiting for nodes with free slots)"));
  EXPECT_THAT(text, HasSubstr("2023-11-14 22:13:20 UTC"));
  EXPECT_THAT(text, HasSubstr("progress:    -"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("run id:")));
  s.mutable_spec()->set_run_id("job-1@00c0ffee00c0ffee");
  EXPECT_THAT(FormatJobStatus(s), HasSubstr("run id:      job-1@00c0ffee00c0ffee\n"));
  EXPECT_THAT(FormatJobStatus(s), ::testing::Not(HasSubstr("pool:")));
  s.mutable_spec()->set_pool("run.j7");
  EXPECT_THAT(FormatJobStatus(s), HasSubstr("pool:        run.j7\n"));
  // The service's own reason, when it gives one, also on the one-line form.
  s.set_pending_reason("waiting for nodes: job needs 1 node(s) with 2 slots each");
  EXPECT_THAT(FormatJobStatus(s),
              HasSubstr("PENDING (queued: waiting for nodes: job needs 1 node(s) with 2 "
                        "slots each)"));
  EXPECT_EQ(FormatJobLine(s),
            "job-1 PENDING (round 0, world size 0, 0 restarts): waiting for nodes: job "
            "needs 1 node(s) with 2 slots each");
  s.set_pending_reason("");
  s.set_state(v1::JOB_STATE_RUNNING);
  s.set_phase(v1::ROUND_PHASE_JOINING);
  s.set_round(3);
  EXPECT_THAT(FormatJobStatus(s), HasSubstr("RUNNING (nodes joining round 3)"));
}

TEST(CliFormatTest, StatusTextShowsHistoryAndCauses) {
  const std::string text = FormatJobStatus(FailedJob());
  EXPECT_THAT(text, HasSubstr("mnist-7"));
  EXPECT_THAT(text, HasSubstr("FAILED"));
  EXPECT_THAT(text, HasSubstr("2:3 x 2 workers"));
  EXPECT_THAT(text, HasSubstr("1 of 1"));
  EXPECT_THAT(
      text, HasSubstr("round 1: failure (counted as a restart); world size 4 on n1,n2"));
  EXPECT_THAT(text,
              HasSubstr("root cause: node n2 rank 3 (local 1), round 1: exit code 1: "
                        "CUDA out of memory"));
  EXPECT_THAT(
      text, HasSubstr("node n2 rank 3 (local 1), round 2: killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(text, HasSubstr("step 120 (rank 0 on n1, round 2) loss=0.5"));
  EXPECT_THAT(text, HasSubstr("n2"));
  EXPECT_THAT(text, HasSubstr("LOST"));
}

TEST(CliFormatTest, JobLineSaysWhyItFailed) {
  EXPECT_EQ(
      FormatJobLine(FailedJob()),
      "mnist-7 FAILED (round 2, world size 4, 1 restart): max_restarts (1) exceeded; "
      "root cause: node n2 rank 3 (local 1), round 2: killed by signal 9 (SIGKILL)");
  v1::JobStatus ok = FailedJob();
  ok.set_state(v1::JOB_STATE_SUCCEEDED);
  ok.set_restarts(0);
  EXPECT_EQ(FormatJobLine(ok), "mnist-7 SUCCEEDED (round 2, world size 4, 0 restarts)");
}

TEST(CliFormatTest, HungRootCauseSaysSo) {
  v1::JobStatus s = FailedJob();
  v1::WorkerFailure* f = s.mutable_root_cause();
  f->set_rank(1);
  f->set_signal(15);
  f->set_hung(true);
  f->set_hung_step(5);
  f->set_message("rank 1 hung at step 5 (no progress for 2s)");
  EXPECT_THAT(FormatJobStatus(s),
              HasSubstr("rank 1 hung at step 5 (no progress for 2s)"));
  EXPECT_THAT(FormatJobStatus(s), Not(HasSubstr("SIGTERM")));
  EXPECT_EQ(ProtoJson(s)["root_cause"]["hung_step"], 5);
}

TEST(CliFormatTest, ListJsonAndText) {
  v1::ListJobsResponse r;
  *r.add_jobs() = FailedJob();
  const Json j = ProtoJson(r);
  ASSERT_EQ(j["jobs"].size(), 1u);
  EXPECT_EQ(j["jobs"][0]["job_id"], "mnist-7");
  EXPECT_EQ(j["jobs"][0]["state"], "FAILED");
  EXPECT_EQ(j["jobs"][0], ProtoJson(FailedJob()));
  std::string text = FormatJobList(r);
  EXPECT_THAT(text, HasSubstr("JOB"));
  EXPECT_THAT(text, HasSubstr("mnist-7"));
  EXPECT_THAT(text, HasSubstr("OWNER"));
  EXPECT_THAT(text, ::testing::MatchesRegex("(.|\n)*mnist-7 +- +FAILED(.|\n)*"));
  r.mutable_jobs(0)->mutable_spec()->mutable_owner()->set_uid(1000);
  r.mutable_jobs(0)->mutable_spec()->mutable_owner()->set_user("alice");
  text = FormatJobList(r);
  EXPECT_THAT(text, ::testing::MatchesRegex("(.|\n)*mnist-7 +alice +FAILED(.|\n)*"));
  EXPECT_THAT(FormatJobStatus(r.jobs(0)), HasSubstr("\nowner:       alice (uid 1000)\n"));
  EXPECT_THAT(text, HasSubstr("2:3"));
  EXPECT_EQ(FormatJobList(v1::ListJobsResponse()), "no jobs\n");
  EXPECT_EQ(ProtoJson(v1::ListJobsResponse())["jobs"], Json::array());
}

TEST(CliFormatTest, NodesJsonAndText) {
  v1::ListNodesResponse r;
  v1::NodeInfo* n = r.add_nodes();
  n->set_node_id("n1");
  n->set_addr("10.0.0.1");
  n->set_slots(8);
  n->set_free_slots(6);
  (*n->mutable_labels())["gpu"] = "a100";
  n->set_state(v1::NODE_STATE_ALIVE);
  n->add_jobs("mnist-7");
  const Json j = ProtoJson(r);
  for (const char* key :
       {"node_id", "addr", "slots", "free_slots", "labels", "state", "watching", "jobs",
        "lost_reason", "registered_time", "lease_expiry"}) {
    EXPECT_TRUE(j["nodes"][0].contains(key)) << key;
  }
  EXPECT_EQ(j["nodes"][0]["state"], "ALIVE");
  EXPECT_EQ(j["nodes"][0]["labels"]["gpu"], "a100");
  EXPECT_EQ(j["nodes"][0]["jobs"][0], "mnist-7");
  EXPECT_EQ(j["nodes"][0]["slots"], 8);
  EXPECT_EQ(j["nodes"][0]["watching"], false);
  EXPECT_TRUE(j["nodes"][0]["lease_expiry"].is_null());
  const std::string text = FormatNodeList(r);
  EXPECT_THAT(text, HasSubstr("10.0.0.1"));
  EXPECT_THAT(text, HasSubstr("gpu=a100"));
  EXPECT_THAT(text, HasSubstr("mnist-7"));
  EXPECT_THAT(text, Not(HasSubstr("LOST")));
  EXPECT_EQ(FormatNodeList(v1::ListNodesResponse()), "no nodes registered\n");
}

TEST(CliFormatTest, ADrainedNodeOrOneOfAPoolSaysSoInItsState) {
  v1::ListNodesResponse r;
  v1::NodeInfo* a = r.add_nodes();
  a->set_node_id("a");
  a->set_state(v1::NODE_STATE_ALIVE);
  a->set_draining(true);
  v1::NodeInfo* b = r.add_nodes();
  b->set_node_id("b");
  b->set_state(v1::NODE_STATE_LOST);
  b->set_lost_reason("lease expired");
  b->set_draining(true);
  v1::NodeInfo* c = r.add_nodes();
  c->set_node_id("c");
  c->set_state(v1::NODE_STATE_ALIVE);
  c->set_pool("run.j7");  // a node of `elastrun run --rdzv-backend elastrun`
  const std::string text = FormatNodeList(r);
  EXPECT_THAT(text, HasSubstr("ALIVE (draining)"));
  EXPECT_THAT(text, HasSubstr("LOST (lease expired; draining)"));
  EXPECT_THAT(text, HasSubstr("ALIVE (pool run.j7)"));
  EXPECT_EQ(ProtoJson(r)["nodes"][0]["draining"], true);
}

}  // namespace
TEST(CliFormatTest, EventsTextIsOneAlignedLinePerEvent) {
  v1::EventsResponse r;
  v1::JobEvent* e = r.add_events();
  *e->mutable_time() = At(1700000000);
  e->mutable_time()->set_nanos(250000000);
  e->set_kind("round_opened");
  e->set_rank(-1);
  e = r.add_events();
  *e->mutable_time() = At(1700000003);
  e->set_kind("worker_failed");
  e->set_round(12);
  e->set_node_id("n2");
  e->set_rank(3);
  e->set_message("exit code 1: boom");
  const std::string text = FormatEvents(r);
  EXPECT_EQ(text,
            "TIME                     KIND           ROUND  NODE  RANK  MESSAGE\n"
            "2023-11-14 22:13:20.250  round_opened   0      -     -     -\n"
            "2023-11-14 22:13:23.000  worker_failed  12     n2    3     exit code 1: boom\n");
  EXPECT_EQ(FormatEvents(v1::EventsResponse()), "no events\n");
}

TEST(RankPrefixerTest, EveryLineOfAChunkIsPrefixed) {
  RankPrefixer p;
  EXPECT_EQ(p.Prefix(0, "stdout", "a\nb\nc\n"), "[rank0]:a\n[rank0]:b\n[rank0]:c\n");
  EXPECT_EQ(p.Prefix(1, "stdout", "\n\n"), "[rank1]:\n[rank1]:\n");
  EXPECT_EQ(p.Prefix(1, "stdout", ""), "");
}

TEST(RankPrefixerTest, ALineSplitAcrossChunksIsPrefixedOnce) {
  RankPrefixer p;
  EXPECT_EQ(p.Prefix(2, "stdout", "hel"), "[rank2]:hel");
  EXPECT_EQ(p.Prefix(2, "stdout", "lo\nnext"), "lo\n[rank2]:next");
  EXPECT_EQ(p.Prefix(2, "stdout", "\n"), "\n");
  EXPECT_EQ(p.Prefix(2, "stdout", "new\n"), "[rank2]:new\n");
}

// The chunks as printed, split into lines: each must start with its rank's
// prefix and hold one worker line (or a piece of one), never two glued.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

TEST(RankPrefixerTest, InterleavedStdoutAndStderrOfOneRankKeepTheirPrefixes) {
  RankPrefixer p;
  std::string out;
  out += p.Prefix(0, "stdout", "step 1 loss");
  out += p.Prefix(0, "stderr", "warning: slow\n");
  out += p.Prefix(0, "stdout", " 0.5\nstep 2\n");
  out += p.Prefix(0, "stderr", "warn");
  out += p.Prefix(0, "stdout", "step 3\n");
  out += p.Prefix(0, "stderr", "ing 2\n");
  EXPECT_THAT(Lines(out),
              ::testing::ElementsAre("[rank0]:step 1 loss", "[rank0]:warning: slow",
                                     "[rank0]: 0.5", "[rank0]:step 2", "[rank0]:warn",
                                     "[rank0]:step 3", "[rank0]:ing 2"));
}

TEST(RankPrefixerTest, AnotherRanksOutputEndsAHalfLineAndItsRestIsPrefixed) {
  RankPrefixer p;
  std::string out;
  out += p.Prefix(2, "stdout", "hel");
  out += p.Prefix(3, "stdout", "x\ny");
  out += p.Prefix(2, "stdout", "lo\nnext");
  out += p.Prefix(3, "stdout", "\n");  // ends "y", which was cut: no empty line
  out += p.Prefix(2, "stdout", "\n");
  EXPECT_EQ(out, "[rank2]:hel\n[rank3]:x\n[rank3]:y\n[rank2]:lo\n[rank2]:next\n");
}

}  // namespace elastrun::launcher
