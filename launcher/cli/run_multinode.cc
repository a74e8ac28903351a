#include "launcher/cli/run_multinode.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/host.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "grpc/support/log.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/snapshot_dir.h"
#include "launcher/cli/client.h"
#include "launcher/cli/format.h"
#include "launcher/cli/run.h"
#include "launcher/cli/run_host.h"
#include "launcher/cli/run_local_runner.h"
#include "launcher/cli/run_monitor.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/node_runtime.h"
#include "launcher/daemon/route.h"
#include "launcher/daemon/runner.h"
#include "launcher/daemon/session.h"

extern char** environ;

namespace elastrun::launcher {
namespace {

// The service's and the daemon's pieces log through glog, and gRPC through
// its own log: none of it reaches the console unless $ELASTRUN_VERBOSE is
// set; what a user needs is said by this file.
void QuietLogs() {
  FLAGS_logtostderr = true;
  const char* verbose = getenv("ELASTRUN_VERBOSE");
  if (verbose != nullptr && *verbose != '\0') return;
  FLAGS_minloglevel = google::GLOG_FATAL;
  // gRPC's own log: a port another node bound first is expected here.
  gpr_set_log_function([](gpr_log_func_args*) {});
}

// What this node is, settled before anything starts.
struct NodeSetup {
  std::string node_id;
  int nproc = 0;
  std::string token;
  bool derived_token = false;
  std::string advertise;  // MASTER_ADDR when this node holds rank 0
  std::string run_dir;    // logs: <run_dir>/<job>/attempt_<round>/<local_rank>/
  bool hosting = false;   // this node hosts the rendezvous
  // The elastrun backend's TLS to the service ($ELASTRUN_TLS_*); null
  // credentials: plaintext.
  tls::TlsFiles tls;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// The elastrun backend's TLS files from $ELASTRUN_TLS_CA, _CERT, _KEY and
// _SERVER_NAME, as the CLI reads them; their files checked now.
absl::Status ServiceTls(NodeSetup& n) {
  for (auto [field, var] : {std::pair{&n.tls.ca, "ELASTRUN_TLS_CA"},
                            std::pair{&n.tls.cert, "ELASTRUN_TLS_CERT"},
                            std::pair{&n.tls.key, "ELASTRUN_TLS_KEY"},
                            std::pair{&n.tls.server_name, "ELASTRUN_TLS_SERVER_NAME"}}) {
    if (std::optional<std::string> v = GetEnv(var)) *field = *v;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      tls::MakeChannelCredentials(n.tls);
  if (!credentials.ok()) {
    // Its text names the CLI's flags; here they are the variables.
    return absl::InvalidArgumentError(
        absl::StrReplaceAll(credentials.status().message(),
                            {{"--tls-ca", "$ELASTRUN_TLS_CA"},
                             {"--tls-cert", "$ELASTRUN_TLS_CERT"},
                             {"--tls-key", "$ELASTRUN_TLS_KEY"},
                             {"--tls-server-name", "$ELASTRUN_TLS_SERVER_NAME"}}));
  }
  n.credentials = *std::move(credentials);
  return absl::OkStatus();
}

// An error is a usage error.
absl::StatusOr<NodeSetup> PrepareNode(const RunOptions& o) {
  NodeSetup n;
  // The host name alone may be shared (containers, network namespaces).
  n.node_id = absl::StrCat(Hostname(), "-", getpid());
  absl::StatusOr<int> nproc = ResolveNproc(o);
  if (!nproc.ok()) return nproc.status();
  n.nproc = *nproc;
  absl::StatusOr<std::string> token = RendezvousToken(o, GetEnv, &n.derived_token);
  if (!token.ok()) return token.status();
  n.token = *token;
  if (o.external_rendezvous()) RETURN_IF_ERROR(ServiceTls(n));
  // The route to the service's first replica gives this node's address.
  const std::string first = o.rdzv_endpoint.substr(0, o.rdzv_endpoint.find(','));
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(first, "--rdzv-endpoint", &host, &port));
  if (!o.local_addr.empty()) {
    n.advertise = o.local_addr;
  } else if (IsLoopbackHost(host)) {
    n.advertise = "127.0.0.1";
  } else {
    absl::StatusOr<std::string> route = RouteAddress(host, port, "--rdzv-endpoint");
    if (!route.ok()) return route.status();
    n.advertise = *route;
  }
  absl::StatusOr<std::string> dir = RunDir(o, o.run_id);
  if (!dir.ok()) return dir.status();
  n.run_dir = *dir;
  return n;
}

// After the job ended, the host serves until every other node has seen
// the end and left (their streams closed), or `timeout`: leaving first
// would make them report the host lost.
void WaitForOthers(rendezvous::Coordinator& coordinator, const std::string& self,
                   StopRequest* stop, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<v1::ListNodesResponse> nodes = coordinator.ListNodes();
    if (!nodes.ok()) return;
    bool others = false;
    for (const v1::NodeInfo& n : nodes->nodes()) {
      others = others || (n.node_id() != self && n.state() == v1::NODE_STATE_ALIVE);
    }
    if (!others || stop->WaitFor(absl::Milliseconds(50)) != 0) return;
  }
}

// The daemon's options for this node: logs in the run's folder, the
// agent's socket, snapshots, barriers through the rendezvous.
DaemonOptions MakeDaemonOptions(const RunOptions& o, const NodeSetup& n,
                                const std::string& agent_socket, BarrierRelay* barriers) {
  DaemonOptions d;
  d.node_id = n.node_id;
  d.log_dir = n.run_dir;
  d.agent_socket = agent_socket;
  d.slots = n.nproc;
  if (o.rdzv_backend == "static") d.group_rank = o.node_rank;
  d.base_env = WorkerEnvironment(environ);
  d.snapshot_base = o.no_snapshots ? "" : DefaultSnapshotBase();
  RelayBarriers(barriers, &d);
  return d;
}

// The client that watches the run's job: short calls, no retries of its
// own (the monitor decides when the host is lost).
std::unique_ptr<JobsClient> NewRunJobsClient(const RunOptions& o, const NodeSetup& n) {
  ServiceOptions service;
  service.address = o.rdzv_endpoint;
  service.token = n.token;
  service.tls = n.tls;
  service.credentials = n.credentials;
  service.rpc_timeout = absl::Seconds(2);
  service.retry_for = absl::ZeroDuration();
  return NewGrpcJobsClient(service);
}

// FindRunJob for a node other than the host: sets *job_id, or returns the
// exit code (said why) when this node must not go on.
std::optional<int> JoinRunJob(const RunOptions& o, const NodeSetup& n, JobsClient* jobs,
                              StopRequest* stop, std::string* job_id) {
  absl::StatusOr<std::string> found = FindRunJob(o, n.nproc, jobs, stop);
  if (found.ok()) {
    *job_id = *found;
    return std::nullopt;
  }
  if (int sig = stop->WaitFor(absl::ZeroDuration()); sig > 0) return 128 + sig;
  Say(std::string(found.status().message()));
  return 1;
}

// This node's part once registered: the daemon and its session until the
// monitor decides; then its workers are stopped (when the job did not end)
// and waited for.
int ServeNode(const RunOptions& o, const NodeSetup& n,
              const SessionOptions& session_options, RendezvousClient* client,
              JobsClient* jobs, Agent* agent, std::atomic<Daemon*>* router,
              StopRequest* stop, const std::string& job_id, bool* finished) {
  AgentRunner agent_runner(agent);
  LocalAttemptRunner runner(o, &agent_runner);
  BarrierRelay barriers(client, n.node_id);
  NodeRuntime node(
      MakeDaemonOptions(o, n, absl::StrCat(n.run_dir, "/agent.sock"), &barriers),
      session_options, client, &runner, router, stop);
  int exit_code = RunMonitor(o, jobs, stop, job_id, n.run_dir, n.hosting).Run(finished);
  if (exit_code < 0) {
    Say(absl::StrCat("the rendezvous refused this node: ",
                     node.session_status().message()));
    exit_code = 1;
  }
  if (!node.Leave(exit_code > 128 ? exit_code - 128 : SIGTERM,
                  o.shutdown_timeout + absl::Seconds(10))) {
    Say("workers did not end in time; exiting anyway");
    std::_Exit(exit_code);
  }
  return exit_code;
}

// The agent's options, its hooks routed to the Daemon once it exists.
AgentOptions MakeAgentOptions(const RunOptions& o, const NodeSetup& n,
                              const RunCgroup& cg, std::atomic<Daemon*>* router,
                              StopRequest* stop) {
  AgentOptions a;
  a.grace = o.shutdown_timeout;
  a.standby = o.standby;
  a.progress_socket = absl::StrCat(n.run_dir, "/agent.sock");
  if (cg.cgroup != nullptr) a.cgroup = cg.cgroup->dir();
  RouteAgentHooks(router, stop, "the node", &a);
  return a;
}

// Registers this node, waiting for the host up to join_timeout. The exit
// code when it must not go on.
std::optional<int> Register(const RunOptions& o, const SessionOptions& session_options,
                            RendezvousClient* client, StopRequest* stop) {
  const absl::Time deadline = absl::Now() + o.rdzv_conf.join_timeout;
  int stopped_by = 0;
  const absl::Status claimed =
      ClaimNodeId(session_options, client, [&](absl::Duration d) {
        stopped_by = stop->WaitFor(d);
        return stopped_by == 0 && absl::Now() < deadline;
      });
  if (claimed.ok()) return std::nullopt;
  if (stopped_by > 0) return 128 + stopped_by;
  if (absl::IsCancelled(claimed)) {
    Say(absl::StrCat("no rendezvous at ", o.rdzv_endpoint, " within join_timeout ",
                     absl::FormatDuration(o.rdzv_conf.join_timeout),
                     o.external_rendezvous()
                         ? ": is elastrun-rendezvous running there?"
                         : ": is the node it names running the same command?"));
  } else {
    Say(absl::StrCat("the rendezvous at ", o.rdzv_endpoint,
                     " refused this node: ", claimed.message()));
  }
  return 1;
}

// The host submits the run's one job to the rendezvous it hosts.
absl::StatusOr<std::string> SubmitRun(const RunOptions& o, const NodeSetup& n,
                                      rendezvous::Coordinator& coordinator) {
  v1::SubmitRequest submit;
  *submit.mutable_spec() = MultinodeJobSpec(o, n.nproc, WorkerArgv(o, "python3"));
  absl::StatusOr<v1::SubmitResponse> r = coordinator.Submit(submit);
  if (!r.ok()) {
    return absl::Status(r.status().code(), absl::StrCat("the rendezvous refused the run: ",
                                                        r.status().message()));
  }
  return r->job_id();
}

}  // namespace

int RunMultinode(const RunOptions& o) {
  QuietLogs();
  StopRequest stop;
  if (!HandleStopSignals(&stop)) {
    Say(absl::StrCat("cannot block signals: ", strerror(errno)));
    return 1;
  }
  absl::StatusOr<NodeSetup> setup = PrepareNode(o);
  if (!setup.ok()) {
    Say(std::string(setup.status().message()));
    return 2;
  }
  const NodeSetup& n = *setup;
  // Nothing here to adopt: this node's folder is made later, named by its
  // node id, which holds this launcher's pid.
  RemoveSnapshotsOfDeadRuns();
  // Forks its watchdog: before any thread but the signal thread, which
  // holds no lock.
  const RunCgroup cgroup = MakeRunCgroup();
  absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> hosted =
      o.external_rendezvous() ? nullptr : MaybeHostRendezvous(o, n.token);
  if (!hosted.ok()) {
    Say(std::string(hosted.status().message()));
    return 1;
  }
  setup->hosting = *hosted != nullptr;
  std::string job_id;
  if (*hosted != nullptr) {
    absl::StatusOr<std::string> submitted = SubmitRun(o, n, (*hosted)->coordinator());
    if (!submitted.ok()) {
      Say(std::string(submitted.status().message()));
      return 1;
    }
    job_id = *submitted;
  }
  Say(absl::StrCat(
      "run ", o.run_id, ": node ", n.node_id, " (", n.advertise, "), ", n.nproc,
      " worker(s), nnodes ", o.nnodes.min, ":", o.nnodes.max, ", rendezvous ",
      *hosted != nullptr        ? "hosted here at "
      : o.external_rendezvous() ? "service at "
                                : "at ",
      o.rdzv_endpoint, n.derived_token ? " (token derived from the run id)" : "",
      ", logs in ", n.run_dir));

  GrpcClientOptions client_options;
  client_options.target = o.rdzv_endpoint;
  client_options.token = n.token;
  client_options.tls = n.tls;
  client_options.credentials = n.credentials;
  // A call to a lost host must not outlast the host's own timeout: this
  // node's shutdown waits for the session's call in flight.
  client_options.deadline =
      std::clamp(o.rdzv_conf.keep_alive_interval * o.rdzv_conf.keep_alive_max_attempt,
                 absl::Seconds(1), absl::Seconds(5));
  std::unique_ptr<RendezvousClient> client = NewGrpcRendezvousClient(client_options);
  SessionOptions session_options;
  session_options.node_id = n.node_id;
  session_options.incarnation = NewIncarnation();
  session_options.addr = n.advertise;
  session_options.slots = n.nproc;
  // At a running service the run's nodes are a pool of their own: its job
  // is placed on them alone, and no other job on them.
  if (o.external_rendezvous()) session_options.pool = RunPool(o.run_id);
  // The host may start after this node: look for it often.
  session_options.initial_backoff = absl::Milliseconds(20);
  session_options.max_backoff = absl::Milliseconds(250);
  if (std::optional<int> exit = Register(o, session_options, client.get(), &stop))
    return *exit;
  std::unique_ptr<JobsClient> jobs = NewRunJobsClient(o, n);
  if (o.external_rendezvous()) {
    absl::StatusOr<std::string> submitted =
        SubmitRunJob(o, n.nproc, WorkerArgv(o, "python3"), jobs.get(), &stop);
    if (!submitted.ok()) {
      if (int sig = stop.WaitFor(absl::ZeroDuration()); sig > 0) return 128 + sig;
      Say(std::string(submitted.status().message()));
      return 1;
    }
    job_id = *submitted;
  } else if (job_id.empty()) {
    if (std::optional<int> exit = JoinRunJob(o, n, jobs.get(), &stop, &job_id))
      return *exit;
  }

  std::atomic<Daemon*> router{nullptr};
  absl::StatusOr<std::unique_ptr<Agent>> agent =
      Agent::Create(MakeAgentOptions(o, n, cgroup, &router, &stop));
  if (!agent.ok()) {
    Say(absl::StrCat("cannot start the agent: ", agent.status().message()));
    return 1;
  }
  bool finished = false;
  const int exit_code = ServeNode(o, n, session_options, client.get(), jobs.get(),
                                  agent->get(), &router, &stop, job_id, &finished);
  if (*hosted != nullptr && finished) {
    WaitForOthers((*hosted)->coordinator(), n.node_id, &stop,
                  std::max(absl::Seconds(5), 2 * o.rdzv_conf.keep_alive_interval *
                                                 o.rdzv_conf.keep_alive_max_attempt));
  }
  return exit_code;
}

}  // namespace elastrun::launcher
