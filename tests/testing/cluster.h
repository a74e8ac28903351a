// The shared setup of the end-to-end tests in tests/: a real
// elastrun-rendezvous and real daemons as tagged subprocesses, and a small
// Jobs client. Header-only.
#ifndef ELASTRUN_TESTS_TESTING_CLUSTER_H_
#define ELASTRUN_TESTS_TESTING_CLUSTER_H_

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/http.h"
#include "tests/testing/subprocess.h"

namespace elastrun::daemon_testing {

inline constexpr absl::Duration kDeadline = absl::Seconds(90);
// Polling interval for states only visible through the API or a log file.
inline constexpr absl::Duration kPoll = absl::Milliseconds(20);

// Polls `done` every kPoll until it holds or kDeadline passes.
inline bool PollUntil(const std::function<bool()>& done) {
  const absl::Time end = absl::Now() + kDeadline;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(kPoll);
  }
  return true;
}

inline bool Finished(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

// The address after "metrics on " in a process's output, once printed.
inline std::string MetricsAddress(const testing::Subprocess& p) {
  std::string addr;
  EXPECT_TRUE(PollUntil([&] {
    const std::string out = p.Output();
    const size_t at = out.find("metrics on ");
    if (at == std::string::npos) return false;
    const size_t end = out.find('\n', at);
    if (end == std::string::npos) return false;
    addr = out.substr(at + 11, end - at - 11);
    return true;
  })) << p.Output();
  return addr;
}

// The value of sample `key` scraped from `addr`, or -1 when absent.
inline double Scrape(const std::string& addr, const std::string& key) {
  absl::StatusOr<testing::HttpAnswer> a = testing::HttpGet(addr, "/metrics");
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(a->body, '\n')) {
    double v = 0;
    if (absl::ConsumePrefix(&line, key + " ") && absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

// The service and its daemons. Every process gets `marker` in its
// environment; call ASSERT_NO_FATAL_FAILURE around the Start* methods.
// They all share a token in an owner-only file in `dir` (`token`, or one
// made up), never the default token file; each daemon serves credentials
// on its own socket in `dir` (cred_socket(i)).
class Cluster {
 public:
  Cluster(std::string dir, std::string marker, std::string token = "")
      : dir_(std::move(dir)), marker_(std::move(marker)), token_(std::move(token)) {
    if (token_.empty()) token_ = "cluster-token-" + marker_;
    token_file_ = dir_ + "/token";
    EXPECT_FALSE(testing::WriteOwnerOnlyFile(token_file_, token_).empty()) << token_file_;
  }

  // Starts elastrun-rendezvous on `listen` with its state in dir/state and
  // `extra` flags (e.g. a lease timeout).
  void StartService(const std::string& listen,
                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {testing::BinDir() + "/elastrun-rendezvous",
                                     "--listen", listen, "--state-dir", dir_ + "/state"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--token-file", token_file_});
    auto service = testing::Subprocess::Start(argv, {marker_});
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    const std::string prefix = "listening on ";
    ASSERT_TRUE(PollUntil([&] { return absl::StrContains(service_->Output(), prefix); }))
        << service_->Output();
    const std::string out = service_->Output();
    const size_t at = out.find(prefix) + prefix.size();
    address_ = out.substr(at, out.find('\n', at) - at);
    jobs_ = v1::Jobs::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  // Uses a service the test started itself at `endpoints`: "HOST:PORT", or
  // the replicas of an HA control plane comma-separated, given to the
  // daemons and the CLI as they are (the stub here goes to whichever
  // accepts, the leader).
  void AttachService(const std::string& endpoints) {
    address_ = endpoints;
    jobs_ = v1::Jobs::NewStub(rpc::NewChannel({endpoints}));
  }

  // Starts daemon "node<N>" (N: how many were started before), its command
  // behind `prefix` (e.g. "ip netns exec NS"), with `extra` flags.
  void StartDaemon(const std::vector<std::string>& prefix = {},
                   const std::vector<std::string>& extra = {}) {
    auto d =
        testing::Subprocess::Start(DaemonArgv(daemons_.size(), prefix, extra), {marker_});
    ASSERT_TRUE(d.ok()) << d.status();
    daemons_.push_back(*std::move(d));
  }
  // Starts daemon "node<i>" again, as StartDaemon did (same node id, state
  // and log folders), once the one before it has exited: a node that comes
  // back after a crash.
  void RestartDaemon(size_t i, const std::vector<std::string>& prefix = {},
                     const std::vector<std::string>& extra = {}) {
    ASSERT_LT(i, daemons_.size());
    ASSERT_TRUE(daemons_[i]->exit_code().has_value()) << "node" << i << " still runs";
    auto d = testing::Subprocess::Start(DaemonArgv(i, prefix, extra), {marker_});
    ASSERT_TRUE(d.ok()) << d.status();
    daemons_[i] = *std::move(d);
  }

  // Starts a daemon the test configures itself: `argv` whole (elastrund
  // with its flags, perhaps behind a prefix such as runuser), `env` besides
  // the marker. Not one of StartDaemon's numbered nodes; StopAll stops it.
  // Null, after a failed expectation, when it cannot be started.
  testing::Subprocess* StartOwnDaemon(const std::vector<std::string>& argv,
                                      std::vector<std::string> env = {}) {
    env.push_back(marker_);
    auto d = testing::Subprocess::Start(argv, env);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    own_daemons_.push_back(*std::move(d));
    return own_daemons_.back().get();
  }

  // SIGTERMs every daemon still running (expecting exit 128+SIGTERM from
  // StartDaemon's) and the service, and checks that nothing tagged with the
  // marker is left.
  void StopAll() {
    for (auto& d : daemons_) {
      if (d->exit_code()) continue;
      d->Signal(SIGTERM);
      absl::StatusOr<int> st = d->Wait(kDeadline);
      EXPECT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(d->exit_code(), 128 + SIGTERM) << d->Output();
    }
    for (auto& d : own_daemons_) {
      if (d->exit_code()) continue;
      d->Signal(SIGTERM);
      absl::StatusOr<int> st = d->Wait(kDeadline);
      EXPECT_TRUE(st.ok()) << st.status();
    }
    if (service_ && !service_->exit_code()) {
      service_->Signal(SIGTERM);
      EXPECT_TRUE(service_->Wait(kDeadline).ok());
    }
    EXPECT_TRUE(PollUntil([&] { return testing::ProcessesWithEnv(marker_).empty(); }))
        << "processes were left behind";
  }

  int AliveNodes() { return CountNodes(false); }
  // Alive nodes whose Watch stream is open: a daemon killed before its
  // stream opened is noticed only when its lease runs out.
  int WatchingNodes() { return CountNodes(true); }

  // Submits `spec` with argv = the test worker + `worker_args`.
  std::string Submit(v1::JobSpec spec, const std::vector<std::string>& worker_args) {
    spec.clear_argv();
    spec.add_argv(testing::BinDir() + "/elastrun-test-worker");
    for (const std::string& a : worker_args) spec.add_argv(a);
    return SubmitSpec(spec);
  }

  // Submits `spec` as it is; returns the job id (empty, after a failed
  // expectation, when refused).
  std::string SubmitSpec(const v1::JobSpec& spec) {
    v1::SubmitRequest r;
    *r.mutable_spec() = spec;
    grpc::ClientContext ctx;
    Prepare(ctx);
    // A token holder states the owner (the service replaces spec.owner).
    if (spec.has_owner()) {
      const v1::JobOwner& o = spec.owner();
      ctx.AddMetadata(
          "x-elastrun-owner",
          absl::StrCat(o.uid(), ":", o.gid(), ":",
                       o.user().empty() ? absl::StrCat("uid", o.uid()) : o.user()));
    }
    v1::SubmitResponse resp;
    grpc::Status st = jobs_->Submit(&ctx, r, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job_id();
  }

  // `elastrun submit` (the real CLI, with the cluster's token) of a
  // one-node job of `nproc` shell workers running `script`, restarted at
  // most `max_restarts` times; its id (empty, after a failed expectation,
  // when refused).
  std::string SubmitShell(const std::string& name, int nproc, int max_restarts,
                          const std::string& script) {
    absl::StatusOr<testing::RunResult> r = testing::Run(
        {testing::BinDir() + "/elastrun", "submit", "--rendezvous", address_, "--name",
         name, "--nnodes", "1", "--nproc-per-node", absl::StrCat(nproc), "--max-restarts",
         absl::StrCat(max_restarts), "--", "/bin/sh", "-c", script},
        {marker_, "ELASTRUN_TOKEN_FILE=" + token_file_});
    EXPECT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? std::string(absl::StripAsciiWhitespace(r->output)) : "";
  }

  v1::JobStatus Get(const std::string& job) {
    v1::GetJobRequest r;
    r.set_job_id(job);
    v1::JobStatus s;
    grpc::Status st;
    // A read may be repeated: a connection dropped under the call on a
    // loaded machine (UNAVAILABLE, "Socket closed") is tried again on a
    // fresh one, at most three times, each within Prepare's deadline.
    for (int attempt = 0; attempt < 3; ++attempt) {
      grpc::ClientContext ctx;
      Prepare(ctx);
      ctx.set_wait_for_ready(true);
      st = jobs_->Get(&ctx, r, &s);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    }
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }

  bool Cancel(const std::string& job) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::CancelJobRequest r;
    r.set_job_id(job);
    v1::JobStatus resp;
    return jobs_->Cancel(&ctx, r, &resp).ok();
  }

  // Every log chunk the service holds for `job` (Jobs.StreamLogs), joined.
  std::string ServiceLogs(const std::string& job) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::StreamLogsRequest r;
    r.set_job_id(job);
    r.set_rank(-1);
    std::unique_ptr<grpc::ClientReader<v1::LogChunk>> reader = jobs_->StreamLogs(&ctx, r);
    std::string out;
    v1::LogChunk c;
    while (reader->Read(&c)) out += c.data();
    reader->Finish();
    return out;
  }

  v1::JobStatus WaitFinished(const std::string& job) {
    v1::JobStatus st;
    EXPECT_TRUE(PollUntil([&] {
      st = Get(job);
      return Finished(st.state());
    })) << "job "
        << job << " did not finish: " << st.DebugString() << DaemonOutput();
    return st;
  }

  std::string DaemonOutput() const {
    std::string out;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      absl::StrAppend(&out, "\n--- node", i, " ---\n", daemons_[i]->Output());
    }
    return out;
  }

  // The stdout logs of every node and local rank of `round`, concatenated.
  std::string Logs(const std::string& job, int64_t round, int nproc = 2) const {
    std::string logs;
    for (size_t node = 0; node < daemons_.size(); ++node) {
      for (int local = 0; local < nproc; ++local) {
        absl::StrAppend(&logs, testing::ReadFile(absl::StrCat(
                                   dir_, "/node", node, "/", job, "/attempt_", round, "/",
                                   local, "/stdout.log")));
      }
    }
    return logs;
  }

  testing::Subprocess& service() { return *service_; }
  const std::string& token_file() const { return token_file_; }
  // Daemon i's credential socket.
  std::string cred_socket(size_t i) const {
    return absl::StrCat(dir_, "/cred", i, ".sock");
  }
  testing::Subprocess& daemon(size_t i) { return *daemons_.at(i); }
  const std::string& address() const { return address_; }

 private:
  std::vector<std::string> DaemonArgv(size_t i, const std::vector<std::string>& prefix,
                                      const std::vector<std::string>& extra) const {
    const std::string id = absl::StrCat("node", i);
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(),
                {testing::BinDir() + "/elastrund", "--rendezvous", address_, "--node-id",
                 id, "--slots", "2", "--state-dir", absl::StrCat(dir_, "/state-", id),
                 "--log-dir", absl::StrCat(dir_, "/", id), "--shutdown-timeout", "5s",
                 "--token-file", token_file_, "--cred-socket", cred_socket(i)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  int CountNodes(bool watching_only) {
    grpc::ClientContext ctx;
    Prepare(ctx);
    v1::ListNodesResponse resp;
    if (!jobs_->ListNodes(&ctx, v1::ListNodesRequest(), &resp).ok()) return -1;
    int n = 0;
    for (const v1::NodeInfo& node : resp.nodes()) {
      n += node.state() == v1::NODE_STATE_ALIVE && (node.watching() || !watching_only);
    }
    return n;
  }

  void Prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata("authorization", "Bearer " + token_);
  }

  const std::string dir_, marker_;
  std::string token_, token_file_, address_;
  std::unique_ptr<testing::Subprocess> service_;
  std::vector<std::unique_ptr<testing::Subprocess>> daemons_;
  std::vector<std::unique_ptr<testing::Subprocess>> own_daemons_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
};

// A job spec of the test worker: `nodes` MIN:MAX x nproc.
inline v1::JobSpec Spec(const std::string& name, int min_nodes, int max_nodes, int nproc,
                        int max_restarts) {
  v1::JobSpec s;
  s.set_name(name);
  s.set_min_nodes(min_nodes);
  s.set_max_nodes(max_nodes);
  s.set_nproc_per_node(nproc);
  s.set_max_restarts(max_restarts);
  return s;
}

// The fixture of an e2e test with a cluster of its own: a fresh folder
// dir_, the marker its processes carry (marker_, naming the folder) and a
// Cluster in it, stopped at the end (StopAll checks that nothing is left).
// The service and daemons are the test's to start.
class ClusterTest : public ::testing::Test {
 protected:
  // Makes dir_ (a temporary folder named after `name`), marker_ and
  // cluster_.
  void MakeCluster(const std::string& name) {
    dir_ = testing::MakeTempDir(name);
    marker_ = "ELASTRUN_TEST_MARKER=" + dir_;
    cluster_ = std::make_unique<Cluster>(dir_, marker_);
  }
  // Makes folder dir_/`name` (0755); returns its path.
  std::string Subfolder(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0755), 0) << path;
    return path;
  }
  void TearDown() override {
    if (cluster_ != nullptr) cluster_->StopAll();  // null: skipped early
  }

  std::string dir_, marker_;
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace elastrun::daemon_testing

#endif  // ELASTRUN_TESTS_TESTING_CLUSTER_H_
