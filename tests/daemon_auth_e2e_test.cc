// End to end: who may call the service. The real elastrun-rendezvous (token
// file in the test's folder), a real elastrund serving credentials, and the
// real `elastrun` run as root and, through runuser, as the unprivileged
// user nobody: nobody's job is nobody's and runs as nobody, nobody cannot
// cancel or read root's job, a forged credential and a stray node's logs
// are refused, progress and barrier datagrams nobody forges on the root
// daemon's agent socket are dropped; a token file open to others stops the
// service, and so does a state folder that is a link, another user's or
// writable by others.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/auth.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using daemon_testing::Cluster;
using daemon_testing::MetricsAddress;
using daemon_testing::PollUntil;
using daemon_testing::Scrape;
using testing::BinDir;
using ::testing::HasSubstr;

constexpr uint32_t kNobody = 65534;

bool HaveRunuserAndNobody() {
  return access("/usr/sbin/runuser", X_OK) == 0 || access("/sbin/runuser", X_OK) == 0
             ? auth::UserName(kNobody) == "nobody"
             : false;
}

class DaemonAuthE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0)
      GTEST_SKIP() << "needs root (to run the CLI as nobody with runuser)";
    if (!HaveRunuserAndNobody()) GTEST_SKIP() << "needs runuser and the user nobody";
    dir_ = testing::MakeTempDir("daemon_auth");
    // nobody reaches the daemon's credential socket in here; the token
    // file stays 0600.
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    marker_ = absl::StrCat("ELASTRUN_TEST_MARKER=daemon-auth-", getpid(), "-", dir_);
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
    ASSERT_NO_FATAL_FAILURE(cluster_->StartService("127.0.0.1:0"));
    ASSERT_NO_FATAL_FAILURE(
        cluster_->StartDaemon({}, {"--metrics-listen", "127.0.0.1:0"}));
    ASSERT_TRUE(PollUntil([&] { return cluster_->AliveNodes() == 1; }))
        << cluster_->DaemonOutput();
  }
  void TearDown() override {
    if (cluster_) cluster_->StopAll();
  }

  // `elastrun ARGS` as root, with the token file.
  testing::RunResult AsRoot(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/elastrun"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, {"ELASTRUN_TOKEN_FILE=" + cluster_->token_file()});
  }

  // `elastrun ARGS` as nobody: no token, only the daemon's credential.
  testing::RunResult AsNobody(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"runuser",
                                     "-u",
                                     "nobody",
                                     "--",
                                     "env",
                                     "ELASTRUN_CRED_SOCKET=" + cluster_->cred_socket(0),
                                     "ELASTRUN_RENDEZVOUS=" + cluster_->address(),
                                     BinDir() + "/elastrun"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Run(argv, {});
  }

  testing::RunResult Run(const std::vector<std::string>& argv,
                         std::vector<std::string> env) {
    env.push_back(marker_);
    env.push_back("ELASTRUN_RENDEZVOUS=" + cluster_->address());
    absl::StatusOr<testing::RunResult> r =
        testing::Run(argv, env, daemon_testing::kDeadline);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::RunResult{};
  }

  static std::string Id(const testing::RunResult& r) {
    return std::string(absl::StripAsciiWhitespace(r.output));
  }

  std::string dir_, marker_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(DaemonAuthE2eTest, UsersOwnTheirJobsAndOnlyTheirJobs) {
  // Root's job runs on the node and prints a line.
  testing::RunResult root_submit =
      AsRoot({"submit", "--name", "roots", "--env", "API_KEY=env-secret", "--", "/bin/sh",
              "-c", "echo secret-output; exec sleep 300"});
  ASSERT_EQ(root_submit.exit_code, 0) << root_submit.output;
  const std::string root_job = Id(root_submit);
  v1::JobStatus root_status = cluster_->Get(root_job);
  EXPECT_EQ(root_status.spec().owner().uid(), 0u);
  EXPECT_EQ(root_status.spec().owner().user(), "root");
  ASSERT_TRUE(PollUntil([&] {
    return AsRoot({"logs", root_job}).output.find("secret-output") != std::string::npos;
  })) << cluster_->DaemonOutput();

  // nobody submits (a job that waits for a second node: it never runs) and
  // owns it.
  testing::RunResult nobody_submit =
      AsNobody({"submit", "--name", "mine", "--nnodes", "2", "--wait-for-nodes", "--",
                "/bin/true"});
  ASSERT_EQ(nobody_submit.exit_code, 0) << nobody_submit.output;
  const std::string nobody_job = Id(nobody_submit);
  v1::JobStatus nobody_status = cluster_->Get(nobody_job);
  EXPECT_EQ(nobody_status.spec().owner().uid(), kNobody);
  EXPECT_EQ(nobody_status.spec().owner().user(), "nobody");
  EXPECT_THAT(AsNobody({"status", nobody_job}).output, HasSubstr("nobody (uid 65534)"));
  EXPECT_THAT(AsNobody({"list"}).output, HasSubstr(root_job));  // anyone sees the queue

  // nobody may neither cancel nor read root's job: exit 1, saying whose it is.
  testing::RunResult cancel = AsNobody({"cancel", root_job});
  EXPECT_EQ(cancel.exit_code, 1) << cancel.output;
  EXPECT_THAT(cancel.output, HasSubstr("belongs to root (uid 0)"));
  testing::RunResult logs = AsNobody({"logs", root_job});
  EXPECT_EQ(logs.exit_code, 1) << logs.output;
  EXPECT_THAT(logs.output, HasSubstr("belongs to root (uid 0)"));
  EXPECT_THAT(logs.output, ::testing::Not(HasSubstr("secret-output")));
  testing::RunResult events = AsNobody({"events", root_job});
  EXPECT_EQ(events.exit_code, 1) << events.output;
  EXPECT_THAT(events.output, HasSubstr("belongs to root (uid 0)"));
  // The queue is public, the environment (an exported one holds secrets) not.
  testing::RunResult seen = AsNobody({"status", root_job, "--output", "json"});
  EXPECT_EQ(seen.exit_code, 0) << seen.output;
  EXPECT_THAT(seen.output, ::testing::ContainsRegex("\"env_hidden\": *true"));
  EXPECT_THAT(seen.output, ::testing::Not(HasSubstr("env-secret")));
  EXPECT_THAT(AsNobody({"list", "--output", "json"}).output,
              ::testing::Not(HasSubstr("env-secret")));
  EXPECT_THAT(AsRoot({"status", root_job, "--output", "json"}).output,
              HasSubstr("env-secret"));
  EXPECT_EQ(cluster_->Get(root_job).state(), v1::JOB_STATE_RUNNING);

  // Its own job nobody may cancel; root may cancel anyone's.
  EXPECT_EQ(AsNobody({"cancel", nobody_job}).exit_code, 0);
  EXPECT_EQ(AsRoot({"cancel", root_job}).exit_code, 0);
  cluster_->WaitFinished(root_job);
}

TEST_F(DaemonAuthE2eTest, WithoutTokenOrDaemonTheCliSaysWhatItTried) {
  std::vector<std::string> argv = {"runuser",
                                   "-u",
                                   "nobody",
                                   "--",
                                   "env",
                                   "ELASTRUN_CRED_SOCKET=" + dir_ + "/none.sock",
                                   BinDir() + "/elastrun",
                                   "list"};
  testing::RunResult r = Run(argv, {});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("no daemon credential socket at " + dir_ + "/none.sock"));
}

TEST_F(DaemonAuthE2eTest, ForgedCredentialAndStrayNodeAreRefused) {
  auto channel =
      grpc::CreateChannel(cluster_->address(), grpc::InsecureChannelCredentials());
  auto jobs = v1::Jobs::NewStub(channel);
  // A credential for root signed with a guessed token.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-elastrun-credential",
                    *auth::SignCredential("guessed", auth::Identity{0, 0, "root"},
                                          absl::Now() + absl::Minutes(1)));
    v1::SubmitRequest req;
    req.mutable_spec()->add_argv("/bin/true");
    v1::SubmitResponse resp;
    grpc::Status st = jobs->Submit(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << st.error_message();
  }

  testing::RunResult submit = AsRoot({"submit", "--", "/bin/sh", "-c", "exec sleep 300"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  const std::string job = Id(submit);
  // Even with the token, a node that is not the job's cannot write its logs.
  std::string token;
  std::ifstream(cluster_->token_file()) >> token;
  auto rdzv = v1::Rendezvous::NewStub(channel);
  auto push = [&](const std::string& node) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::PushLogsRequest req;
    req.set_node_id(node);
    req.set_job_id(job);
    v1::LogChunk* c = req.add_chunks();
    c->set_stream("stdout");
    c->set_data("forged by " + node + "\n");
    v1::PushLogsResponse resp;
    return rdzv->PushLogs(&ctx, req, &resp);
  };
  grpc::Status stray = push("intruder");
  EXPECT_EQ(stray.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << stray.error_message();
  EXPECT_TRUE(push("node0").ok());
  const std::string logs = AsRoot({"logs", job}).output;
  EXPECT_THAT(logs, HasSubstr("forged by node0"));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("forged by intruder")));
  EXPECT_EQ(AsRoot({"cancel", job}).exit_code, 0);
  cluster_->WaitFinished(job);
}

TEST_F(DaemonAuthE2eTest, NobodysJobRunsAsNobodyThroughTheRootDaemon) {
  // The whole chain: nobody's elastrun gets a credential from the root
  // daemon's socket, the service makes nobody the job's owner, and the
  // root daemon runs the worker as nobody.
  testing::RunResult submit = AsNobody(
      {"submit", "--wait", "--name", "whoami", "--working-dir", "/", "--", "id", "-u"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output << cluster_->DaemonOutput();
  const std::string job = submit.output.substr(0, submit.output.find('\n'));
  testing::RunResult logs = AsNobody({"logs", job});
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_THAT(logs.output, HasSubstr("[rank0]:65534\n"));
  const std::string status = AsNobody({"status", job}).output;
  EXPECT_THAT(status, HasSubstr("nobody (uid 65534)"));
  EXPECT_THAT(status, HasSubstr("SUCCEEDED"));
}

// Two workers (ranks 0 and 1) of one attempt: each reports step 1 and
// meets the other at barrier "gate" over the agent socket, in the
// datagrams of common/progress.h; rank 1 arrives only once the file "go"
// exists. Each prints what the agent answered and whether "go" existed.
constexpr char kGateWorker[] = R"(import os, socket, sys, time
folder = sys.argv[1]
rank = os.environ["RANK"]
head = "job=%s secret=%s rank=%s" % (os.environ["TORCHELASTIC_RUN_ID"],
                                     os.environ["ELASTRUN_AGENT_SECRET"], rank)
agent = os.environ["ELASTRUN_AGENT_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("")  # an address of its own (autobind), for the barrier's answer
s.sendto((head + " step=1 real=1").encode(), agent)
if rank == "1":
    print("rank 1 waits for go", flush=True)
    while not os.path.exists(folder + "/go"):
        time.sleep(0.02)
s.sendto(("barrier " + head + " local_world_size=2 name=gate").encode(), agent)
print("rank %s at gate" % rank, flush=True)
answer = s.recv(1024).decode()
print("rank %s passed gate: %s go=%s" % (rank, answer, os.path.exists(folder + "/go")),
      flush=True)
)";

// Run as nobody: AGENT_SOCKET JOB FOLDER. Forges, for JOB, progress of
// step 1000 and rank 1's arrival at "gate", without a secret and with a
// well-formed one of no worker; then prints any answer until FOLDER/done
// exists (a forged arrival that counted would be answered with the others).
// Sends kForgedDatagrams: a progress report and a barrier arrival, without
// a secret and with a made-up one.
constexpr int kForgedDatagrams = 4;
constexpr char kForger[] = R"(import os, select, socket, sys
agent, job, folder = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("")
for secret in ["", " secret=" + "0" * 32]:
    s.sendto(("job=%s%s rank=0 step=1000 forged=1" % (job, secret)).encode(), agent)
    s.sendto(("barrier job=%s%s rank=1 local_world_size=2 name=gate" % (job, secret)).encode(),
             agent)
print("sent as uid %d" % os.getuid(), flush=True)
while True:
    done = os.path.exists(folder + "/done")
    while select.select([s], [], [], 0 if done else 0.05)[0]:
        print("answer: " + s.recv(1024).decode(), flush=True)
    if done:
        break
print("forger done", flush=True)
)";

TEST_F(DaemonAuthE2eTest, DatagramsForgedByNobodyAreDropped) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP()
        << "needs /usr/bin/python3 (Debian's python3) for the worker and the forger";
  }
  const std::string worker = dir_ + "/gate_worker.py", forger = dir_ + "/forger.py";
  std::ofstream(worker) << kGateWorker;
  std::ofstream(forger) << kForger;
  ASSERT_EQ(chmod(forger.c_str(), 0644), 0);  // nobody reads it
  v1::JobSpec spec = daemon_testing::Spec("gate", 1, 1, 2, 0);
  for (const std::string& a : {std::string("/usr/bin/python3"), worker, dir_})
    spec.add_argv(a);
  const std::string job = cluster_->SubmitSpec(spec);
  ASSERT_TRUE(PollUntil([&] {
    const std::string logs = cluster_->Logs(job, 0);
    return logs.find("rank 0 at gate") != std::string::npos &&
           logs.find("rank 1 waits for go") != std::string::npos;
  })) << cluster_->Logs(job, 0)
      << cluster_->DaemonOutput();

  // The root daemon's agent socket is 0666 (workers of any user reach it):
  // nobody's datagrams arrive, and are dropped for want of a worker's secret.
  const std::string socket = dir_ + "/state-node0/agent.sock";
  auto forging = testing::Subprocess::Start(
      {"runuser", "-u", "nobody", "--", "/usr/bin/python3", forger, socket, job, dir_},
      {marker_});
  ASSERT_TRUE(forging.ok()) << forging.status();
  ASSERT_TRUE(PollUntil([&] {
    return (*forging)->Output().find("sent as uid 65534") != std::string::npos;
  })) << (*forging)->Output();
  // Dropped (the daemon says so once), or, were the forgery to count,
  // rank 0 let through the barrier.
  const std::string dropped =
      "dropped a progress report on the agent socket: its secret is no live worker's";
  ASSERT_TRUE(PollUntil([&] {
    return absl::StrContains(cluster_->DaemonOutput(), dropped) ||
           absl::StrContains(cluster_->Logs(job, 0), "rank 0 passed");
  }));
  EXPECT_THAT(cluster_->DaemonOutput(), HasSubstr(dropped));
  EXPECT_THAT(cluster_->Logs(job, 0), ::testing::Not(HasSubstr("rank 0 passed")));
  // Every forged datagram is counted, not only the first said.
  const std::string metrics = MetricsAddress(cluster_->daemon(0));
  EXPECT_TRUE(PollUntil([&] {
    return Scrape(metrics, "elastrund_agent_datagrams_dropped_total") >= kForgedDatagrams;
  }));
  EXPECT_EQ(Scrape(metrics, "elastrund_agent_datagrams_dropped_total"), kForgedDatagrams);

  // Only rank 1's own arrival, after "go", lets rank 0 through.
  std::ofstream(dir_ + "/go") << "go\n";
  const v1::JobStatus st = cluster_->WaitFinished(job);
  EXPECT_EQ(st.state(), v1::JOB_STATE_SUCCEEDED)
      << st.DebugString() << cluster_->Logs(job, 0);
  const std::string logs = cluster_->Logs(job, 0);
  EXPECT_THAT(logs, HasSubstr("rank 0 passed gate: ok go=True"));
  EXPECT_THAT(logs, HasSubstr("rank 1 passed gate: ok go=True"));
  std::ofstream(dir_ + "/done") << "done\n";
  ASSERT_TRUE((*forging)->Wait(daemon_testing::kDeadline).ok());
  EXPECT_EQ((*forging)->exit_code(), 0) << (*forging)->Output();
  EXPECT_THAT((*forging)->Output(), HasSubstr("forger done"));
  EXPECT_THAT((*forging)->Output(), ::testing::Not(HasSubstr("answer:")));
  // The job's progress is the workers' own.
  const std::string status = AsRoot({"status", job}).output;
  EXPECT_THAT(status,
              ::testing::ContainsRegex("progress: +step 1 \\(rank [01] on node0"));
  EXPECT_THAT(status, HasSubstr("real=1"));
  EXPECT_THAT(status, ::testing::Not(HasSubstr("forged")));
}

// One worker: reports step 1 (metric real=1) over the agent socket, then
// waits for FOLDER/go.
constexpr char kStepOneWorker[] = R"(import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(("job=%s secret=%s rank=0 step=1 real=1" % (os.environ["TORCHELASTIC_RUN_ID"],
          os.environ["ELASTRUN_AGENT_SECRET"])).encode(), os.environ["ELASTRUN_AGENT_SOCKET"])
print("reported step 1", flush=True)
while not os.path.exists(sys.argv[1] + "/go"):
    time.sleep(0.02)
)";

// A worker of nobody's job, with its own (valid) secret, names root's job
// JOB in a report of step 999003 and a barrier arrival of rank 1 of 2.
constexpr char kOtherJobsForger[] = R"(import os, socket, sys
job = sys.argv[1]
secret = os.environ["ELASTRUN_AGENT_SECRET"]
agent = os.environ["ELASTRUN_AGENT_SOCKET"]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("")
s.sendto(("job=%s secret=%s rank=0 step=999003 forged=1" % (job, secret)).encode(), agent)
s.sendto(("barrier job=%s secret=%s rank=1 local_world_size=2 name=gate" % (job, secret))
         .encode(), agent)
print("answer: " + s.recv(1024).decode(), flush=True)
)";

// A worker's secret is good for its own job only: nobody's worker naming
// root's job posts progress and arrives at barriers as nobody's job.
TEST_F(DaemonAuthE2eTest, AWorkerOfNobodysJobCannotPostAsRootsJob) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "needs /usr/bin/python3 (Debian's python3) for the workers";
  }
  const std::string worker = dir_ + "/step_one.py", forger = dir_ + "/other_job.py";
  std::ofstream(worker) << kStepOneWorker;
  std::ofstream(forger) << kOtherJobsForger;
  ASSERT_EQ(chmod(forger.c_str(), 0644), 0);  // nobody's worker reads it
  v1::JobSpec spec = daemon_testing::Spec("roots", 1, 1, 1, 0);
  for (const std::string& a : {std::string("/usr/bin/python3"), worker, dir_})
    spec.add_argv(a);
  const std::string job = cluster_->SubmitSpec(spec);
  ASSERT_TRUE(PollUntil([&] {
    return absl::StrContains(AsRoot({"status", job}).output, "real=1");
  })) << cluster_->DaemonOutput();

  testing::RunResult submit =
      AsNobody({"submit", "--wait", "--name", "forger", "--working-dir", "/", "--",
                "/usr/bin/python3", forger, job});
  ASSERT_EQ(submit.exit_code, 0) << submit.output << cluster_->DaemonOutput();
  const std::string forger_job = submit.output.substr(0, submit.output.find('\n'));
  // Its arrival counted for its own job of one worker: let through at once.
  EXPECT_THAT(AsNobody({"logs", forger_job}).output, HasSubstr("answer: ok"));
  const std::string status = AsRoot({"status", job}).output;
  EXPECT_THAT(status, ::testing::ContainsRegex("progress: +step 1 \\(rank 0 on node0"));
  EXPECT_THAT(status, ::testing::Not(HasSubstr("forged")));
  EXPECT_THAT(status, ::testing::Not(HasSubstr("999003")));
  // The report is nobody's job's own.
  EXPECT_THAT(AsNobody({"status", forger_job}).output, HasSubstr("999003"));

  std::ofstream(dir_ + "/go") << "go\n";
  EXPECT_EQ(cluster_->WaitFinished(job).state(), v1::JOB_STATE_SUCCEEDED);
}

// Run as nobody: answers "ok" to every autobound unix datagram socket
// listed in /proc/net/unix (a worker waiting at a barrier has one), then
// prints the time it was done, CLOCK_REALTIME in nanoseconds.
constexpr char kBarrierAnswerForger[] = R"(import socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sent = refused = 0
for line in open("/proc/net/unix").read().splitlines()[1:]:
    f = line.split()
    if len(f) < 8 or f[4] != "0002" or not f[7].startswith("@") or len(f[7]) != 6:
        continue
    try:
        s.sendto(b"ok", "\0" + f[7][1:])
        sent += 1
    except OSError:
        refused += 1
print("sent %d refused %d done at %d" % (sent, refused, time.time_ns()), flush=True)
)";

// A worker waiting at a barrier takes its answer from the agent only: a
// plain process of nobody's, in no job, answering "ok" to its address (any
// local user reads it in /proc/net/unix) does not release root's worker.
TEST_F(DaemonAuthE2eTest, NobodyCannotAnswerABarrierForRootsWorker) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "needs /usr/bin/python3 (Debian's python3) for the forger";
  }
  const std::string ready = dir_ + "/ready", forger = dir_ + "/answer_forger.py";
  ASSERT_EQ(mkdir(ready.c_str(), 0755), 0);
  std::ofstream(forger) << kBarrierAnswerForger;
  ASSERT_EQ(chmod(forger.c_str(), 0644), 0);
  // Rank 1 arrives 5 s after rank 0: rank 0 waits meanwhile.
  const std::string job =
      cluster_->Submit(daemon_testing::Spec("gate", 1, 1, 2, 0),
                       {"--agent-barrier", "gate", "--delay-rank", "1", "--delay-ms",
                        "5000", "--ready-dir", ready});
  ASSERT_TRUE(
      testing::WaitForFiles(ready, "arrive.0.0", 1, daemon_testing::kDeadline).ok())
      << cluster_->DaemonOutput();
  absl::StatusOr<testing::RunResult> forged =
      testing::Run({"runuser", "-u", "nobody", "--", "/usr/bin/python3", forger},
                   {marker_}, daemon_testing::kDeadline);
  ASSERT_TRUE(forged.ok()) << forged.status();
  ASSERT_EQ(forged->exit_code, 0) << forged->output;
  EXPECT_EQ(cluster_->WaitFinished(job).state(), v1::JOB_STATE_SUCCEEDED)
      << cluster_->DaemonOutput();
  auto nanos = [&](const std::string& name) {
    int64_t t = 0;
    EXPECT_TRUE(absl::SimpleAtoi(
        absl::StripAsciiWhitespace(testing::ReadFile(ready + "/" + name)), &t))
        << name;
    return t;
  };
  int64_t forged_at = 0;
  const size_t at = forged->output.find("done at ");
  ASSERT_NE(at, std::string::npos) << forged->output;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(forged->output.substr(at + 8)),
                               &forged_at))
      << forged->output;
  // The forgery came while rank 0 waited (else this test shows nothing),
  // and rank 0 passed only once rank 1 arrived.
  ASSERT_LT(forged_at, nanos("arrive.0.1"))
      << "the forger ran too late: " << forged->output;
  EXPECT_GE(nanos("passed.0.0"), nanos("arrive.0.1")) << forged->output;
}

TEST(ServiceTokenFileE2eTest, TokenFileOpenToOthersStopsTheService) {
  const std::string dir = testing::MakeTempDir("token_file");
  const std::string file = dir + "/token";
  std::ofstream(file) << "s3cret\n";
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  absl::StatusOr<testing::RunResult> r =
      testing::Run({BinDir() + "/elastrun-rendezvous", "--listen", "127.0.0.1:0",
                    "--token-file", file},
                   {}, daemon_testing::kDeadline);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1) << r->output;
  EXPECT_THAT(r->output, HasSubstr("token file " + file + " is open to group or others"));
  EXPECT_THAT(r->output, HasSubstr("chmod 600 " + file));

  // A missing one is made, owner-only, on the first start.
  const std::string made = dir + "/state/token";
  auto service =
      testing::Subprocess::Start({BinDir() + "/elastrun-rendezvous", "--listen",
                                  "127.0.0.1:0", "--token-file", made},
                                 {});
  ASSERT_TRUE(service.ok()) << service.status();
  ASSERT_TRUE(PollUntil([&] {
    return (*service)->Output().find("listening on") != std::string::npos;
  })) << (*service)->Output();
  struct stat st;
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_THAT((*service)->Output(), HasSubstr("created the token file " + made));
  (*service)->Signal(SIGTERM);
  EXPECT_TRUE((*service)->Wait(daemon_testing::kDeadline).ok());
}

// elastrun-rendezvous with its state in `state` and its token file in
// `token_file`, to its exit; an accepted folder has it serve until the
// deadline, which fails the test.
testing::RunResult RunServiceOn(const std::string& state, const std::string& token_file) {
  absl::StatusOr<testing::RunResult> r =
      testing::Run({BinDir() + "/elastrun-rendezvous", "--listen", "127.0.0.1:0",
                    "--state-dir", state, "--token-file", token_file},
                   {}, daemon_testing::kDeadline);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : testing::RunResult{};
}

TEST(ServiceStateFolderE2eTest, UnsafeStateFolderStopsTheService) {
  const std::string dir = testing::MakeTempDir("state_folder");
  const std::string token = testing::WriteOwnerOnlyFile(dir + "/token", "s3cret\n");
  ASSERT_FALSE(token.empty());
  // A link is never followed, even to a folder of the service's own user.
  const std::string target = dir + "/target", link = dir + "/link";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  testing::RunResult r = RunServiceOn(link, token);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("elastrun-rendezvous: --state-dir: folder " + link +
                                  " is a symlink; refusing to follow it (remove it)"));
  EXPECT_THAT(testing::ListFiles(target), ::testing::IsEmpty());

  // One others may write to: they could swap state.db or logs.db.
  const std::string open = dir + "/open";
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0770), 0);
  r = RunServiceOn(open, token);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--state-dir: folder " + open +
                                  " has mode 0770: others may write to it"));
  EXPECT_THAT(r.output, HasSubstr("chmod go-w " + open));
  EXPECT_THAT(testing::ListFiles(open), ::testing::IsEmpty());

  if (geteuid() != 0) return;  // only root can give a folder away
  const std::string theirs = dir + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  r = RunServiceOn(theirs, token);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--state-dir: folder " + theirs +
                                  " belongs to uid 65534, not to this process (uid 0)"));
  EXPECT_THAT(testing::ListFiles(theirs), ::testing::IsEmpty());
}

TEST(ServiceStateFolderE2eTest, StateFolderIsMadeOrKeptOwnerOnly) {
  const std::string dir = testing::MakeTempDir("state_kept");
  const std::string token = testing::WriteOwnerOnlyFile(dir + "/token", "s3cret\n");
  ASSERT_FALSE(token.empty());
  const std::string made = dir + "/made", kept = dir + "/kept";
  ASSERT_EQ(mkdir(kept.c_str(), 0755), 0);  // the service's own; others may read
  for (const std::string& state : {made, kept}) {
    auto service = testing::Subprocess::Start({BinDir() + "/elastrun-rendezvous",
                                               "--listen", "127.0.0.1:0", "--state-dir",
                                               state, "--token-file", token});
    ASSERT_TRUE(service.ok()) << service.status();
    ASSERT_TRUE(PollUntil([&] {
      return (*service)->Output().find("listening on") != std::string::npos;
    })) << (*service)->Output();
    struct stat st;
    ASSERT_EQ(stat(state.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u) << state;
    EXPECT_TRUE(testing::FileExists(state + "/state.db")) << state;
    EXPECT_TRUE(testing::FileExists(state + "/logs.db")) << state;
    (*service)->Signal(SIGTERM);
    EXPECT_TRUE((*service)->Wait(daemon_testing::kDeadline).ok());
  }
}

}  // namespace
}  // namespace elastrun
