// End to end: the real elastrun-rendezvous binary on 127.0.0.1:0 and the
// real `elastrun` CLI against it. Most tests register no daemon, so a job
// stays PENDING: enough to prove submit, status, list, cancel, wait and the
// errors; one test adds two real elastrund with shell workers. Every wait
// is on an event (a pipe, a process exit, `elastrun wait`) with a generous
// deadline; nothing sleeps.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using testing::BinDir;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using testing::RunResult;

constexpr absl::Duration kWait = absl::Seconds(60);

// elastrun-rendezvous in its own process group, its stdout on a pipe so that
// the test learns the bound address from "listening on HOST:PORT" without
// polling. Killed (whole group) and reaped on destruction.
class Service {
 public:
  ~Service() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (out_ >= 0) close(out_);
  }

  // Starts the service and waits for its address. Returns "" (with a test
  // failure) if it did not come up within kWait.
  std::string Start(const std::vector<std::string>& flags) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe: " << errno;
      return "";
    }
    std::vector<std::string> argv = {BinDir() + "/elastrun-rendezvous", "--listen",
                                     "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      if (soft_open_files_ > 0) {
        rlimit limit;
        getrlimit(RLIMIT_NOFILE, &limit);
        limit.rlim_cur = soft_open_files_;
        setrlimit(RLIMIT_NOFILE, &limit);
      }
      dup2(fds[1], STDOUT_FILENO);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
    // Read until the first line, or EOF (the service died), or the deadline.
    const absl::Time deadline = absl::Now() + kWait;
    std::string text;
    while (text.find('\n') == std::string::npos) {
      pollfd p = {out_, POLLIN, 0};
      const int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      if (ms <= 0 || poll(&p, 1, ms) <= 0) {
        ADD_FAILURE() << "elastrun-rendezvous printed no address within " << kWait;
        return "";
      }
      char buf[256];
      const ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) {
        ADD_FAILURE() << "elastrun-rendezvous exited before listening: " << text;
        return "";
      }
      text.append(buf, static_cast<size_t>(n));
    }
    const std::string first = text.substr(0, text.find('\n'));
    absl::string_view line = first;
    if (!absl::ConsumePrefix(&line, "listening on ")) {
      ADD_FAILURE() << "unexpected first line: " << text;
      return "";
    }
    return std::string(line);
  }

  // Starts the service with this soft limit on open files (as a shell's
  // default of 1024 would).
  void set_soft_open_files(rlim_t n) { soft_open_files_ = n; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  rlim_t soft_open_files_ = 0;
};

// An owner-only token file `dir`/token holding `token`: the service, its
// daemons and the CLI are all given it (never the default path).
std::string WriteTokenFile(const std::string& dir, const std::string& token) {
  const std::string path = testing::WriteOwnerOnlyFile(dir + "/token", token);
  EXPECT_FALSE(path.empty()) << dir;
  return path;
}

class CliE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ =
        WriteTokenFile(testing::MakeTempDir("cli_e2e_token"), "cli-e2e-token\n");
    address_ = service_.Start({"--token-file", token_file_});
    ASSERT_FALSE(address_.empty());
  }

  // `elastrun ARGS` against the service (through ELASTRUN_RENDEZVOUS, as a
  // script would), stdout and stderr together.
  RunResult Cli(std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), BinDir() + "/elastrun");
    env.push_back("ELASTRUN_RENDEZVOUS=" + address_);
    env.push_back("ELASTRUN_TOKEN_FILE=" + token_file_);
    absl::StatusOr<RunResult> r = testing::Run(args, env, kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }

  nlohmann::json Json(const RunResult& r) {
    nlohmann::json j =
        nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    return j;
  }

  Service service_;
  std::string token_file_, address_;
};

TEST_F(CliE2eTest, SubmitStatusListCancelWait) {
  RunResult submit =
      Cli({"submit", "--name", "e2e", "--nnodes", "1:2", "--nproc-per-node", "2",
           "--max-restarts", "1", "--wait-for-nodes", "--", "/bin/true", "arg"});
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  // The id and nothing else (the CLI writes nothing to stderr on success).
  EXPECT_THAT(submit.output, MatchesRegex("e2e-[0-9]+\n"));
  const std::string job(absl::StripTrailingAsciiWhitespace(submit.output));

  // No daemon is registered: the job is queued, saying for what.
  RunResult status = Cli({"status", job, "--output", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.output;
  nlohmann::json j = Json(status);
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(j["round"], 0);
  EXPECT_EQ(j["restarts"], 0);
  EXPECT_EQ(j["world_size"], 0);
  EXPECT_EQ(j["job_id"], job);
  EXPECT_EQ(j["spec"]["max_nodes"], 2);
  EXPECT_EQ(j["spec"]["argv"], nlohmann::json({"/bin/true", "arg"}));
  EXPECT_EQ(j["pending_reason"],
            "waiting for nodes: job needs 1 node(s) with 2 slots each; registered: none "
            "alive");

  RunResult text = Cli({"status", job});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, HasSubstr("PENDING"));

  RunResult list = Cli({"list", "--output", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  ASSERT_EQ(Json(list)["jobs"].size(), 1u);
  EXPECT_EQ(Json(list)["jobs"][0]["job_id"], job);
  EXPECT_THAT(Cli({"list"}).output, HasSubstr(job));

  RunResult nodes = Cli({"nodes", "--output", "json"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_TRUE(Json(nodes)["nodes"].empty());

  RunResult cancel = Cli({"cancel", job});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
  EXPECT_THAT(cancel.output, HasSubstr(job + " CANCELLED"));
  EXPECT_EQ(Json(Cli({"status", job, "--output", "json"}))["state"], "CANCELLED");

  RunResult wait = Cli({"wait", job, "--timeout", "60"});
  EXPECT_EQ(wait.exit_code, 1) << wait.output;
  EXPECT_THAT(wait.output, HasSubstr(job + " CANCELLED"));

  RunResult logs = Cli({"logs", job});  // no node ran it: no lines
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_EQ(logs.output, "");
}

TEST_F(CliE2eTest, JobFileSubmits) {
  RunResult r = Cli({"submit", testing::SourceDir() + "/configs/jobs/test_worker.yaml",
                     "nnodes=3", "wait_for_nodes=true"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, MatchesRegex("test-worker-[0-9]+\n"));
  nlohmann::json j =
      Json(Cli({"status", std::string(absl::StripTrailingAsciiWhitespace(r.output)),
                "--output", "json"}));
  EXPECT_EQ(j["spec"]["min_nodes"], 3);
  EXPECT_EQ(j["spec"]["max_nodes"], 3);
}

TEST_F(CliE2eTest, BadSpecIsRefusedAndNothingIsCreated) {
  const std::string dir = testing::MakeTempDir("cli_e2e");
  const std::string file = dir + "/job.yaml";
  {
    absl::StatusOr<RunResult> w = testing::Run(
        {"/bin/sh", "-c",
         "printf 'name: bad\\nnnodes: \"1:2\"\\ncommand: [x]\\nnproc_per_node: 0\\n' > " +
             file});
    ASSERT_TRUE(w.ok() && w->exit_code == 0);
  }
  RunResult r = Cli({"submit", file});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr(file + ":4:17: nproc_per_node: 0 is out of range"));

  r = Cli({"submit", "--nnodes", "3:1", "--", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--nnodes: MIN 3 is greater than MAX 1"));

  r = Cli({"submit", "--name", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no command"));

  // Refused by the service itself: only it caps an argument's length.
  r = Cli({"submit", "--", "x", std::string(70000, 'a')});
  EXPECT_EQ(r.exit_code, 2) << r.output.substr(0, 500);
  EXPECT_THAT(r.output, HasSubstr("spec.argv[1]: too long"));

  RunResult list = Cli({"list", "--output", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(Json(list)["jobs"].empty()) << list.output;
}

TEST_F(CliE2eTest, UnknownJobIsNotFound) {
  RunResult r = Cli({"status", "nope-9"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_EQ(Cli({"wait", "nope-9"}).exit_code, 4);
  EXPECT_EQ(Cli({"cancel", "nope-9"}).exit_code, 4);
}

TEST_F(CliE2eTest, UnreachableServiceExits3NamingTheAddress) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0) << "no loopback port could be bound";
  const std::string nowhere = absl::StrCat("127.0.0.1:", port);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list"}, {"status", "j-1"}, {"submit", "--", "x"}}) {
    // Before the arguments: submit's program follows "--".
    // A read retries for --retry-for (default 60s) before it gives up.
    std::vector<std::string> a = args;
    a.insert(a.begin() + 1, {"--rendezvous", nowhere, "--retry-for", "300ms"});
    RunResult r = Cli(a);
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_THAT(r.output, HasSubstr("cannot reach the elastrun service at " + nowhere));
  }
}

// Real node daemons running shell workers: what status, wait, nodes and
// logs show for a job that succeeds and one that fails past its restarts.
TEST_F(CliE2eTest, JobsOnRealDaemons) {
  const std::string logs = testing::MakeTempDir("cli_daemons");
  // Submitted before any daemon is up: queued, then placed on registration.
  RunResult ok = Cli({"submit", "--name", "ok", "--nnodes", "2", "--nproc-per-node", "2",
                      "--wait-for-nodes", "--", "/bin/sh", "-c", "exit 0"});
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const std::string ok_job(absl::StripTrailingAsciiWhitespace(ok.output));

  std::vector<std::unique_ptr<testing::Subprocess>> daemons;
  for (const char* id : {"n1", "n2"}) {
    absl::StatusOr<std::unique_ptr<testing::Subprocess>> d = testing::Subprocess::Start(
        {BinDir() + "/elastrund", "--rendezvous", address_, "--node-id", id, "--slots",
         "2", "--state-dir", logs + "/state-" + id, "--log-dir", logs + "/" + id,
         "--token-file", token_file_, "--cred-socket", logs + "/" + id + ".sock"},
        {"ELASTRUN_SNAPSHOT_BASE=" + logs});  // off the real /dev/shm
    ASSERT_TRUE(d.ok()) << d.status();
    daemons.push_back(*std::move(d));
  }

  RunResult wait = Cli({"wait", ok_job, "--timeout", "120"});
  EXPECT_EQ(wait.exit_code, 0) << wait.output;
  EXPECT_THAT(wait.output, HasSubstr(ok_job + " SUCCEEDED"));
  nlohmann::json j = Json(Cli({"status", ok_job, "--output", "json"}));
  EXPECT_EQ(j["state"], "SUCCEEDED");
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["restarts"], 0);
  EXPECT_EQ(j["nodes"].size(), 2u);
  ASSERT_FALSE(j["history"].empty());
  EXPECT_EQ(j["history"].back()["end_reason"], "succeeded");

  // Rank 3 always fails: one restart, then FAILED with it as the root cause.
  RunResult bad = Cli({"submit", "--name", "bad", "--nnodes", "2", "--nproc-per-node",
                       "2", "--max-restarts", "1", "--", "/bin/sh", "-c",
                       "if [ \"$RANK\" = 3 ]; then echo boom >&2; exit 3; fi"});
  ASSERT_EQ(bad.exit_code, 0) << bad.output;
  const std::string bad_job(absl::StripTrailingAsciiWhitespace(bad.output));
  wait = Cli({"wait", bad_job, "--timeout", "120"});
  EXPECT_EQ(wait.exit_code, 1) << wait.output;
  EXPECT_THAT(wait.output, HasSubstr(bad_job + " FAILED"));
  EXPECT_THAT(wait.output, HasSubstr("rank 3 (local 1), round 1: exit code 3"));
  j = Json(Cli({"status", bad_job, "--output", "json"}));
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_EQ(j["round"], 1);
  EXPECT_EQ(j["root_cause"]["rank"], 3);
  EXPECT_EQ(j["root_cause"]["exit_code"], 3);
  ASSERT_EQ(j["history"].size(), 2u);
  EXPECT_EQ(j["history"][0]["counted_as_restart"], true);
  EXPECT_EQ(j["history"][0]["failures"][0]["rank"], 3);
  RunResult text = Cli({"status", bad_job});
  EXPECT_THAT(text.output, HasSubstr("round 0: failure (counted as a restart)"));
  EXPECT_THAT(text.output, HasSubstr("root cause: node "));

  // submit --wait: the id, then the job's outcome as the exit code.
  RunResult waited =
      Cli({"submit", "--name", "waited", "--nnodes", "2", "--nproc-per-node", "2",
           "--wait", "--", "/bin/sh", "-c", "exit $((RANK == 2))"});
  EXPECT_EQ(waited.exit_code, 1) << waited.output;
  EXPECT_THAT(waited.output, ::testing::StartsWith("waited-"));
  EXPECT_THAT(waited.output, HasSubstr(" FAILED"));
  waited = Cli({"submit", "--name", "waited", "--wait", "--", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(waited.exit_code, 0) << waited.output;
  EXPECT_THAT(waited.output, HasSubstr(" SUCCEEDED"));

  nlohmann::json nodes = Json(Cli({"nodes", "--output", "json"}));
  ASSERT_EQ(nodes["nodes"].size(), 2u);
  EXPECT_EQ(nodes["nodes"][0]["state"], "ALIVE");
  EXPECT_EQ(nodes["nodes"][0]["slots"], 2);

  // The failing rank's output reached the service (`logs`) and is on its node.
  RunResult logs_out = Cli({"logs", bad_job, "--rank", "3"});
  EXPECT_EQ(logs_out.exit_code, 0) << logs_out.output;
  EXPECT_THAT(logs_out.output, HasSubstr("boom"));
  const std::string node = j["root_cause"]["node_id"];
  EXPECT_THAT(
      testing::ReadFile(logs + "/" + node + "/" + bad_job + "/attempt_1/1/stderr.log"),
      HasSubstr("boom"));

  for (auto& d : daemons) {
    d->Signal(SIGTERM);
    EXPECT_TRUE(d->Wait(kWait).ok());
  }
}

// A daemon-run attempt detects a hang too, and the service shows it as the
// root cause: a worker that stops itself (SIGSTOP) and never reports.
TEST_F(CliE2eTest, HungWorkerOnADaemonIsTheRootCause) {
  const std::string logs = testing::MakeTempDir("cli_hang");
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> d = testing::Subprocess::Start(
      {BinDir() + "/elastrund", "--rendezvous", address_, "--node-id", "n1", "--slots",
       "1", "--state-dir", logs + "/state", "--log-dir", logs, "--token-file",
       token_file_, "--cred-socket", "none"},
      {"ELASTRUN_SNAPSHOT_BASE=" + logs});
  ASSERT_TRUE(d.ok()) << d.status();
  RunResult job =
      Cli({"submit", "--name", "stuck", "--hang-timeout", "2s", "--wait-for-nodes", "--",
           "/bin/sh", "-c", "kill -STOP $$; exit 0"});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const std::string id(absl::StripTrailingAsciiWhitespace(job.output));
  RunResult wait = Cli({"wait", id, "--timeout", "120"});
  EXPECT_EQ(wait.exit_code, 1) << wait.output;
  EXPECT_THAT(wait.output,
              HasSubstr("rank 0 (local 0), round 0: rank 0 hung before reporting a step "
                        "(no progress for 2"));
  nlohmann::json j = Json(Cli({"status", id, "--output", "json"}));
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["spec"]["hang_timeout"], "2s");
  EXPECT_EQ(j["root_cause"]["hung"], true);
  EXPECT_EQ(j["root_cause"]["hung_step"], -1);
  EXPECT_THAT(testing::ReadFile(logs + "/" + id + "/attempt_0/0/stderr.log"),
              HasSubstr("elastrun: rank 0 hung before reporting a step"));
  (*d)->Signal(SIGTERM);
  EXPECT_TRUE((*d)->Wait(kWait).ok());
}

// One real daemon with one slot: a 2-worker job is refused at submit,
// naming what it needs and what is there; with --wait-for-nodes it waits,
// PENDING, while a 1-worker job behind it runs to the end.
TEST_F(CliE2eTest, AJobNoNodeCanHoldIsRefusedAndWaitingForNodesBlocksNoOne) {
  const std::string dir = testing::MakeTempDir("cli_nofit");
  auto submit = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"submit", "--name", "j"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", "exit 0"});
    return Cli(args);
  };
  auto id = [](const RunResult& r) {
    return std::string(absl::StripTrailingAsciiWhitespace(r.output));
  };
  // Queued before the daemon is up; its end proves the daemon registered.
  RunResult first = submit({"--wait-for-nodes"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> daemon =
      testing::Subprocess::Start(
          {BinDir() + "/elastrund", "--rendezvous", address_, "--node-id", "node-a",
           "--slots", "1", "--state-dir", dir + "/state", "--log-dir", dir + "/logs",
           "--token-file", token_file_, "--cred-socket", dir + "/cred.sock"},
          {"ELASTRUN_SNAPSHOT_BASE=" + dir});  // off the real /dev/shm
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RunResult wait = Cli({"wait", id(first), "--timeout", "120"});
  ASSERT_EQ(wait.exit_code, 0) << wait.output << (*daemon)->Output();

  RunResult refused = submit({"--nproc-per-node", "2"});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output,
              HasSubstr("elastrun submit: job needs 1 node(s) with 2 slots each; "
                        "registered: node-a (1 slot); submit with --wait-for-nodes"));
  // Nothing was stored for it: the list holds the first job only.
  EXPECT_EQ(Json(Cli({"list", "--output", "json"}))["jobs"].size(), 1u);

  RunResult big = submit({"--nproc-per-node", "2", "--wait-for-nodes"});
  ASSERT_EQ(big.exit_code, 0) << big.output;
  RunResult small = submit({});
  ASSERT_EQ(small.exit_code, 0) << small.output;
  wait = Cli({"wait", id(small), "--timeout", "120"});
  EXPECT_EQ(wait.exit_code, 0) << wait.output << (*daemon)->Output();
  EXPECT_THAT(wait.output, HasSubstr(id(small) + " SUCCEEDED"));
  nlohmann::json j = Json(Cli({"status", id(big), "--output", "json"}));
  EXPECT_EQ(j["state"], "PENDING");
  EXPECT_EQ(
      j["pending_reason"],
      "waiting for nodes: job needs 1 node(s) with 2 slots each; registered: node-a "
      "(1 slot)");
  EXPECT_THAT(Cli({"status", id(big)}).output,
              HasSubstr("PENDING (queued: waiting for nodes"));
  EXPECT_EQ(Cli({"cancel", id(big)}).exit_code, 0);

  (*daemon)->Signal(SIGTERM);
  EXPECT_TRUE((*daemon)->Wait(kWait).ok());
}

// Every node daemon holds a connection to the service: started with a
// soft limit of 256 open files (a shell's default is 1024), the service
// raises it to the hard limit, so 10,000 nodes can connect where the hard
// limit allows.
TEST(ServiceBinaryE2eTest, RaisesItsOpenFileLimitForOneConnectionPerNode) {
  rlimit ours;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &ours), 0);
  if (ours.rlim_max <= 256)
    GTEST_SKIP() << "the hard limit on open files is " << ours.rlim_max;
  Service service;
  service.set_soft_open_files(256);
  const std::string token =
      WriteTokenFile(testing::MakeTempDir("service_nofile"), "nofile-token\n");
  ASSERT_FALSE(service.Start({"--token-file", token}).empty());
  const std::string limits =
      testing::ReadFile(absl::StrCat("/proc/", service.pid(), "/limits"));
  const std::string hard = ours.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                          : std::to_string(ours.rlim_max);
  EXPECT_THAT(limits, ::testing::ContainsRegex("Max open files +" + hard + " +" + hard))
      << limits;
}

// The real binaries: --version, and a usage error naming the flag, exit 2.
TEST(CliBinariesE2eTest, VersionAndUsageErrorsOfEveryBinary) {
  for (const char* binary : {"elastrun", "elastrund", "elastrun-rendezvous"}) {
    absl::StatusOr<RunResult> v = testing::Run({BinDir() + "/" + binary, "--version"});
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->exit_code, 0) << binary;
    EXPECT_THAT(v->output,
                MatchesRegex(std::string(binary) +
                             " [0-9]+\\.[0-9]+\\.[0-9]+ \\((commit [0-9a-f]+; )?"
                             "CUDA [^)]+\\)\n"));
    absl::StatusOr<RunResult> bad =
        testing::Run({BinDir() + "/" + binary, "--no-such-flag"});
    ASSERT_TRUE(bad.ok()) << bad.status();
    EXPECT_EQ(bad->exit_code, 2) << binary;
    EXPECT_EQ(bad->output, absl::StrCat(binary, ": unknown flag --no-such-flag\nRun '",
                                        binary, " --help' for usage.\n"));
  }
  // Several nodes need an endpoint (a usage error), and one that nobody
  // hosts ends the run after join_timeout, naming it.
  absl::StatusOr<RunResult> run =
      testing::Run({BinDir() + "/elastrun", "run", "--nnodes", "2", "/bin/true"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 2);
  EXPECT_THAT(run->output, HasSubstr("elastrun run: --nnodes 2 needs --rdzv-endpoint"));
  run = testing::Run({BinDir() + "/elastrun", "run", "--rdzv-endpoint", "192.0.2.1:29400",
                      "--local-addr", "127.0.0.1", "--rdzv-conf", "join_timeout=1",
                      "/bin/true"});
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 1) << run->output;
  EXPECT_THAT(run->output,
              HasSubstr("no rendezvous at 192.0.2.1:29400 within join_timeout"));
}

// `elastrun launch`, torch.distributed.launch's contract: a script that
// reads --local_rank from its arguments gets each worker's own, on the
// first attempt and after a restart; with --use_env it gets none and reads
// $LOCAL_RANK.
TEST(LaunchE2eTest, LegacyScriptGetsItsLocalRankBeforeAndAfterARestart) {
  const std::string dir = testing::MakeTempDir("launch_e2e");
  const std::string script = dir + "/legacy.py";
  // Local rank 1 fails the first attempt once local rank 0 has printed
  // (its mark file), so that both lines of that attempt are there.
  ASSERT_FALSE(
      testing::WriteFile(
          script,
          absl::StrCat(
              "import argparse, os, pathlib, sys, time\n"
              "p = argparse.ArgumentParser()\n"
              "p.add_argument('--local_rank', type=int, default=-1)\n"
              "p.add_argument('--tag', default='')\n"
              "a = p.parse_args()\n"
              "restart = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
              "print(f\"tag={a.tag} arg={a.local_rank} env={os.environ['LOCAL_RANK']} "
              "restart={restart}\", flush=True)\n"
              "mark = pathlib.Path('",
              dir,
              "', f'{a.tag}_{restart}')\n"
              "if os.environ['LOCAL_RANK'] == '0':\n"
              "    mark.touch()\n"
              "elif a.tag == 't' and restart == '0':\n"
              "    end = time.time() + 60\n"
              "    while not mark.exists() and time.time() < end:\n"
              "        time.sleep(0.01)\n"
              "    sys.exit(3)\n"))
          .empty());
  absl::StatusOr<RunResult> r =
      testing::Run({BinDir() + "/elastrun", "launch", "--nproc_per_node", "2",
                    "--max_restarts", "1", "--master_port", "0", script, "--tag", "t"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  for (const char* restart : {"0", "1"}) {
    for (const char* local : {"0", "1"}) {
      EXPECT_THAT(r->output, HasSubstr(absl::StrCat("tag=t arg=", local, " env=", local,
                                                    " restart=", restart)))
          << r->output;
    }
  }
  r = testing::Run({BinDir() + "/elastrun", "launch", "--use_env", "--nproc_per_node",
                    "2", "--master_port", "0", script, "--tag", "u"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_THAT(r->output, HasSubstr("tag=u arg=-1 env=0 restart=0")) << r->output;
  EXPECT_THAT(r->output, HasSubstr("tag=u arg=-1 env=1 restart=0")) << r->output;
}

// PyTorch's launch_test.py, both cases, under `elastrun launch`: its
// flags as the test passes them (torchrun's spawn start method and
// monitor interval included), 4 workers. Without --use-env the script
// requires its --local-rank / --local_rank argument to equal $LOCAL_RANK;
// with it, the script finds the whole contract in its environment (and
// the launcher's own variables, a sentinel set by the parent) and touches
// a file named after its global rank.
TEST(LaunchE2eTest, PyTorchsLaunchTestCases) {
  const std::string dir = testing::MakeTempDir("launch_cases");
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  ASSERT_FALSE(
      testing::WriteFile(
          dir + "/local_rank.py",
          "import argparse, os\n"
          "p = argparse.ArgumentParser()\n"
          "p.add_argument('--local-rank', '--local_rank', type=int, required=True)\n"
          "a = p.parse_args()\n"
          "if a.local_rank != int(os.environ['LOCAL_RANK']):\n"
          "    raise RuntimeError(f'--local-rank {a.local_rank}, LOCAL_RANK '\n"
          "                       f\"{os.environ['LOCAL_RANK']}\")\n")
          .empty());
  ASSERT_FALSE(
      testing::WriteFile(
          dir + "/contract.py",
          "import argparse, os, pathlib\n"
          "p = argparse.ArgumentParser()\n"
          "p.add_argument('--touch-file-dir', required=True)\n"
          "a = p.parse_args()\n"
          "for v in ['LOCAL_RANK', 'RANK', 'GROUP_RANK', 'ROLE_RANK', 'ROLE_NAME',\n"
          "          'LOCAL_WORLD_SIZE', 'WORLD_SIZE', 'ROLE_WORLD_SIZE', "
          "'MASTER_ADDR',\n"
          "          'MASTER_PORT', 'TORCHELASTIC_RESTART_COUNT', "
          "'TORCHELASTIC_MAX_RESTARTS',\n"
          "          'TORCHELASTIC_RUN_ID', 'OMP_NUM_THREADS', 'TEST_SENTINEL_PARENT',\n"
          "          'TORCHELASTIC_ERROR_FILE']:\n"
          "    assert v in os.environ, f'{v} is not set'\n"
          "assert os.environ['TEST_SENTINEL_PARENT'] == 'FOOBAR'\n"
          "pathlib.Path(a.touch_file_dir, os.environ['RANK']).touch()\n")
          .empty());
  const std::vector<std::string> flags = {BinDir() + "/elastrun",
                                          "launch",
                                          "--nnodes=1",
                                          "--nproc-per-node=4",
                                          "--monitor-interval=1",
                                          "--start-method=spawn",
                                          "--master-addr=localhost",
                                          absl::StrCat("--master-port=", port),
                                          "--node-rank=0"};
  std::vector<std::string> without_env = flags;
  without_env.push_back(dir + "/local_rank.py");
  absl::StatusOr<RunResult> r =
      testing::Run(without_env, {"TEST_SENTINEL_PARENT=FOOBAR"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  const std::string touched = dir + "/touched";
  ASSERT_EQ(mkdir(touched.c_str(), 0755), 0);
  std::vector<std::string> with_env = flags;
  with_env.insert(with_env.end(),
                  {"--use-env", dir + "/contract.py", "--touch-file-dir=" + touched});
  r = testing::Run(with_env, {"TEST_SENTINEL_PARENT=FOOBAR"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  std::vector<std::string> files = testing::ListFiles(touched);
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"0", "1", "2", "3"})) << r->output;
}

TEST(CliTokenE2eTest, TokenIsSentAndRequired) {
  const std::string dir = testing::MakeTempDir("cli_token");
  WriteTokenFile(dir, " s3cret \n");
  Service service;
  const std::string address = service.Start({"--token-file", dir + "/token"});
  ASSERT_FALSE(address.empty());
  auto cli = [&](std::vector<std::string> args, std::vector<std::string> env) {
    args.insert(args.begin(), BinDir() + "/elastrun");
    args.insert(args.end(), {"--rendezvous", address});
    absl::StatusOr<RunResult> r = testing::Run(args, env, kWait);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  };
  // No token, and no daemon to ask for a credential (a path with none).
  RunResult none = cli(
      {"list"}, {"ELASTRUN_CRED_SOCKET=" + dir + "/no.sock", "XDG_STATE_HOME=" + dir});
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_THAT(none.output, HasSubstr("--token-file"));
  EXPECT_EQ(cli({"list"}, {"ELASTRUN_TOKEN=s3cret"}).exit_code, 0);
  EXPECT_EQ(cli({"list", "--token-file", dir + "/token"}, {}).exit_code, 0);
  EXPECT_EQ(cli({"list", "--token", "wrong"}, {}).exit_code, 1);
}

}  // namespace
}  // namespace elastrun
