// End to end: a job's timeline (`elastrun events`) and the metrics of the
// service and the daemons, with the real elastrun-rendezvous, real elastrund
// and shell or Python workers. One job sees a worker failure (a restart), a
// node loss (its daemon SIGKILLed) and then succeeds; another has a rank
// hang (it stops itself), is restarted for it and succeeds. Every wait is on
// an event or a poll with a generous deadline.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http.h"
#include "tests/testing/subprocess.h"

namespace elastrun::daemon_testing {
namespace {

using ::testing::HasSubstr;

// Round 0: rank 1 exits 3 (a restart). Round 1: every worker says it is
// ready and waits (a node is then lost). Round 2: every worker exits 0.
constexpr char kScript[] = R"(echo "rank $RANK round $ELASTRUN_ROUND"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then echo "rank 1 gives up" >&2; exit 3; fi
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 60; fi
if [ "$ELASTRUN_ROUND" = 1 ]; then touch "$READY_DIR/ready.$RANK"; exec sleep 60; fi
exit 0)";

TEST(CliEventsE2eTest, TimelineAndMetricsOfAFailureANodeLossAndSuccess) {
  const std::string dir = testing::MakeTempDir("cli_events_e2e");
  setenv("ELASTRUN_SNAPSHOT_BASE", dir.c_str(), 1);
  Cluster cluster(dir,
                  absl::StrCat("ELASTRUN_TEST_MARKER=cli-events-", getpid(), "-", dir));
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartService("127.0.0.1:0", {"--metrics-listen", "127.0.0.1:0"}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(cluster.StartDaemon({}, {"--metrics-listen", "127.0.0.1:0"}));
  }
  ASSERT_TRUE(PollUntil([&] { return cluster.AliveNodes() == 3; }))
      << cluster.DaemonOutput();
  const std::string ready = testing::MakeTempDir("cli_events_ready");
  const std::string cli = testing::BinDir() + "/elastrun";
  const std::vector<std::string> service = {"--rendezvous", cluster.address(),
                                            "--token-file", cluster.token_file()};

  std::vector<std::string> submit = {cli,
                                     "submit",
                                     "--name",
                                     "events",
                                     "--nnodes",
                                     "2:3",
                                     "--nproc-per-node",
                                     "1",
                                     "--max-restarts",
                                     "2",
                                     "--env",
                                     "READY_DIR=" + ready};
  submit.insert(submit.end(), service.begin(), service.end());
  submit.insert(submit.end(), {"--", "/bin/sh", "-c", kScript});
  absl::StatusOr<testing::RunResult> sub = testing::Run(submit);
  ASSERT_TRUE(sub.ok() && sub->exit_code == 0) << (sub.ok() ? sub->output : "");
  const std::string job(absl::StripAsciiWhitespace(sub->output));

  ASSERT_TRUE(testing::WaitForFiles(ready, "ready.", 3, kDeadline).ok())
      << cluster.DaemonOutput();
  // Every daemon's view of round 0's failure, read while all three are up:
  // rank 1 may be on node2, killed next. A daemon records the restart when
  // it starts round 1's workers, before they write their ready files.
  std::vector<double> failing_exits, restarts_timed;
  for (size_t i = 0; i < 3; ++i) {
    const std::string addr = MetricsAddress(cluster.daemon(i));
    failing_exits.push_back(
        Scrape(addr, "elastrund_worker_exits_total{cause=\"exit_code\"}"));
    restarts_timed.push_back(Scrape(addr, "elastrund_restart_seconds_count"));
  }
  cluster.daemon(2).Signal(SIGKILL);
  ASSERT_TRUE(cluster.daemon(2).Wait(kDeadline).ok());
  const v1::JobStatus st = cluster.WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << cluster.DaemonOutput();

  // --json: one array of events.
  std::vector<std::string> events_json = {cli, "events", job, "--json"};
  events_json.insert(events_json.end(), service.begin(), service.end());
  absl::StatusOr<testing::RunResult> js = testing::Run(events_json);
  ASSERT_TRUE(js.ok() && js->exit_code == 0) << (js.ok() ? js->output : "");
  const nlohmann::json events = nlohmann::json::parse(js->output);
  ASSERT_TRUE(events.is_array()) << js->output;
  std::vector<std::string> kinds;
  std::string failed_node;
  for (const nlohmann::json& e : events) {
    kinds.push_back(e.at("kind").get<std::string>());
    if (e.at("kind") == "worker_failed") {
      failed_node = e.at("node_id").get<std::string>();
      EXPECT_EQ(e.at("rank").get<int>(), 1) << e;
      EXPECT_EQ(e.at("round").get<int64_t>(), 0) << e;
      EXPECT_EQ(e.at("message"), "exit code 3") << e;
    }
    if (e.at("kind") == "node_lost") {
      EXPECT_EQ(e.at("node_id"), "node2") << e;
      EXPECT_EQ(e.at("message"), "watch stream closed") << e;
    }
    EXPECT_THAT(e.at("time").get<std::string>(), ::testing::EndsWith("Z")) << e;
  }
  EXPECT_THAT(kinds, ::testing::ElementsAre(
                         "submitted", "round_opened", "round_closed", "worker_failed",
                         "restart", "round_opened", "round_closed", "node_lost",
                         "restart", "round_opened", "round_closed", "job_finished"))
      << js->output;

  // Text: one aligned line per event under a header.
  std::vector<std::string> events_text = {cli, "events", job};
  events_text.insert(events_text.end(), service.begin(), service.end());
  absl::StatusOr<testing::RunResult> text = testing::Run(events_text);
  ASSERT_TRUE(text.ok() && text->exit_code == 0);
  std::vector<std::string> lines = absl::StrSplit(text->output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), events.size() + 1) << text->output;
  EXPECT_THAT(lines[0], ::testing::StartsWith("TIME"));
  const size_t kind_col = lines[0].find("KIND");
  ASSERT_NE(kind_col, std::string::npos);
  for (const std::string& l : lines) {  // every KIND starts in the header's column
    ASSERT_GT(l.size(), kind_col) << l;
    EXPECT_TRUE(l[kind_col - 1] == ' ' && l[kind_col] != ' ') << l;
  }
  EXPECT_THAT(text->output, HasSubstr("failure (restart 1 of 2)"));
  EXPECT_THAT(text->output, HasSubstr("SUCCEEDED"));

  // The service's metrics.
  const std::string svc = MetricsAddress(cluster.service());
  EXPECT_EQ(Scrape(svc, "elastrun_restarts_total{cause=\"failure\"}"), 1);
  EXPECT_EQ(Scrape(svc, "elastrun_restarts_total{cause=\"node_lost\"}"), 1);
  EXPECT_EQ(Scrape(svc, "elastrun_rounds_total"), 3);
  EXPECT_EQ(Scrape(svc, "elastrun_jobs{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Scrape(svc, "elastrun_nodes{state=\"lost\"}"), 1);
  // A surviving daemon's: three attempts, the last one succeeded.
  const std::string node0 = MetricsAddress(cluster.daemon(0));
  EXPECT_EQ(Scrape(node0, "elastrund_attempts_started_total"), 3);
  EXPECT_EQ(Scrape(node0, "elastrund_worker_exits_total{cause=\"success\"}"), 1);
  EXPECT_EQ(Scrape(node0, "elastrund_running_workers"), 0);
  EXPECT_GT(Scrape(node0, "elastrund_log_bytes_forwarded_total"), 0);
  // The node that held rank 1 counted its failing exit and timed one
  // restart of its workers; the others' workers were stopped, not failed.
  ASSERT_THAT(failed_node, ::testing::AnyOf("node0", "node1", "node2")) << js->output;
  for (size_t i = 0; i < 3; ++i) {
    const bool failed_here = failed_node == absl::StrCat("node", i);
    EXPECT_EQ(failing_exits[i], failed_here ? 1 : 0) << "node" << i;
    EXPECT_EQ(restarts_timed[i], failed_here ? 1 : 0) << "node" << i;
  }
  cluster.StopAll();
}

// The Python worker of the hang test: both ranks report 5 steps through the
// helper the daemon puts on PYTHONPATH; in the first attempt rank 1 then
// stops itself (SIGSTOP) and rank 0 waits for it forever, as in a
// collective. The second attempt runs through. One rank per node: each
// daemon judges only its own rank, and the service keeps the first
// verdict, so the node of the waiting rank must not speak first.
constexpr char kHangScript[] = R"(import os, signal
import elastrun
rank = int(os.environ["RANK"])
for step in range(1, 6):
    elastrun.report(step, loss=1.0 / step)
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    while True:  # the stack dump's SIGUSR1 ends a pause()
        signal.pause()
print("rank", rank, "done", flush=True)
)";

TEST(CliEventsE2eTest,
     HungRankOnAnotherNodeRestartsTheJobAndShowsInEventsMetricsAndItsLog) {
  // An absolute interpreter: the daemon resolves argv[0] on its own PATH.
  constexpr char kPython[] = "/usr/bin/python3";
  if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  const std::string dir = testing::MakeTempDir("cli_hang_e2e");
  setenv("ELASTRUN_SNAPSHOT_BASE", dir.c_str(), 1);
  const std::string script = dir + "/worker.py";
  std::ofstream(script) << kHangScript;
  Cluster cluster(dir,
                  absl::StrCat("ELASTRUN_TEST_MARKER=cli-hang-", getpid(), "-", dir));
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartService("127.0.0.1:0", {"--metrics-listen", "127.0.0.1:0"}));
  for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(cluster.StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster.AliveNodes() == 2; }))
      << cluster.DaemonOutput();
  const std::string cli = testing::BinDir() + "/elastrun";
  const std::vector<std::string> service = {"--rendezvous", cluster.address(),
                                            "--token-file", cluster.token_file()};
  // `elastrun COMMAND` with the service's flags, then `args` (a worker's
  // argv after "--" stays last).
  auto run_cli = [&](const std::string& command, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {cli, command};
    argv.insert(argv.end(), service.begin(), service.end());
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv);
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? r->output : "";
  };

  const std::string job(absl::StripAsciiWhitespace(run_cli(
      "submit", {"--name", "hang", "--nnodes", "2", "--nproc-per-node", "1",
                 "--max-restarts", "1", "--hang-timeout", "2s", "--", kPython, script})));
  ASSERT_FALSE(job.empty());
  const v1::JobStatus st = cluster.WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << cluster.DaemonOutput();
  EXPECT_EQ(st.restarts(), 1) << st.DebugString();
  EXPECT_EQ(st.history_size(), 2) << st.DebugString();

  // The timeline names the hung rank, its step and node; the restart says
  // why it happened. Rank 1, stopped, is the cause as soon as rank 0 times
  // out, which may be just before its own time is up: its idle time may
  // read a little under the timeout.
  const nlohmann::json events = nlohmann::json::parse(run_cli("events", {job, "--json"}));
  std::vector<std::string> kinds;
  std::string hung_node;
  for (const nlohmann::json& e : events) {
    kinds.push_back(e.at("kind").get<std::string>());
    if (e.at("kind") == "hang") {
      EXPECT_EQ(e.at("rank").get<int>(), 1) << e;
      EXPECT_EQ(e.at("round").get<int64_t>(), 0) << e;
      hung_node = e.at("node_id").get<std::string>();
      EXPECT_THAT(e.at("message").get<std::string>(),
                  ::testing::StartsWith("rank 1 hung at step 5 (no progress for "))
          << e;
    }
    if (e.at("kind") == "restart") {
      EXPECT_EQ(e.at("message"), "hang (restart 1 of 1)") << e;
    }
  }
  EXPECT_THAT(kinds, ::testing::ElementsAre("submitted", "round_opened", "round_closed",
                                            "hang", "restart", "round_opened",
                                            "round_closed", "job_finished"))
      << events.dump();
  const std::string text = run_cli("events", {job});
  EXPECT_THAT(text, HasSubstr("rank 1 hung at step 5 (no progress for ")) << text;
  EXPECT_THAT(text, HasSubstr("hang (restart 1 of 1)")) << text;

  // The service counts the restart as a hang's, not a plain failure's.
  const std::string svc = MetricsAddress(cluster.service());
  EXPECT_EQ(Scrape(svc, "elastrun_restarts_total{cause=\"hang\"}"), 1);
  EXPECT_EQ(Scrape(svc, "elastrun_restarts_total{cause=\"failure\"}"), 0);
  EXPECT_EQ(Scrape(svc, "elastrun_jobs{state=\"succeeded\"}"), 1);

  // The hung rank's log: the declaration, then its stacks (Python's own,
  // from faulthandler, and the native ones from eu-stack when installed).
  ASSERT_THAT(hung_node, ::testing::AnyOf("node0", "node1")) << events.dump();
  const std::string waiting_node = hung_node == "node0" ? "node1" : "node0";
  const std::string log = testing::ReadFile(
      absl::StrCat(dir, "/", hung_node, "/", job, "/attempt_0/0/stderr.log"));
  EXPECT_THAT(log, HasSubstr("elastrun: rank 1 hung at step 5 (no progress for "));
  EXPECT_THAT(log, HasSubstr("most recent call first"));
  EXPECT_THAT(log, HasSubstr("worker.py\", line "));
  if (system("command -v eu-stack >/dev/null 2>&1") == 0) {
    EXPECT_THAT(log, HasSubstr("TID "));
  } else {
    std::cerr << "eu-stack is not installed (elfutils): native stacks not checked\n";
  }
  // Rank 0 was waiting, not the cause: its node holds its verdict a settle
  // time longer (liveness.h), and is stopped by the service before then.
  EXPECT_THAT(testing::ReadFile(absl::StrCat(dir, "/", waiting_node, "/", job,
                                             "/attempt_0/0/stderr.log")),
              ::testing::Not(HasSubstr("hung")));
  EXPECT_THAT(cluster.Logs(job, 1), HasSubstr("rank 1 done"));
  cluster.StopAll();
}

}  // namespace
}  // namespace elastrun::daemon_testing
