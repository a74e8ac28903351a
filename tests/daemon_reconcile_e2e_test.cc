// End to end: the service and its daemons reconcile after a service
// restart. Real elastrun-rendezvous and elastrund processes, shell workers
// (no torch). A service restarted on an empty state dir has the daemon
// stop the workers of the job it forgot (checked by PID); a service
// restarted on its state dir still shows the jobs' logs; a job RUNNING in
// the stored state whose daemon does not come back fails once the lease
// (the grace) ran out, and its node takes the next job.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::ClusterTest;
using daemon_testing::kDeadline;
using daemon_testing::PollUntil;
using testing::BinDir;
using ::testing::HasSubstr;

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

class DaemonReconcileE2eTest : public ClusterTest {
 protected:
  void SetUp() override {
    MakeCluster("daemon_reconcile_e2e");
    seen_ = Subfolder("seen");
    listen_ = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  }
  void TearDown() override {
    for (pid_t pid : workers_) {
      if (Alive(pid)) kill(pid, SIGKILL);  // a failed test's leftovers
    }
    ClusterTest::TearDown();
  }

  // `elastrun submit` of a one-node job of two shell workers; its id.
  std::string Submit(const std::string& name, const std::string& script) {
    absl::StatusOr<testing::RunResult> r = testing::Run(
        {BinDir() + "/elastrun", "submit", "--rendezvous", cluster_->address(), "--name",
         name, "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "0", "--",
         "/bin/sh", "-c", script},
        {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? std::string(absl::StripTrailingAsciiWhitespace(r->output)) : "";
  }

  // Workers that write their PID into seen/<tag><RANK> and wait for ever.
  std::string Forever(const std::string& tag) {
    // The temporary name must not start with `tag`: WaitForFiles counts
    // names by prefix.
    return absl::StrCat("echo $$ > ", seen_, "/tmp.", tag, "$RANK && mv ", seen_, "/tmp.",
                        tag, "$RANK ", seen_, "/", tag, "$RANK; exec sleep 100000");
  }

  // Waits for the two workers of Forever(tag) and returns their PIDs.
  std::vector<pid_t> WorkerPids(const std::string& tag) {
    std::vector<pid_t> pids;
    absl::StatusOr<std::vector<std::string>> files =
        testing::WaitForFiles(seen_, tag, 2, kDeadline);
    EXPECT_TRUE(files.ok()) << files.status() << cluster_->DaemonOutput();
    if (!files.ok()) return pids;
    for (int rank = 0; rank < 2; ++rank) {
      int pid = 0;
      const std::string text = testing::ReadFile(absl::StrCat(seen_, "/", tag, rank));
      EXPECT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &pid)) << text;
      if (pid <= 0) continue;  // never kill(0) or kill(-1) in the clean-up
      pids.push_back(pid);
      workers_.push_back(pid);
    }
    return pids;
  }

  void RestartService(bool empty_state, const std::vector<std::string>& extra = {}) {
    cluster_->service().Signal(SIGKILL);
    ASSERT_TRUE(cluster_->service().Wait(kDeadline).ok());
    if (empty_state) {
      ASSERT_EQ(testing::Run({"rm", "-rf", dir_ + "/state"})->exit_code, 0);
    }
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_, extra));
  }

  std::string seen_, listen_;
  std::vector<pid_t> workers_;
};

TEST_F(DaemonReconcileE2eTest, ServiceRestartedOnAnEmptyStateDirStopsTheOrphanWorkers) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  const std::string job = Submit("orphan", Forever("w"));
  ASSERT_FALSE(job.empty());
  const std::vector<pid_t> pids = WorkerPids("w");
  ASSERT_EQ(pids.size(), 2u);

  ASSERT_NO_FATAL_FAILURE(RestartService(/*empty_state=*/true));
  // The daemon re-registers saying it runs the job; the new service does
  // not know it and has it stopped: no worker keeps running.
  for (pid_t pid : pids) {
    EXPECT_TRUE(PollUntil([&] { return !Alive(pid); }))
        << "worker " << pid << " still runs" << cluster_->DaemonOutput();
  }
  EXPECT_THAT(
      cluster_->service().Output(),
      HasSubstr("runs job " + job + " round 0, which this service does not know"));
  EXPECT_THAT(cluster_->daemon(0).Output(),
              HasSubstr("job " + job +
                        " ended here: the rendezvous service does not know "
                        "this job"));
  EXPECT_EQ(cluster_->AliveNodes(), 1);
}

// A fresh service (an empty state dir, as an in-memory one or a second
// cluster has) numbers its jobs from 1 again: its dup-1 is another job than
// the dup-1 the daemon ran for the service before, whether the daemon stayed
// up (it must not take it as "already ran") or restarted (its old folders
// are there). Each runs, under its own run id, and the old logs stay.
TEST_F(DaemonReconcileE2eTest, AFreshServicesJobIdsAreNewJobsToTheDaemons) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  const std::string script = "echo run=$TORCHELASTIC_RUN_ID";
  std::vector<std::string> run_ids;
  auto run_dup = [&](const std::string& when) {
    const std::string job = Submit("dup", script);
    ASSERT_EQ(job, "dup-1") << when;
    v1::JobStatus st = cluster_->WaitFinished(job);
    ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
        << when << ": " << st.DebugString() << cluster_->DaemonOutput();
    std::string logs;
    ASSERT_TRUE(PollUntil([&] {
      logs = cluster_->ServiceLogs(job);
      return absl::StrContains(logs, "run=");
    })) << when
        << ": " << logs;
    const std::string line = logs.substr(logs.find("run=") + 4);
    run_ids.push_back(line.substr(0, line.find('\n')));
  };
  ASSERT_NO_FATAL_FAILURE(run_dup("first service"));
  // The daemon stays up; the service comes back with nothing.
  ASSERT_NO_FATAL_FAILURE(RestartService(/*empty_state=*/true));
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  ASSERT_NO_FATAL_FAILURE(run_dup("second service, same daemon"));
  // Both come back: the daemon's folders hold two dup-1 already.
  cluster_->daemon(0).Signal(SIGTERM);
  ASSERT_TRUE(cluster_->daemon(0).Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(RestartService(/*empty_state=*/true));
  ASSERT_NO_FATAL_FAILURE(cluster_->RestartDaemon(0));
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  ASSERT_NO_FATAL_FAILURE(run_dup("third service, restarted daemon"));

  ASSERT_EQ(run_ids.size(), 3u);
  EXPECT_NE(run_ids[0], run_ids[1]);
  EXPECT_NE(run_ids[1], run_ids[2]);
  EXPECT_NE(run_ids[0], run_ids[2]);
  // Every run's rank-0 log is still on the node, each in its own folder.
  const std::vector<std::string> folders = testing::ListFiles(dir_ + "/node0", "dup-1");
  int logs_kept = 0;
  for (const std::string& f : folders) {
    logs_kept += absl::StrContains(
        testing::ReadFile(absl::StrCat(dir_, "/node0/", f, "/attempt_0/0/stdout.log")),
        "run=");
  }
  EXPECT_EQ(logs_kept, 3) << ::testing::PrintToString(folders);
}

TEST_F(DaemonReconcileE2eTest, LogsSurviveAServiceRestart) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  const std::string job = Submit("logs", "echo hello from rank $RANK");
  ASSERT_FALSE(job.empty());
  v1::JobStatus st = cluster_->WaitFinished(job);
  ASSERT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED) << st.DebugString();
  std::string before;
  ASSERT_TRUE(PollUntil([&] {
    before = cluster_->ServiceLogs(job);
    return absl::StrContains(before, "hello from rank 0") &&
           absl::StrContains(before, "hello from rank 1");
  })) << before;

  // A stop (SIGTERM) saves what is pending; the next service reloads it.
  cluster_->service().Signal(SIGTERM);
  ASSERT_TRUE(cluster_->service().Wait(kDeadline).ok());
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  EXPECT_EQ(cluster_->ServiceLogs(job), before);
  absl::StatusOr<testing::RunResult> logs = testing::Run(
      {BinDir() + "/elastrun", "logs", "--rendezvous", cluster_->address(), job},
      {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_THAT(logs->output, HasSubstr("hello from rank 1")) << logs->output;
}

// The numbered lines of a LinesAcrossAKill worker as `elastrun logs` printed
// them: how often each (rank, stream, number) appears, and each rank's last
// number (its "total" line). A line that names a rank's output without its
// own "[rankN]:" prefix (lost, or run into another line) is a failure.
struct NumberedLines {
  std::map<std::tuple<int, std::string, int>, int> count;
  std::map<int, int> total;
};
NumberedLines ParseNumbered(const std::string& output) {
  NumberedLines n;
  static const std::regex kLine(R"(\[rank(\d+)\]:(out|err|total) (\d+) (\d+))");
  static const std::regex kAny(R"((out|err|total) \d+ \d+)");
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const std::string text(line);
    std::smatch m;
    if (std::regex_match(text, m, kLine) && m[1] == m[3]) {
      const int rank = std::stoi(m[1]), number = std::stoi(m[4]);
      if (m[2] == "total") {
        n.total[rank] = number;
        ++n.count[{rank, "total", number}];
      } else {
        ++n.count[{rank, m[2], number}];
      }
    } else {
      EXPECT_FALSE(std::regex_search(text, kAny))
          << "a worker line without its prefix: " << text;
    }
  }
  return n;
}

// Every line of both ranks, stdout and stderr, exactly once.
void ExpectEveryLineOnce(const NumberedLines& n, const std::string& what) {
  ASSERT_EQ(n.total.size(), 2u) << what << ": the workers' last lines are missing";
  size_t lines = 0;
  for (const auto& [rank, total] : n.total) {
    for (int i = 1; i <= total; ++i) {
      for (const char* stream : {"out", "err"}) {
        EXPECT_EQ(n.count.count({rank, stream, i}) ? n.count.at({rank, stream, i}) : 0, 1)
            << what << ": rank " << rank << " " << stream << " line " << i;
      }
    }
    lines += 2 * total + 1;
  }
  EXPECT_EQ(n.count.size(), lines) << what << ": lines the workers did not print";
}

// A service SIGKILLed while a job prints, and restarted on its state dir and
// port: `elastrun wait` and `elastrun logs -f`, started before, go on
// through the restart. Every line the workers printed (before, during and
// after the restart, stdout and stderr) is shown once, with its prefix, by
// the follower and by a `logs` afterwards: none that the service had
// acknowledged is lost, and none the daemon sent again is repeated.
TEST_F(DaemonReconcileE2eTest, WaitAndLogsFollowGoOnThroughAServiceKill) {
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  // Numbered lines on stdout and stderr until dir/go appears, 20 more, and
  // the count.
  const std::string go = dir_ + "/go";
  const std::string job = Submit(
      "lines",
      absl::StrCat(
          "i=0; while [ ! -e ", go, " ]; do i=$((i+1)); echo \"out $RANK $i\"; ",
          "echo \"err $RANK $i\" >&2; sleep 0.02; done; j=0; ",
          "while [ $j -lt 20 ]; do i=$((i+1)); j=$((j+1)); echo \"out $RANK $i\"; ",
          "echo \"err $RANK $i\" >&2; done; echo \"total $RANK $i\""));
  ASSERT_FALSE(job.empty());
  const std::vector<std::string> env = {marker_,
                                        "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()};
  auto cli = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/elastrun"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--rendezvous", cluster_->address(), job});
    return testing::Subprocess::Start(argv, env);
  };
  auto wait = cli({"wait"});
  ASSERT_TRUE(wait.ok()) << wait.status();
  auto follow = cli({"logs", "-f"});
  ASSERT_TRUE(follow.ok()) << follow.status();

  // Both streams of both ranks flow; then the service dies mid-job, with
  // lines pushed, being pushed and still buffered on the node.
  ASSERT_TRUE(PollUntil([&] {
    const std::string out = (*follow)->Output();
    return absl::StrContains(out, "[rank0]:err 0 10\n") &&
           absl::StrContains(out, "[rank1]:out 1 10\n");
  })) << (*follow)->Output()
      << cluster_->DaemonOutput();
  cluster_->service().Signal(SIGKILL);
  ASSERT_TRUE(cluster_->service().Wait(kDeadline).ok());
  // Commands started while the service is down wait for it (--retry-for,
  // 60 s) instead of exiting 3 at once: still running half a second later.
  auto late_wait = cli({"wait"});
  ASSERT_TRUE(late_wait.ok()) << late_wait.status();
  auto late_follow = cli({"logs", "-f"});
  ASSERT_TRUE(late_follow.ok()) << late_follow.status();
  EXPECT_FALSE((*late_wait)->Wait(absl::Milliseconds(500)).ok())
      << (*late_wait)->Output();
  EXPECT_FALSE((*late_follow)->Wait(absl::Milliseconds(1)).ok())
      << (*late_follow)->Output();
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_));
  ASSERT_TRUE(PollUntil([&] { return cluster_->WatchingNodes() == 1; }))
      << cluster_->DaemonOutput();
  EXPECT_EQ(cluster_->Get(job).state(), v1::JOB_STATE_RUNNING);
  ASSERT_FALSE(testing::WriteOwnerOnlyFile(go, "").empty());

  ASSERT_TRUE((*wait)->Wait(kDeadline).ok()) << (*wait)->Output();
  EXPECT_EQ((*wait)->exit_code(), 0) << (*wait)->Output();
  EXPECT_THAT((*wait)->Output(), HasSubstr(job + " SUCCEEDED")) << (*wait)->Output();
  ASSERT_TRUE((*follow)->Wait(kDeadline).ok()) << (*follow)->Output();
  EXPECT_EQ((*follow)->exit_code(), 0) << (*follow)->Output();
  ExpectEveryLineOnce(ParseNumbered((*follow)->Output()), "logs -f");
  for (auto* late : {&*late_wait, &*late_follow}) {
    ASSERT_TRUE((*late)->Wait(kDeadline).ok()) << (*late)->Output();
    EXPECT_EQ((*late)->exit_code(), 0) << (*late)->Output();
  }
  EXPECT_THAT((*late_wait)->Output(), HasSubstr(job + " SUCCEEDED"));
  ExpectEveryLineOnce(ParseNumbered((*late_follow)->Output()), "logs -f started late");

  absl::StatusOr<testing::RunResult> logs = testing::Run(
      {BinDir() + "/elastrun", "logs", "--rendezvous", cluster_->address(), job}, env);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->exit_code, 0) << logs->output;
  ExpectEveryLineOnce(ParseNumbered(logs->output), "logs");
}

TEST_F(DaemonReconcileE2eTest, RunningJobWhoseDaemonNeverComesBackFailsAndFreesTheNode) {
  const std::vector<std::string> short_lease = {"--heartbeat-interval", "500ms",
                                                "--lease-timeout", "2s"};
  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_, short_lease));
  ASSERT_NO_FATAL_FAILURE(cluster_->StartDaemon());
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  const std::string job = Submit("gone", Forever("g"));
  ASSERT_FALSE(job.empty());
  const std::vector<pid_t> pids = WorkerPids("g");

  // The service dies; meanwhile its node's daemon stops (with its workers).
  cluster_->service().Signal(SIGKILL);
  ASSERT_TRUE(cluster_->service().Wait(kDeadline).ok());
  cluster_->daemon(0).Signal(SIGTERM);
  ASSERT_TRUE(cluster_->daemon(0).Wait(kDeadline).ok());
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid));

  ASSERT_NO_FATAL_FAILURE(cluster_->StartService(listen_, short_lease));
  v1::JobStatus st = cluster_->WaitFinished(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_FAILED) << st.DebugString();
  EXPECT_THAT(st.finish_reason(),
              HasSubstr("no daemon runs job " + job + " after the service restarted"));

  // The node's daemon starts again: the failed job does not hold the node
  // (it is not placed there again), which takes a new job.
  auto again = testing::Subprocess::Start(
      {BinDir() + "/elastrund", "--rendezvous", cluster_->address(), "--node-id", "node0",
       "--slots", "2", "--state-dir", dir_ + "/state-node0", "--log-dir", dir_ + "/node0",
       "--shutdown-timeout", "5s", "--token-file", cluster_->token_file(),
       "--cred-socket", "none"},
      {marker_, "ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }));
  const std::string next = Submit("next", "true");
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(cluster_->WaitFinished(next).state(), v1::JOB_STATE_SUCCEEDED)
      << (*again)->Output();
  EXPECT_EQ(cluster_->Get(job).state(), v1::JOB_STATE_FAILED);
  (*again)->Signal(SIGTERM);
  ASSERT_TRUE((*again)->Wait(kDeadline).ok());
}

}  // namespace
}  // namespace elastrun
