// The job commands in-process against a fake service: flags, environment
// fallbacks, exit codes, what goes to stdout, and `wait`'s polling on a
// FakeClock (its sleep advances the clock; nothing really sleeps).
#include "launcher/cli/cli.h"

#include <deque>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/cli/format.h"
#include "launcher/cli/run_options.h"
#include "tests/testing/certs.h"
#include "tests/testing/subprocess.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What the fake service holds; shared by every client a command opens.
struct FakeService {
  std::vector<ServiceOptions> connects;
  std::vector<v1::JobSpec> submitted;
  std::vector<std::string> taken_ids;    // the request id of each submitted job
  std::vector<std::string> request_ids;  // of every Submit call
  // The next this many submissions are taken, their answers lost
  // (Unavailable, as a connection dropped under the call).
  int answers_lost = 0;
  // Replies to Get, in order; the last one repeats.
  std::deque<absl::StatusOr<v1::JobStatus>> gets;
  int get_calls = 0;
  std::vector<v1::LogChunk> logs;  // what ReadLogs serves, by seq
  // Served too from the late_from_call-th ReadLogs call on (a node's last
  // lines, pushed after the job ended).
  std::vector<v1::LogChunk> late_logs;
  int late_from_call = 0;
  absl::Status error;  // when set, every call fails with it
  // The next this many ReadLogs calls fail Unavailable (a restart).
  int read_logs_failures = 0;
  int read_logs_calls = 0;
  // Chunks one ReadLogs returns at most, as the service's 4 MiB per read
  // (0: all).
  size_t read_logs_page = 0;
};

class FakeJobsClient : public JobsClient {
 public:
  explicit FakeJobsClient(FakeService* s) : s_(s) {}
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec,
                                     const std::string& request_id) override {
    s_->request_ids.push_back(request_id);
    if (!s_->error.ok()) return s_->error;
    // As the service: a request id it took gives the same job again.
    for (size_t i = 0; i < s_->submitted.size(); ++i) {
      if (!request_id.empty() && s_->taken_ids[i] == request_id) {
        return absl::StrCat(spec.name().empty() ? "job" : spec.name(), "-", i + 1);
      }
    }
    s_->submitted.push_back(spec);
    s_->taken_ids.push_back(request_id);
    if (s_->answers_lost > 0) {
      --s_->answers_lost;
      return absl::UnavailableError("Socket closed");
    }
    return absl::StrCat(spec.name().empty() ? "job" : spec.name(), "-",
                        s_->submitted.size());
  }
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) override {
    ++s_->get_calls;
    if (!s_->error.ok()) return s_->error;
    if (s_->gets.empty()) return absl::NotFoundError("no job " + job_id);
    absl::StatusOr<v1::JobStatus> r = s_->gets.front();
    if (s_->gets.size() > 1) s_->gets.pop_front();
    return r;
  }
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest&) override {
    if (!s_->error.ok()) return s_->error;
    return v1::ListJobsResponse();
  }
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id,
                                       const std::string& reason) override {
    if (!s_->error.ok()) return s_->error;
    v1::JobStatus st;
    st.set_job_id(job_id);
    st.set_state(v1::JOB_STATE_CANCELLED);
    st.set_finish_reason(reason);
    return st;
  }
  absl::StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest&) override {
    if (!s_->error.ok()) return s_->error;
    return v1::ListNodesResponse();
  }
  absl::StatusOr<v1::NodeInfo> DrainNode(const v1::NodeRequest&) override {
    return absl::UnimplementedError("cli_nodes_test.cc tests nodes drain");
  }
  absl::StatusOr<v1::NodeInfo> RemoveNode(const v1::NodeRequest&) override {
    return absl::UnimplementedError("cli_nodes_test.cc tests nodes remove");
  }
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string& job_id, int rank,
                                                     int64_t after_seq) override {
    ++s_->read_logs_calls;
    if (!s_->error.ok()) return s_->error;
    if (s_->read_logs_failures > 0) {
      --s_->read_logs_failures;
      return absl::UnavailableError("restarting");
    }
    std::vector<v1::LogChunk> out;
    std::vector<v1::LogChunk> all = s_->logs;
    if (s_->read_logs_calls >= s_->late_from_call) {
      all.insert(all.end(), s_->late_logs.begin(), s_->late_logs.end());
    }
    for (const v1::LogChunk& c : all) {
      if (c.seq() > after_seq && (rank < 0 || c.rank() == rank)) out.push_back(c);
      if (s_->read_logs_page > 0 && out.size() == s_->read_logs_page) break;
    }
    return out;
  }

 private:
  FakeService* s_;
};

v1::JobStatus Job(v1::JobState state) {
  v1::JobStatus s;
  s.set_job_id("j-1");
  s.set_state(state);
  // A finished job's nodes all sent their last lines.
  s.set_logs_complete(state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
                      state == v1::JOB_STATE_CANCELLED);
  return s;
}

class CliTest : public ::testing::Test {
 protected:
  CliTest() {
    ctx_.env = [this](const std::string& name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    ctx_.connect = [this](const ServiceOptions& o) {
      service_.connects.push_back(o);
      return std::make_unique<FakeJobsClient>(&service_);
    };
    ctx_.clock = &clock_;
    ctx_.sleep = [this](absl::Duration d) { clock_.Advance(d); };
    ctx_.out = &out_;
    ctx_.err = &err_;
    ctx_.run = [this](const RunOptions& o) {
      runs_.push_back(o);
      return 7;
    };
    ctx_.is_this_host = [](const std::string& host) { return host == "me"; };
  }

  int Run(const std::string& command, std::vector<std::string> args) {
    args.insert(args.begin(), command);
    return RunCli(args, ctx_);
  }

  std::map<std::string, std::string> env_;
  FakeService service_;
  FakeClock clock_;
  std::ostringstream out_, err_;
  CliContext ctx_;
  std::vector<RunOptions> runs_;  // what `run` was asked to run
};

TEST_F(CliTest, SubmitFromFlagsPrintsOnlyTheId) {
  EXPECT_EQ(Run("submit", {"--name", "m", "--nnodes=1:2", "--nproc_per_node", "2",
                           "--env", "A=1", "--", "python", "train.py", "--lr", "0.1"}),
            0)
      << err_.str();
  EXPECT_EQ(out_.str(), "m-1\n");
  ASSERT_EQ(service_.submitted.size(), 1u);
  const v1::JobSpec& s = service_.submitted[0];
  EXPECT_EQ(s.max_nodes(), 2);
  EXPECT_EQ(s.nproc_per_node(), 2);
  EXPECT_THAT(s.argv(), ::testing::ElementsAre("python", "train.py", "--lr", "0.1"));
  EXPECT_FALSE(s.wait_for_nodes());
  EXPECT_EQ(Run("submit", {"--wait-for-nodes", "--", "x"}), 0) << err_.str();
  ASSERT_EQ(service_.submitted.size(), 2u);
  EXPECT_TRUE(service_.submitted[1].wait_for_nodes());
}

// A submit whose answer is lost (the service restarting, a connection
// dropped under the call) is sent again with the same request id: the
// service gives the job it took, and the user sees one id, one job.
TEST_F(CliTest, SubmitRetriesALostAnswerWithItsRequestIdAndMakesOneJob) {
  service_.answers_lost = 1;
  EXPECT_EQ(Run("submit", {"--name", "m", "--", "x"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "m-1\n");
  EXPECT_EQ(service_.submitted.size(), 1u);
  ASSERT_EQ(service_.request_ids.size(), 2u);
  EXPECT_EQ(service_.request_ids[0], service_.request_ids[1]);
  EXPECT_EQ(service_.request_ids[0].size(), 32u) << service_.request_ids[0];
  EXPECT_THAT(err_.str(), HasSubstr("unavailable; retrying"));
  // Each submission has its own id.
  EXPECT_EQ(Run("submit", {"--", "x"}), 0) << err_.str();
  EXPECT_EQ(service_.submitted.size(), 2u);
  EXPECT_NE(service_.request_ids.back(), service_.request_ids[0]);
}

TEST_F(CliTest, SubmitWaitPrintsTheIdThenWaitsForTheOutcome) {
  service_.gets = {Job(v1::JOB_STATE_PENDING), absl::UnavailableError("restarting"),
                   Job(v1::JOB_STATE_RUNNING), Job(v1::JOB_STATE_SUCCEEDED)};
  EXPECT_EQ(Run("submit", {"--name", "m", "--wait", "--", "x"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "m-1\n");  // stdout: the id alone, as without --wait
  EXPECT_THAT(err_.str(), HasSubstr("j-1 SUCCEEDED"));
  EXPECT_THAT(err_.str(), HasSubstr("the service is back"));
  EXPECT_EQ(service_.get_calls, 4);
  out_.str("");
  err_.str("");
  service_.gets = {Job(v1::JOB_STATE_RUNNING), Job(v1::JOB_STATE_FAILED)};
  EXPECT_EQ(Run("submit", {"--wait", "--", "x"}), kExitFailed);
  EXPECT_EQ(out_.str(), "job-2\n");
  EXPECT_THAT(err_.str(), HasSubstr("j-1 FAILED"));
  // Without --wait nothing is polled.
  const int polled = service_.get_calls;
  EXPECT_EQ(Run("submit", {"--", "x"}), kExitOk);
  EXPECT_EQ(service_.get_calls, polled);
}

TEST_F(CliTest, SubmitSendsItsFolderAndEnvironment) {
  ctx_.cwd = [] { return std::string("/home/u/project"); };
  ctx_.environment = [] {
    return std::vector<std::string>{"MYVAR=1", "ELASTRUN_TOKEN=secret", "ELASTRUN_TLS_KEY=/k.pem",
                                    "ELASTRUN_CRED_SOCKET=/c.sock", "ELASTRUN_ROUNDX=kept"};
  };
  ASSERT_EQ(Run("submit", {"--env", "A=2", "--", "python3", "train.py"}), 0)
      << err_.str();
  ASSERT_EQ(service_.submitted.size(), 1u);
  const v1::JobSpec& all = service_.submitted[0];
  EXPECT_EQ(all.working_dir(), "/home/u/project");
  EXPECT_TRUE(all.replace_env());
  // elastrun's own token, credential socket and TLS files stay behind.
  EXPECT_THAT(all.env(), ::testing::UnorderedElementsAre(::testing::Pair("MYVAR", "1"),
                                                         ::testing::Pair("ELASTRUN_ROUNDX", "kept"),
                                                         ::testing::Pair("A", "2")));

  ASSERT_EQ(Run("submit", {"--export", "NONE", "--working-dir", "/data", "--", "x"}), 0)
      << err_.str();
  ASSERT_EQ(service_.submitted.size(), 2u);
  EXPECT_EQ(service_.submitted[1].working_dir(), "/data");
  EXPECT_FALSE(service_.submitted[1].replace_env());
  EXPECT_TRUE(service_.submitted[1].env().empty());

  EXPECT_EQ(Run("submit", {"--export", "NONE,X", "--", "x"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("elastrun submit: --export: \"NONE\""));
  EXPECT_EQ(service_.submitted.size(), 2u);
}

TEST_F(CliTest, SubmitFromFileWithOverrides) {
  EXPECT_EQ(
      Run("submit", {std::string(ELASTRUN_CONFIGS_DIR) + "/jobs/fashion_mnist_mlp.yaml",
                     "nnodes=2", "--max-restarts", "0"}),
      0)
      << err_.str();
  ASSERT_EQ(service_.submitted.size(), 1u);
  EXPECT_EQ(service_.submitted[0].min_nodes(), 2);
  EXPECT_EQ(service_.submitted[0].max_nodes(), 2);
  EXPECT_EQ(service_.submitted[0].max_restarts(), 0);
  EXPECT_EQ(out_.str(), "fashion-mnist-mlp-1\n");
}

TEST_F(CliTest, BadSpecIsRefusedBeforeConnecting) {
  EXPECT_EQ(Run("submit", {"--nnodes", "3:2", "--", "x"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--nnodes: MIN 3 is greater than MAX 2"));
  EXPECT_EQ(Run("submit", {"--nnodes", "2"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("no command"));
  EXPECT_EQ(Run("submit", {"/nonexistent/job.yaml"}), kExitUsage);
  EXPECT_EQ(Run("submit", {"python", "train.py"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("put it after \"--\""));
  EXPECT_TRUE(service_.connects.empty());
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliTest, UsageErrors) {
  EXPECT_EQ(Run("status", {}), kExitUsage);
  EXPECT_EQ(Run("status", {"a", "b"}), kExitUsage);
  EXPECT_EQ(Run("list", {"--bogus"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("elastrun list: unknown flag --bogus\n"));
  EXPECT_EQ(Run("list", {"--output", "yaml"}), kExitUsage);
  EXPECT_EQ(Run("status", {"j", "--rendezvous"}), kExitUsage);
  EXPECT_EQ(Run("wait", {"j", "--timeout", "soon"}), kExitUsage);
  EXPECT_EQ(Run("list", {"--token", "a", "--token-file", "/x"}), kExitUsage);
  EXPECT_EQ(Run("list", {"--token-file", "/nonexistent/token"}), kExitUsage);
  EXPECT_EQ(Run("cancel", {"j", "--", "x"}), kExitUsage);
  EXPECT_TRUE(service_.connects.empty());
}

TEST_F(CliTest, ServiceFromFlagThenEnvironmentThenDefault) {
  EXPECT_EQ(Run("list", {}), 0);
  EXPECT_EQ(service_.connects.back().address, "127.0.0.1:29400");
  EXPECT_EQ(service_.connects.back().token, "");
  env_["ELASTRUN_RENDEZVOUS"] = "10.1.2.3:5000";
  env_["ELASTRUN_TOKEN"] = "s3cret";
  EXPECT_EQ(Run("list", {}), 0);
  EXPECT_EQ(service_.connects.back().address, "10.1.2.3:5000");
  EXPECT_EQ(service_.connects.back().token, "s3cret");
  EXPECT_EQ(Run("nodes", {"--rendezvous", "h:1", "--token=t", "--rpc-timeout", "2s"}), 0);
  EXPECT_EQ(service_.connects.back().address, "h:1");
  EXPECT_EQ(service_.connects.back().token, "t");
  EXPECT_EQ(service_.connects.back().rpc_timeout, absl::Seconds(2));
}

TEST_F(CliTest, TlsFromFlagThenEnvironmentAndBadFilesAreUsageErrors) {
  EXPECT_EQ(Run("list", {}), 0);
  EXPECT_FALSE(tls::ClientWantsTls(service_.connects.back().tls));
  // A file that is not there: exit 2 naming the flag, before any call.
  env_["ELASTRUN_TLS_CA"] = "/nonexistent/ca.crt";
  EXPECT_EQ(Run("list", {}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("elastrun list: --tls-ca /nonexistent/ca.crt: no such file"));
  EXPECT_EQ(service_.connects.size(), 1u);
  err_.str("");
  EXPECT_EQ(Run("list", {"--tls-cert", "c.crt"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--tls-cert needs --tls-key"));

  const std::string dir = testing::MakeTempDir("cli_tls");
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir);
  if (absl::IsFailedPrecondition(pki.status())) GTEST_SKIP() << pki.status().message();
  ASSERT_TRUE(pki.ok()) << pki.status();
  env_["ELASTRUN_TLS_CA"] = pki->ca_cert;
  env_["ELASTRUN_TLS_CERT"] = pki->client_cert;
  env_["ELASTRUN_TLS_KEY"] = pki->client_key;
  EXPECT_EQ(Run("list", {}), 0) << err_.str();
  EXPECT_EQ(service_.connects.back().tls.ca, pki->ca_cert);
  EXPECT_EQ(service_.connects.back().tls.cert, pki->client_cert);
  EXPECT_EQ(service_.connects.back().tls.key, pki->client_key);
  EXPECT_NE(service_.connects.back().credentials, nullptr);
  // A flag wins over the environment.
  EXPECT_EQ(Run("list", {"--tls-ca", pki->other_ca_cert, "--tls-server-name", "svc"}), 0)
      << err_.str();
  EXPECT_EQ(service_.connects.back().tls.ca, pki->other_ca_cert);
  EXPECT_EQ(service_.connects.back().tls.server_name, "svc");
}

TEST_F(CliTest, ServiceErrorsMapToExitCodes) {
  service_.error = absl::UnavailableError("cannot reach the elastrun service at h:1");
  EXPECT_EQ(Run("list", {}), kExitUnreachable);
  EXPECT_THAT(err_.str(),
              HasSubstr("elastrun list: cannot reach the elastrun service at h:1"));
  service_.error = absl::DeadlineExceededError("no answer");
  EXPECT_EQ(Run("submit", {"--", "x"}), kExitUnreachable);
  service_.error = absl::InvalidArgumentError("spec.env: bad");
  EXPECT_EQ(Run("submit", {"--", "x"}), kExitUsage);
  // A job no registered node could hold: not a usage error, the command failed.
  service_.error = absl::FailedPreconditionError("job needs 1 node(s) with 2 slots each");
  EXPECT_EQ(Run("submit", {"--nproc-per-node", "2", "--", "x"}), kExitFailed);
  EXPECT_THAT(err_.str(),
              HasSubstr("elastrun submit: job needs 1 node(s) with 2 slots each\n"));
  service_.error = absl::UnauthenticatedError("wrong token");
  EXPECT_EQ(Run("nodes", {}), kExitFailed);
  service_.error = absl::OkStatus();
  EXPECT_EQ(Run("status", {"nope-1"}), kExitNotFound);
  EXPECT_EQ(Run("wait", {"nope-1"}), kExitNotFound);
  EXPECT_EQ(Run("logs", {"nope-1"}), kExitNotFound);
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliTest, StatusJson) {
  service_.gets = {Job(v1::JOB_STATE_PENDING)};
  EXPECT_EQ(Run("status", {"j-1", "--output", "json"}), 0);
  const Json j = Json::parse(out_.str());
  EXPECT_EQ(j["state"], "PENDING");
}

TEST_F(CliTest, WaitPollsUntilSucceeded) {
  service_.gets = {Job(v1::JOB_STATE_PENDING), Job(v1::JOB_STATE_RUNNING),
                   Job(v1::JOB_STATE_SUCCEEDED)};
  const absl::Time start = clock_.Now();
  EXPECT_EQ(Run("wait", {"j-1", "--poll-interval", "1s"}), kExitOk);
  EXPECT_EQ(service_.get_calls, 3);
  EXPECT_EQ(clock_.Now() - start, absl::Seconds(2));
  EXPECT_THAT(out_.str(), HasSubstr("j-1 SUCCEEDED"));
}

TEST_F(CliTest, WaitFailsForFailedOrCancelled) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING), Job(v1::JOB_STATE_FAILED)};
  EXPECT_EQ(Run("wait", {"j-1"}), kExitFailed);
  EXPECT_THAT(out_.str(), HasSubstr("j-1 FAILED"));
  service_.gets = {Job(v1::JOB_STATE_CANCELLED)};
  EXPECT_EQ(Run("wait", {"j-1", "--output", "json"}), kExitFailed);
  // A failure's root cause: the block `elastrun run` prints, on stderr.
  v1::JobStatus failed = Job(v1::JOB_STATE_FAILED);
  v1::WorkerFailure* f = failed.mutable_root_cause();
  f->set_node_id("n2");
  f->set_round(1);
  f->set_rank(3);
  f->set_local_rank(1);
  f->set_exit_code(7);
  f->set_message("boom");
  service_.gets = {failed};
  err_.str("");
  EXPECT_EQ(Run("wait", {"j-1"}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("Root cause (first observed failure):\n"));
  EXPECT_THAT(err_.str(), HasSubstr("  host       : n2\n"));
  EXPECT_THAT(err_.str(), HasSubstr("  rank       : 3 (local_rank: 1)\n"));
  EXPECT_THAT(err_.str(), HasSubstr("  exit       : exit code 7\n"));
  EXPECT_THAT(err_.str(), HasSubstr("  message    : boom\n"));
  EXPECT_THAT(err_.str(), HasSubstr("/j-1/attempt_1/1/\n"));
}

TEST_F(CliTest, WaitTimesOut) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING)};
  EXPECT_EQ(Run("wait", {"j-1", "--timeout", "3", "--poll-interval", "1"}), kExitTimeout);
  EXPECT_THAT(err_.str(), HasSubstr("did not end within 3s"));
  EXPECT_THAT(out_.str(), HasSubstr("j-1 RUNNING"));
}

TEST_F(CliTest, WaitRidesOutAServiceRestart) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING), absl::UnavailableError("down"),
                   absl::UnavailableError("down"), Job(v1::JOB_STATE_SUCCEEDED)};
  EXPECT_EQ(Run("wait", {"j-1"}), kExitOk);
  EXPECT_THAT(err_.str(), HasSubstr("retrying"));
  EXPECT_THAT(err_.str(), HasSubstr("the service is back"));
}

TEST_F(CliTest, WaitGivesUpOnAServiceGoneForGood) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING), absl::UnavailableError("down")};
  EXPECT_EQ(Run("wait", {"j-1", "--poll-interval", "1s"}), kExitUnreachable);
}

TEST_F(CliTest, ReadCommandsRideOutAServiceRestart) {
  const absl::Time t0 = clock_.Now();
  service_.gets = {absl::UnavailableError("down"), absl::UnavailableError("down"),
                   Job(v1::JOB_STATE_RUNNING)};
  EXPECT_EQ(Run("status", {"j-1", "--rendezvous", "h:1"}), kExitOk);
  EXPECT_THAT(out_.str(), HasSubstr("RUNNING"));
  // One line when the outage starts, one when it ends; backoff 50ms + 100ms.
  EXPECT_THAT(err_.str(),
              HasSubstr("elastrun status: service at h:1 unavailable; retrying for up "
                        "to 1m"));
  EXPECT_THAT(err_.str(), HasSubstr("the service is back"));
  EXPECT_EQ(clock_.Now() - t0, absl::Milliseconds(150));
  EXPECT_EQ(service_.get_calls, 3);

  // `wait`'s first look is retried too.
  service_.gets = {absl::UnavailableError("down"), Job(v1::JOB_STATE_SUCCEEDED)};
  EXPECT_EQ(Run("wait", {"j-1"}), kExitOk);
}

TEST_F(CliTest, ReadCommandsGiveUpAfterRetryFor) {
  service_.error = absl::UnavailableError("down");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list"}, {"nodes"}, {"status", "j-1"}, {"logs", "j-1"},
        {"wait", "j-1"}}) {
    const absl::Time t0 = clock_.Now();
    std::vector<std::string> rest(args.begin() + 1, args.end());
    rest.insert(rest.end(), {"--retry-for", "3s"});
    EXPECT_EQ(Run(args[0], rest), kExitUnreachable) << args[0];
    EXPECT_EQ(clock_.Now() - t0, absl::Seconds(3)) << args[0];
  }
  // 0: no retry at all.
  const absl::Time t0 = clock_.Now();
  EXPECT_EQ(Run("list", {"--retry-for", "0"}), kExitUnreachable);
  EXPECT_EQ(clock_.Now(), t0);
  EXPECT_EQ(Run("list", {"--retry-for", "-1s"}), kExitUsage);
}

TEST_F(CliTest, ErrorsThatARetryCannotFixAreNotRetried) {
  for (const absl::Status& st :
       {absl::NotFoundError("no job"), absl::PermissionDeniedError("no"),
        absl::InvalidArgumentError("bad"), absl::UnauthenticatedError("token")}) {
    service_.error = st;
    service_.get_calls = 0;
    const absl::Time t0 = clock_.Now();
    EXPECT_NE(Run("status", {"j-1"}), kExitOk);
    EXPECT_EQ(service_.get_calls, 1) << st;
    EXPECT_EQ(clock_.Now(), t0) << st;
  }
  EXPECT_THAT(err_.str(), Not(HasSubstr("retrying")));
}

TEST_F(CliTest, WaitTimeoutCutsAnOutageShort) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING), absl::UnavailableError("down")};
  EXPECT_EQ(Run("wait", {"j-1", "--timeout", "5s"}), kExitTimeout);
  EXPECT_THAT(err_.str(), HasSubstr("did not end within 5s"));
}

TEST_F(CliTest, CancelPrintsTheLine) {
  EXPECT_EQ(Run("cancel", {"j-1", "--reason", "enough"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("j-1 CANCELLED"));
  EXPECT_THAT(out_.str(), HasSubstr("enough"));
}

v1::LogChunk Line(int64_t seq, int rank, const std::string& text) {
  v1::LogChunk c;
  c.set_seq(seq);
  c.set_rank(rank);
  c.set_stream("stdout");
  c.set_data(text + "\n");
  return c;
}

TEST_F(CliTest, LogsPrintsForwardedLinesWithRanks) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING)};
  service_.logs = {Line(1, 0, "hello"), Line(2, 1, "world")};
  EXPECT_EQ(Run("logs", {"j-1"}), kExitOk);
  EXPECT_EQ(out_.str(), "[rank0]:hello\n[rank1]:world\n");
  out_.str("");
  EXPECT_EQ(Run("logs", {"j-1", "--rank", "1"}), kExitOk);
  EXPECT_EQ(out_.str(), "world\n");
  EXPECT_EQ(Run("logs", {"j-1", "--rank", "x"}), kExitUsage);
}

// One read of the service returns at most 4 MiB: `logs` reads on to the
// end of what the service keeps (it printed the first 4 MiB of a larger
// log, and nothing after, exit 0).
TEST_F(CliTest, LogsReadsOnPastOneReadsWorth) {
  service_.gets = {Job(v1::JOB_STATE_SUCCEEDED)};
  service_.logs = {Line(1, 0, "a"), Line(2, 0, "b"), Line(3, 1, "c"), Line(4, 0, "d"),
                   Line(5, 0, "e")};
  service_.read_logs_page = 2;
  EXPECT_EQ(Run("logs", {"j-1"}), kExitOk);
  EXPECT_EQ(out_.str(), "[rank0]:a\n[rank0]:b\n[rank1]:c\n[rank0]:d\n[rank0]:e\n");
}

// Output the service dropped before the reader got it (its bound per job)
// is said where it was, on stderr, not silently skipped.
TEST_F(CliTest, LogsSayWhereTheServiceDroppedOutput) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING)};
  v1::LogChunk after_gap = Line(9, 0, "later");
  after_gap.set_gap_before(true);
  service_.logs = {after_gap, Line(10, 0, "last")};
  EXPECT_EQ(Run("logs", {"j-1"}), kExitOk);
  EXPECT_EQ(out_.str(), "[rank0]:later\n[rank0]:last\n");
  EXPECT_THAT(err_.str(), HasSubstr("elastrun logs: output of job j-1 was dropped before "
                                    "this point"));
  EXPECT_THAT(err_.str(), HasSubstr("--log-dir"));
}

TEST_F(CliTest, LogsFollowReadsUntilTheJobHasEnded) {
  // RUNNING on the first two looks, then SUCCEEDED; every line once.
  service_.gets = {Job(v1::JOB_STATE_RUNNING), Job(v1::JOB_STATE_RUNNING),
                   Job(v1::JOB_STATE_SUCCEEDED)};
  service_.logs = {Line(1, 0, "a"), Line(2, 0, "b")};
  EXPECT_EQ(Run("logs", {"j-1", "-f"}), kExitOk);
  EXPECT_EQ(out_.str(), "[rank0]:a\n[rank0]:b\n");
  EXPECT_GE(service_.get_calls, 3);
}

// A job that ended while another node's last lines are still on their way
// (its workers print as they are stopped): `logs -f` reads on until the
// service says every node sent its last lines.
TEST_F(CliTest, LogsFollowWaitsForEveryNodesLastLines) {
  v1::JobStatus failed = Job(v1::JOB_STATE_FAILED);
  failed.set_logs_complete(false);
  service_.gets = {Job(v1::JOB_STATE_RUNNING), failed, failed, Job(v1::JOB_STATE_FAILED)};
  service_.logs = {Line(1, 0, "rank 0 fails")};
  service_.late_logs = {Line(2, 1, "last line of rank 1")};
  service_.late_from_call = 3;
  EXPECT_EQ(Run("logs", {"j-1", "-f"}), kExitFailed);
  EXPECT_EQ(out_.str(), "[rank0]:rank 0 fails\n[rank1]:last line of rank 1\n");
}

// `logs -f` ends as `wait` does: non-zero for a job that failed or was
// cancelled, naming how it ended; plain `logs` (no follow) prints and
// exits 0 whatever the job's state.
TEST_F(CliTest, LogsFollowOfAFailedJobExitsNonZero) {
  for (v1::JobState end : {v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}) {
    service_.gets = {Job(v1::JOB_STATE_RUNNING), Job(end)};
    service_.logs = {Line(1, 0, "a")};
    out_.str("");
    err_.str("");
    EXPECT_EQ(Run("logs", {"j-1", "-f"}), kExitFailed) << v1::JobState_Name(end);
    EXPECT_EQ(out_.str(), "[rank0]:a\n");
    EXPECT_THAT(err_.str(), HasSubstr(v1::JobState_Name(end).substr(10))) << err_.str();
    service_.gets = {Job(end)};
    EXPECT_EQ(Run("logs", {"j-1"}), kExitOk);
  }
}

TEST_F(CliTest, LogsFollowResumesAfterARestartWithoutRepeats) {
  service_.gets = {Job(v1::JOB_STATE_RUNNING), Job(v1::JOB_STATE_RUNNING),
                   Job(v1::JOB_STATE_SUCCEEDED)};
  // Rank 0's line "bc" is split across two chunks with rank 1's line
  // between: "b" is ended there, and "c" gets a prefix of its own.
  service_.logs = {Line(1, 0, "a"), Line(2, 0, "b"), Line(3, 1, "x"), Line(4, 0, "c")};
  service_.logs[1].set_data("b");
  service_.read_logs_failures = 2;
  EXPECT_EQ(Run("logs", {"j-1", "-f"}), kExitOk);
  EXPECT_EQ(out_.str(), "[rank0]:a\n[rank0]:b\n[rank1]:x\n[rank0]:c\n");
  EXPECT_GE(service_.read_logs_calls, 3);
  EXPECT_THAT(err_.str(), HasSubstr("retrying"));
}

TEST_F(CliTest, HelpForEveryCommandListsExitCodes) {
  for (const char* cmd : {"submit", "status", "list", "nodes", "cancel", "wait", "logs"}) {
    out_.str("");
    EXPECT_EQ(Run(cmd, {"--help"}), 0) << cmd;
    EXPECT_THAT(out_.str(), ::testing::StartsWith(std::string("usage: elastrun ") + cmd));
    EXPECT_THAT(out_.str(), HasSubstr("4  no such job"));
    EXPECT_THAT(out_.str(), HasSubstr("--rendezvous HOST:PORT"));
    // `elastrun help CMD` prints the same text.
    const std::string help = out_.str();
    out_.str("");
    EXPECT_EQ(Run("help", {cmd}), 0) << cmd;
    EXPECT_EQ(out_.str(), help) << cmd;
  }
  out_.str("");
  EXPECT_EQ(Run("help", {"run"}), 0);
  EXPECT_THAT(out_.str(), ::testing::StartsWith("usage: elastrun run [FLAGS] PROGRAM"));
  EXPECT_EQ(out_.str(), RunUsage());
  out_.str("");
  EXPECT_EQ(RunCli({"--help"}, ctx_), 0);
  EXPECT_THAT(out_.str(), HasSubstr("3  the service could not be reached"));
  for (const char* cmd : {"run", "submit", "status", "list", "nodes", "cancel", "wait", "logs"}) {
    EXPECT_THAT(out_.str(), HasSubstr(std::string("\n  ") + cmd + " ")) << cmd;
  }
  EXPECT_TRUE(service_.connects.empty());
  EXPECT_TRUE(err_.str().empty()) << err_.str();
}

// Every flag a command's help lists is one the command takes (the help
// tells the truth), and every flag it takes is listed.
TEST_F(CliTest, HelpListsExactlyTheFlagsThatParse) {
  for (const char* cmd : {"submit", "status", "list", "nodes", "cancel", "wait", "logs"}) {
    out_.str("");
    ASSERT_EQ(Run(cmd, {"--help"}), 0);
    const std::string help = out_.str();
    for (size_t at = help.find("\n  --"); at != std::string::npos;
         at = help.find("\n  --", at + 1)) {
      const std::string flag = help.substr(at + 3, help.find_first_of(" \n", at + 3) - at - 3);
      if (flag == "--help") continue;
      err_.str("");
      Run(cmd, {flag, "x"});
      EXPECT_THAT(err_.str(), Not(HasSubstr("unknown flag"))) << cmd << " " << flag;
    }
  }
}

TEST_F(CliTest, UsageErrorsNameTheFlagAndExit2) {
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"status", "j-1", "--outptu", "json"}, "elastrun status: unknown flag --outptu"},
           {{"status", "j-1", "--output"}, "elastrun status: --output needs a value"},
           {{"list", "--output", "yaml"}, "elastrun list: --output: \"yaml\" is not text or json"},
           {{"list", "extra"}, "elastrun list: unexpected argument extra"},
           {{"wait", "j-1", "--timeout", "soon"}, "elastrun wait: --timeout"},
           {{"logs", "j-1", "--rank", "-1"}, "elastrun logs: --rank"},
           {{"submit", "--name", "x", "--"}, "elastrun submit: \"--\" must be followed"},
           {{"bogus"}, "elastrun: unknown command bogus"},
           {{"help", "bogus"}, "elastrun help: unknown command bogus"},
           {{"run", "--nproc-per-node"}, "elastrun run: --nproc-per-node needs a value"},
           {{"run", "--nproc-per-nodes", "2", "w"}, "elastrun run: unknown flag --nproc-per-nodes"}}) {
    err_.str("");
    EXPECT_EQ(RunCli(args, ctx_), kExitUsage) << says;
    EXPECT_THAT(err_.str(), HasSubstr(says));
    const std::string where = says.substr(0, says.find(':'));
    EXPECT_THAT(err_.str(), HasSubstr("\nRun '" + where + " --help' for usage.\n")) << err_.str();
  }
  EXPECT_TRUE(service_.connects.empty());
  EXPECT_TRUE(runs_.empty());
}

TEST_F(CliTest, VersionNamesTheProjectVersion) {
  EXPECT_EQ(RunCli({"--version"}, ctx_), 0);
  EXPECT_THAT(out_.str(), ::testing::MatchesRegex("elastrun [0-9]+\\.[0-9]+\\.[0-9]+ "
                                                  "\\((commit [0-9a-f]+; )?CUDA [^)]+\\)\n"));
}

TEST_F(CliTest, RunPassesTheProgramItsWordsAndWarns) {
  env_["PET_MAX_RESTARTS"] = "2";
  EXPECT_EQ(Run("run", {"--nproc_per_node=2", "--local-addr", "10.0.0.5", "--rdzv-endpoint",
                        "me:29400", "train.py", "--lr", "0.1", "--nproc-per-node", "9"}),
            7);
  ASSERT_EQ(runs_.size(), 1u);
  EXPECT_EQ(runs_[0].nproc_per_node_text, "2");
  EXPECT_EQ(runs_[0].max_restarts, 2);
  EXPECT_THAT(runs_[0].program,
              ::testing::ElementsAre("train.py", "--lr", "0.1", "--nproc-per-node", "9"));
  EXPECT_THAT(err_.str(), HasSubstr("elastrun run: warning: --local-addr is ignored"));

  // "--" ends the flags.
  EXPECT_EQ(Run("run", {"--", "/bin/sh", "-c", "exit 0"}), 7);
  ASSERT_EQ(runs_.size(), 2u);
  EXPECT_THAT(runs_[1].program, ::testing::ElementsAre("/bin/sh", "-c", "exit 0"));
  out_.str("");
  EXPECT_EQ(Run("run", {"--help"}), 0);
  EXPECT_EQ(out_.str(), RunUsage());

  // An endpoint on another host: the multi-node form.
  EXPECT_EQ(Run("run", {"--rdzv-endpoint", "other:29400", "train.py"}), 7);
  ASSERT_EQ(runs_.size(), 3u);
  EXPECT_TRUE(runs_[2].multinode);
  // argparse's abbreviations; an ambiguous one is a usage error.
  EXPECT_EQ(Run("run", {"--nproc_per", "3", "train.py"}), 7);
  ASSERT_EQ(runs_.size(), 4u);
  EXPECT_EQ(runs_[3].nproc_per_node_text, "3");
  err_.str("");
  EXPECT_EQ(Run("run", {"--ma", "1", "train.py"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("elastrun run: ambiguous flag --ma: could be"));
  EXPECT_EQ(runs_.size(), 4u);
}

}  // namespace
}  // namespace elastrun::launcher
