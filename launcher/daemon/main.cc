// elastrund: the node daemon. Thin: parse flags, block the stop signals
// (before any thread, so every thread inherits them), claim the node id at
// the service (a second daemon with an id in use leaves before it touches
// anything), then create the Agent, the Daemon, its runner thread and the
// session; wait for a stop signal.
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/flags.h"
#include "common/host.h"
#include "common/metrics_server.h"
#include "common/strings.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/cgroup.h"
#include "launcher/agent/snapshot_dir.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/cred_socket.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/flags.h"
#include "launcher/daemon/hooks.h"
#include "launcher/daemon/job_snapshots.h"
#include "launcher/daemon/logs.h"
#include "launcher/daemon/metrics.h"
#include "launcher/daemon/node_runtime.h"
#include "launcher/daemon/route.h"
#include "launcher/daemon/runner.h"
#include "launcher/daemon/session.h"

extern char** environ;

namespace {

using namespace elastrun::launcher;  // NOLINT: a main file
using elastrun::GetEnv;
using elastrun::Hostname;

int DefaultSlots() {
  int gpus = 0;
  for (int i = 0; i < 64; ++i) {
    struct stat st;
    if (stat(absl::StrFormat("/dev/nvidia%d", i).c_str(), &st) == 0) ++gpus;
  }
  if (gpus > 0) return gpus;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// The address the service hands other nodes as this node's (MASTER_ADDR
// when it holds rank 0): --advertise-addr, else loopback for a service on
// loopback, else this host's address on the route to the service. An error
// is a usage error.
absl::StatusOr<std::string> AdvertiseAddress(const DaemonFlags& flags) {
  if (!flags.advertise_addr.empty()) return flags.advertise_addr;
  if (elastrun::IsLoopbackHost(flags.rendezvous_host)) return std::string("127.0.0.1");
  absl::StatusOr<std::string> route =
      RouteAddress(flags.rendezvous_host, flags.rendezvous_port, "--rendezvous");
  if (!route.ok() && absl::IsUnavailable(route.status())) {
    return absl::UnavailableError(absl::StrCat(route.status().message(),
                                               "; give --advertise-addr"));
  }
  return route;
}

// The cluster token when no flag or variable gave one: the default token
// file (as the service finds it on this host). A usage error otherwise.
absl::StatusOr<std::string> DefaultToken() {
  const std::string path = elastrun::auth::DefaultTokenFile(GetEnv, geteuid());
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "no cluster token: give --token-file FILE (the service's token file or a copy)");
  }
  absl::StatusOr<std::string> token = elastrun::auth::ReadTokenFile(path);
  if (!token.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no cluster token: ", token.status().message(),
        "; give --token-file FILE (the service's token file or a copy)"));
  }
  return token;
}

// Serves local users' credentials (cred_socket.h) until destroyed; null
// when turned off or when it cannot start (another daemon of this host may
// serve them: users are not left without one, and jobs run either way).
std::unique_ptr<CredSocket> StartCredSocket(const DaemonFlags& flags) {
  CredSocketOptions options;
  options.path = flags.cred_socket.empty() ? DefaultCredSocket(GetEnv, geteuid())
                                           : flags.cred_socket;
  options.token = flags.token;
  if (options.path.empty() || options.path == "none") {
    LOG(INFO) << "no credential socket (--cred-socket, or set $XDG_RUNTIME_DIR)";
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<CredSocket>> socket = CredSocket::Create(options);
  if (!socket.ok()) {
    LOG(WARNING) << "no credential socket: " << socket.status().message();
    return nullptr;
  }
  LOG(INFO) << "local users get credentials at " << options.path;
  return *std::move(socket);
}

// The agent's options and its hooks into the Daemon (hooks.h): workers'
// progress reports and barrier arrivals name their job, and the Daemon
// routes them to that job's attempt.
AgentOptions MakeAgentOptions(const DaemonFlags& flags, std::atomic<Daemon*>* router,
                              StopRequest* stop) {
  AgentOptions agent_options;
  agent_options.standby = flags.standby;
  agent_options.grace = flags.shutdown_timeout;
  // Workers report progress on a socket in the state folder.
  agent_options.progress_socket = flags.state_dir + "/agent.sock";
  RouteAgentHooks(router, stop, "the node daemon", &agent_options);
  return agent_options;
}

// The Daemon's options. Output lines come tagged with their attempt's job
// and round (several jobs may run at once), as do routed progress reports
// and barriers; they go to the service through `logs` and `barriers`.
DaemonOptions MakeDaemonOptions(const DaemonFlags& flags, const std::string& agent_socket,
                                LogForwarder* logs, BarrierRelay* barriers) {
  DaemonOptions daemon_options;
  daemon_options.node_id = flags.node_id;
  daemon_options.log_dir = flags.log_dir;
  daemon_options.agent_socket = agent_socket;
  daemon_options.base_env = WorkerEnvironment(environ);
  daemon_options.on_output_line = [logs](const std::string& job, int64_t round,
                                         const OutputLine& line) {
    logs->OnLine(job, round, line);
  };
  daemon_options.on_progress = [logs](const std::string& job, int64_t round,
                                      const elastrun::ProgressReport& report) {
    logs->OnProgress(job, round, report);
  };
  RelayBarriers(barriers, &daemon_options);
  daemon_options.snapshot_base = flags.no_snapshots ? "" : DefaultSnapshotBase();
  daemon_options.before_reports = [logs] { logs->Flush(); };
  daemon_options.on_job_done = [logs](const std::string& job) { logs->JobDone(job); };
  return daemon_options;
}

SessionOptions MakeSessionOptions(const DaemonFlags& flags, const std::string& advertise) {
  SessionOptions session_options;
  session_options.labels = flags.labels;
  session_options.pool = flags.pool;
  session_options.node_id = flags.node_id;
  session_options.incarnation = NewIncarnation();
  session_options.addr = advertise;
  session_options.slots = flags.slots > 0 ? flags.slots : DefaultSlots();
  return session_options;
}

// Makes (or checks) the state and log folders: private to the daemon's
// user, never through a link, a folder another user made, or inside one
// another user could replace it in, so that nobody can steer where a root
// daemon writes. 0711 for root: the workers it runs as other users reach
// their own folders inside (never list them).
// Returns exit code 1 after a message naming the folder when one is unsafe.
std::optional<int> PrepareFolders(const DaemonFlags& flags) {
  const mode_t mode = geteuid() == 0 ? 0711 : 0700;
  const std::pair<const char*, std::string> folders[] = {{"--state-dir", flags.state_dir},
                                                         {"--log-dir", flags.log_dir}};
  for (const auto& [flag, dir] : folders) {
    const size_t slash = dir.find_last_of('/');
    absl::Status made = slash == 0 || slash == std::string::npos
                            ? absl::OkStatus()
                            : elastrun::MakeDirs(dir.substr(0, slash));
    if (made.ok()) made = elastrun::CheckParentsSafe(dir);
    if (made.ok()) made = elastrun::MakePrivateDir(dir, mode, /*must_be_new=*/false);
    if (!made.ok()) {
      std::fprintf(stderr, "elastrund: %s: %s\n", flag,
                   std::string(made.message()).c_str());
      return 1;
    }
  }
  return std::nullopt;
}

// Registers the node before anything starts (see ClaimNodeId). Returns the
// exit code when the daemon must not go on: 1 when another daemon holds
// the node id or the service refuses the node, 128+signal when stopped.
std::optional<int> Claim(const SessionOptions& options, RendezvousClient* client,
                         StopRequest* stop) {
  int stopped_by = 0;
  const absl::Status claimed =
      ClaimNodeId(options, client, [stop, &stopped_by](absl::Duration d) {
        stopped_by = stop->WaitFor(d);
        return stopped_by == 0;
      });
  if (claimed.ok()) return std::nullopt;
  if (absl::IsCancelled(claimed)) return stopped_by > 0 ? 128 + stopped_by : 1;
  if (absl::IsAlreadyExists(claimed)) {
    std::fprintf(stderr, "elastrund: node id '%s' is already in use by another elastrund (%s)\n",
                 options.node_id.c_str(), std::string(claimed.message()).c_str());
  } else {
    std::fprintf(stderr, "elastrund: the service refused node '%s': %s\n",
                 options.node_id.c_str(), claimed.ToString().c_str());
  }
  return 1;
}

// Serves until a stop, then stops the workers and leaves. Returns the exit
// code (128+signal, or 1 when the service refused the node); exits at once
// when the workers outlast `grace` plus a margin.
int ServeUntilStop(NodeRuntime* node, StopRequest* stop, absl::Duration grace) {
  const int sig = stop->Wait();
  if (sig > 0) {
    LOG(INFO) << "signal " << sig << ": stopping the workers";
  } else {
    LOG(ERROR) << "the service refused this node: " << node->session_status();
  }
  const int exit_code = sig > 0 ? 128 + sig : 1;
  if (!node->Leave(sig > 0 ? sig : SIGTERM, grace + absl::Seconds(10))) {
    // Exiting kills the workers (their parent-death signal is tied to the
    // runner's thread).
    LOG(ERROR) << "workers did not end in time; exiting anyway";
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(exit_code);
  }
  return exit_code;
}

// The snapshot folders an earlier daemon of this node left when it died:
// this one runs no job yet, so none of them is in use (their workers died
// with it).
void RemoveSnapshotLeftovers(const DaemonOptions& options) {
  absl::StatusOr<std::vector<std::string>> removed =
      JobSnapshots(options.snapshot_base, options.node_id).RemoveLeftovers();
  if (!removed.ok()) {
    LOG(WARNING) << "leftover snapshot folders: " << removed.status().message();
    return;
  }
  for (const std::string& path : *removed) {
    LOG(INFO) << "removed leftover snapshot folder " << path;
  }
}

// The node's cgroup, <own cgroup>/elastrun-node-<id>@<pid>, each attempt in
// a folder of it; null (after a line saying why) where cgroups cannot be
// used. The folders of dead daemons of this node id hold what they left (a
// worker's grandchild, which the parent-death signal does not reach): they
// are killed. A live daemon's folder is never touched, whatever the claim
// will say.
std::unique_ptr<LauncherCgroup> MakeNodeCgroup(const std::string& node_id) {
  auto made = LauncherCgroup::Create("node-" + CgroupNamePart(node_id), /*kill_leftovers=*/true);
  if (!made.ok()) {
    LOG(WARNING) << "cgroups not used (workers are stopped by process group only): "
                 << made.status().message();
    return nullptr;
  }
  if ((*made)->leftovers() > 0) {
    LOG(WARNING) << "killed " << (*made)->leftovers()
                 << " processes left by a previous elastrund for node " << node_id;
  }
  return *std::move(made);
}

// Builds the Daemon around `agent` and its session (in that order;
// destroyed in reverse), serves until a stop and returns the exit code.
// `router` points at the Daemon exactly while it exists.
int RunNode(const DaemonFlags& flags, const SessionOptions& session_options,
            RendezvousClient* client, const AgentOptions& agent_options, Agent* agent,
            std::atomic<Daemon*>* router, StopRequest* stop) {
  elastrun::metrics::Registry registry;
  DaemonMetrics metrics(registry);
  // Datagrams on the agent socket (0666) from no live worker: a process
  // that is not a worker, or a worker's secret after it ended.
  registry.AddCollector([agent] {
    return std::vector<elastrun::metrics::Family>{
        {"elastrund_agent_datagrams_dropped_total",
         "Datagrams on the agent socket dropped: their secret is no live worker's.",
         "counter",
         {{{}, static_cast<double>(agent->dropped_datagrams())}}}};
  });
  std::unique_ptr<elastrun::metrics::MetricsServer> metrics_server;
  if (!flags.metrics_listen.empty()) {
    elastrun::metrics::MetricsServerOptions mo;
    mo.listen = flags.metrics_listen;
    absl::StatusOr<std::unique_ptr<elastrun::metrics::MetricsServer>> served =
        elastrun::metrics::MetricsServer::Create(mo, &registry);
    if (!served.ok()) {
      std::fprintf(stderr, "elastrund: %s\n", std::string(served.status().message()).c_str());
      return 1;
    }
    metrics_server = *std::move(served);
    std::printf("metrics on %s\n", metrics_server->address().c_str());
    std::fflush(stdout);
  }
  LogForwarderOptions log_options;
  log_options.node_id = flags.node_id;
  log_options.incarnation = session_options.incarnation;
  log_options.forwarded_bytes = &metrics.log_bytes();
  // Lines the service cannot take yet (away, or its disk full) beyond the
  // buffer wait here; a restarted daemon starts the file afresh.
  log_options.spill_path = flags.state_dir + "/log-spill";
  LogForwarder log_forwarder(log_options, client);
  BarrierRelay barrier_relay(client, flags.node_id);
  DaemonOptions daemon_options = MakeDaemonOptions(
      flags, agent_options.progress_socket, &log_forwarder, &barrier_relay);
  daemon_options.slots = session_options.slots;
  daemon_options.metrics = &metrics;

  RemoveSnapshotLeftovers(daemon_options);
  AgentRunner runner(agent);
  LOG(INFO) << "elastrund " << flags.node_id << ": service " << flags.rendezvous
            << ", advertising " << session_options.addr << ", " << daemon_options.slots
            << " slots, state in " << flags.state_dir << ", logs in " << flags.log_dir
            << (daemon_options.snapshot_base.empty()
                    ? ", no snapshots"
                    : ", snapshots in " + SnapshotUserRoot(daemon_options.snapshot_base));

  NodeRuntime node(daemon_options, session_options, client, &runner, router, stop);
  const int exit_code = ServeUntilStop(&node, stop, agent_options.grace);
  LOG(INFO) << "elastrund " << flags.node_id << " exits";
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  DaemonFlags flags;
  if (std::optional<int> exit =
          ParseDaemonFlags(std::vector<std::string>(argv + 1, argv + argc), GetEnv,
                           Hostname(), geteuid() == 0, std::cout, std::cerr, &flags)) {
    return *exit;
  }
  // First, before anything may start a thread (gRPC's credentials do): a
  // thread with the stop signals unblocked would take SIGTERM's default
  // action and kill the daemon without stopping its workers.
  StopRequest stop;
  if (!HandleStopSignals(&stop)) {
    std::fprintf(stderr, "elastrund: cannot block signals: %s\n", std::strerror(errno));
    return 1;
  }
  if (flags.token.empty()) {
    absl::StatusOr<std::string> token = DefaultToken();
    if (!token.ok()) {
      std::cerr << elastrun::flags::UsageError("elastrund", std::string(token.status().message()));
      return elastrun::flags::kExitUsage;
    }
    flags.token = *token;
  }
  // The TLS files are read and checked before anything is made.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      elastrun::tls::MakeChannelCredentials(flags.tls);
  if (!credentials.ok()) {
    std::cerr << elastrun::flags::UsageError("elastrund",
                                             std::string(credentials.status().message()));
    return elastrun::flags::kExitUsage;
  }
  absl::StatusOr<std::string> advertise = AdvertiseAddress(flags);
  if (!advertise.ok()) {
    std::cerr << elastrun::flags::UsageError("elastrund",
                                             std::string(advertise.status().message()));
    return elastrun::flags::kExitUsage;
  }
  if (std::optional<int> exit = PrepareFolders(flags)) return *exit;

  elastrun::launcher::GrpcClientOptions client_options;
  client_options.target = flags.rendezvous;
  client_options.token = flags.token;
  client_options.tls = flags.tls;
  client_options.credentials = *std::move(credentials);
  std::unique_ptr<RendezvousClient> client = NewGrpcRendezvousClient(client_options);
  const SessionOptions session_options = MakeSessionOptions(flags, *advertise);
  // Before the claim, so that a node the service lists as registered is
  // ready for work. Outlives the agent: destroyed last, it kills what is
  // left in it.
  const std::unique_ptr<LauncherCgroup> cgroup = MakeNodeCgroup(flags.node_id);
  if (std::optional<int> exit = Claim(session_options, client.get(), &stop)) return *exit;

  std::atomic<Daemon*> router{nullptr};
  AgentOptions agent_options = MakeAgentOptions(flags, &router, &stop);
  if (cgroup != nullptr) agent_options.cgroup = cgroup->dir();
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(agent_options);
  if (!agent.ok()) {
    std::fprintf(stderr, "elastrund: cannot start the agent: %s\n",
                 std::string(agent.status().message()).c_str());
    return 1;
  }
  // A root daemon's workers may run as any user: they must reach the socket
  // (sendto needs write permission on it). What arrives there is only
  // decoded and routed, never a path or a command for the daemon.
  if (geteuid() == 0 && chmod(agent_options.progress_socket.c_str(), 0666) != 0) {
    std::fprintf(stderr, "elastrund: chmod %s: %s\n",
                 agent_options.progress_socket.c_str(), std::strerror(errno));
    return 1;
  }
  // After the claim: a second daemon of this node id touches nothing.
  std::unique_ptr<CredSocket> cred_socket = StartCredSocket(flags);
  return RunNode(flags, session_options, client.get(), agent_options, agent->get(), &router,
                 &stop);
}
