// elastrund: the node daemon. Thin: parse flags, create the Agent (before
// any thread, so every thread inherits its blocked signals), then the gRPC
// client, the Daemon, its runner thread and the session; wait for a stop
// signal.
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
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "glog/logging.h"
#include "common/files.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/logs.h"
#include "launcher/daemon/runner.h"
#include "launcher/daemon/session.h"
#include "common/strings.h"

extern char** environ;

namespace {

using namespace elastrun::launcher;  // NOLINT: a main file

constexpr char kUsage[] = R"(usage: elastrund --rendezvous HOST:PORT [flags]

The elastrun node daemon: registers this node with elastrun-rendezvous, keeps
its lease, and runs the worker group of the job the service places here (one
job at a time), reporting how each attempt ends. Workers keep running while
the service is away; the daemon reconnects and re-registers.

flags:
  --rendezvous HOST:PORT   the service (default: $ELASTRUN_RENDEZVOUS).
  --node-id ID             this node's stable id (default: the host name).
  --slots N                worker slots (GPUs or CPUs) offered, >= 1
                           (default: the number of /dev/nvidiaN devices, else
                           the number of CPUs).
  --advertise-addr A       address other nodes reach this one at (MASTER_ADDR
                           when it is rank 0). Default: 127.0.0.1 when the
                           service is on loopback, else the address of the
                           interface that routes to the service.
  --labels k=v,...         labels shown by `elastrun nodes`.
  --log-dir DIR            worker logs: DIR/<job>/attempt_<round>/<local_rank>/
                           {stdout,stderr}.log and error.json
                           (default: /tmp/elastrund-<node id>).
  --token TOKEN            send "authorization: Bearer TOKEN" (default:
                           $ELASTRUN_TOKEN; visible in ps: prefer
                           --token-file). Never passed on to workers.
  --token-file FILE        read the token from FILE.
  --shutdown-timeout DUR   grace between SIGTERM to workers and SIGKILL
                           (default 30s).
  --standby                pre-start the next attempt's workers (workers built
                           on libelastrun_worker only), so restarts are faster.
                           Standbys are used only by an attempt of the same
                           program and environment; otherwise they are
                           discarded and fresh workers start.
  --help                   show this help.

DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
On SIGINT/SIGTERM/SIGHUP/SIGQUIT the daemon stops its workers (the signal,
then SIGKILL after the grace), and exits with 128+signal; the service sees
the node leave and re-forms the job without it.
)";

int Usage(const std::string& error) {
  std::fprintf(stderr, "elastrund: %s\n(see --help)\n", error.c_str());
  return 2;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

int DefaultSlots() {
  int gpus = 0;
  for (int i = 0; i < 64; ++i) {
    struct stat st;
    if (stat(absl::StrFormat("/dev/nvidia%d", i).c_str(), &st) == 0) ++gpus;
  }
  if (gpus > 0) return gpus;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// The local address of the route to host:port (a UDP connect sends nothing).
absl::StatusOr<std::string> RouteAddress(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--rendezvous: cannot resolve \"%s\": %s", host, gai_strerror(rc)));
  }
  std::string out;
  for (addrinfo* a = res; a != nullptr && out.empty(); a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {0};
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr, 0,
                    NI_NUMERICHOST) == 0) {
      out = text;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (out.empty()) {
    return absl::UnavailableError(
        absl::StrFormat("no route to the service at %s; give --advertise-addr", host));
  }
  return out;
}

std::string RandomIncarnation() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  std::string target, node_id = Hostname(), advertise, labels_text, log_dir, token,
                      token_file;
  int slots = 0;
  AgentOptions agent_options;
  if (const char* env = std::getenv("ELASTRUN_RENDEZVOUS"); env != nullptr) target = env;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--standby") {
      agent_options.standby = true;
      continue;
    }
    const bool known = arg == "--rendezvous" || arg == "--node-id" || arg == "--slots" ||
                       arg == "--advertise-addr" || arg == "--labels" ||
                       arg == "--log-dir" || arg == "--token" || arg == "--token-file" ||
                       arg == "--shutdown-timeout";
    if (!known) return Usage(absl::StrFormat("unknown argument \"%s\"", arg));
    if (!has_value) {
      if (i + 1 >= argc) return Usage(absl::StrFormat("%s needs a value", arg));
      value = argv[++i];
    }
    if (arg == "--rendezvous") {
      target = value;
    } else if (arg == "--node-id") {
      node_id = value;
    } else if (arg == "--slots") {
      absl::StatusOr<int64_t> n = elastrun::ParseInt(value, "--slots", 1, 1 << 20);
      if (!n.ok()) return Usage(std::string(n.status().message()));
      slots = static_cast<int>(*n);
    } else if (arg == "--advertise-addr") {
      advertise = value;
    } else if (arg == "--labels") {
      labels_text = value;
    } else if (arg == "--log-dir") {
      log_dir = value;
    } else if (arg == "--token") {
      token = value;
    } else if (arg == "--token-file") {
      token_file = value;
    } else {
      absl::StatusOr<absl::Duration> d = elastrun::ParseDuration(value, arg);
      if (!d.ok()) return Usage(std::string(d.status().message()));
      agent_options.grace = *d;
    }
  }
  if (target.empty()) return Usage("--rendezvous HOST:PORT (or $ELASTRUN_RENDEZVOUS) is required");
  std::string host;
  int port = 0;
  if (absl::Status st = elastrun::SplitHostPort(target, "--rendezvous", &host, &port);
      !st.ok()) {
    return Usage(std::string(st.message()));
  }
  if (node_id.empty()) return Usage("--node-id: must not be empty");
  SessionOptions session_options;
  for (absl::string_view kv : absl::StrSplit(labels_text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || !absl::StrContains(kv, '=')) {
      return Usage(absl::StrFormat("--labels: \"%s\" is not key=value", kv));
    }
    session_options.labels[p.first] = p.second;
  }
  if (!token_file.empty()) {
    if (!token.empty()) return Usage("give --token or --token-file, not both");
    std::ifstream in(token_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return Usage(absl::StrFormat("--token-file %s: cannot read: %s", token_file,
                                   std::strerror(errno)));
    }
    token = std::string(absl::StripAsciiWhitespace(text.str()));
    if (token.empty()) return Usage(absl::StrFormat("--token-file %s is empty", token_file));
  } else if (const char* env = std::getenv("ELASTRUN_TOKEN"); token.empty() && env != nullptr) {
    token = env;
  }
  if (advertise.empty()) {
    if (elastrun::IsLoopbackHost(host)) {
      advertise = "127.0.0.1";
    } else {
      absl::StatusOr<std::string> a = RouteAddress(host, port);
      if (!a.ok()) return Usage(std::string(a.status().message()));
      advertise = *a;
    }
  }
  if (log_dir.empty()) log_dir = "/tmp/elastrund-" + node_id;
  if (absl::Status made = elastrun::MakeDirs(log_dir); !made.ok()) {
    std::fprintf(stderr, "elastrund: --log-dir: %s\n", std::string(made.message()).c_str());
    return 1;
  }

  // Set once the Daemon exists (atomic: the agent's thread may read it
  // early). Workers' progress reports and barrier arrivals name their job;
  // the Daemon routes them to that job's attempt.
  std::atomic<Daemon*> router{nullptr};
  // Workers report progress on a socket in the log folder (owner-only).
  agent_options.progress_socket = log_dir + "/agent.sock";
  agent_options.on_progress = [&router](const elastrun::ProgressReport& report) {
    if (Daemon* d = router.load()) d->OnProgress(report);
  };
  // Workers' named barriers meet here, then at the service.
  agent_options.on_barrier = [&router](const elastrun::BarrierArrival& arrival,
                                       std::function<void(const absl::Status&)> reply) {
    Daemon* d = router.load();
    if (d == nullptr) {
      reply(absl::UnavailableError("the node daemon is starting"));
      return;
    }
    d->OnBarrier(arrival, std::move(reply));
  };
  absl::Mutex mu;
  int stop_signal = 0;  // guarded by mu
  auto request_stop = [&](int sig) {
    absl::MutexLock lock(&mu);
    if (stop_signal == 0) stop_signal = sig;
  };
  // The agent's signalfd may read a stop signal before the signal thread's
  // sigwait does: it tells main too (after passing it to the workers).
  agent_options.on_signal = request_stop;
  // Before any thread: blocks the stop signals and SIGCHLD for all threads.
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(agent_options);
  if (!agent.ok()) {
    std::fprintf(stderr, "elastrund: cannot start the agent: %s\n",
                 std::string(agent.status().message()).c_str());
    return 1;
  }

  DaemonOptions daemon_options;
  daemon_options.node_id = node_id;
  daemon_options.log_dir = log_dir;
  daemon_options.agent_socket = agent_options.progress_socket;
  for (char** e = environ; *e != nullptr; ++e) {
    // The service's secret is the daemon's, not the workers'.
    if (!absl::StartsWith(*e, "ELASTRUN_TOKEN=")) daemon_options.base_env.emplace_back(*e);
  }
  elastrun::launcher::GrpcClientOptions client_options;
  client_options.target = target;
  client_options.token = token;
  std::unique_ptr<RendezvousClient> client = NewGrpcRendezvousClient(client_options);
  LogForwarderOptions log_options;
  log_options.node_id = node_id;
  LogForwarder log_forwarder(log_options, client.get());
  BarrierRelay barrier_relay(client.get(), node_id);
  // Output lines come tagged with their attempt's job and round (several
  // jobs may run at once), as do routed progress reports and barriers.
  daemon_options.on_output_line = [&log_forwarder](const std::string& job, int64_t round,
                                                   const OutputLine& line) {
    log_forwarder.OnLine(job, round, line);
  };
  daemon_options.on_progress = [&log_forwarder](const std::string& job, int64_t round,
                                                const elastrun::ProgressReport& report) {
    log_forwarder.OnProgress(job, round, report);
  };
  daemon_options.on_barrier = [&barrier_relay](const std::string& job, int64_t round,
                                               const elastrun::BarrierArrival& arrival,
                                               std::function<void(const absl::Status&)> reply) {
    barrier_relay.OnArrival(job, round, arrival, std::move(reply));
  };
  daemon_options.on_attempt_start = [&barrier_relay](const std::string& job, int64_t round) {
    barrier_relay.SetAttempt(job, round);
  };
  daemon_options.slots = slots > 0 ? slots : DefaultSlots();
  daemon_options.before_reports = [&log_forwarder] { log_forwarder.Flush(); };

  AgentRunner runner(agent->get());
  Daemon daemon(daemon_options, client.get(), &runner);
  router.store(&daemon);

  session_options.node_id = node_id;
  session_options.incarnation = RandomIncarnation();
  session_options.addr = advertise;
  session_options.slots = daemon_options.slots;
  DaemonSession session(session_options, client.get(), &daemon);
  LOG(INFO) << "elastrund " << node_id << ": service " << target << ", advertising "
            << advertise << ", " << session_options.slots << " slots, logs in " << log_dir;

  std::thread([&request_stop] {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, s);
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) request_stop(sig);
    }
  }).detach();

  absl::Status session_status;
  std::thread session_thread([&] {
    session_status = session.Run();
    if (!session_status.ok()) request_stop(-1);
  });

  int sig = 0;
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](int* s) { return *s != 0; }, &stop_signal));
    sig = stop_signal;
  }
  if (sig > 0) {
    LOG(INFO) << "signal " << sig << ": stopping the workers";
  } else {
    LOG(ERROR) << "the service refused this node: " << session_status;
  }
  const int exit_code = sig > 0 ? 128 + sig : 1;
  daemon.Shutdown(sig > 0 ? sig : SIGTERM);
  // Leave at once (the Watch stream closes): the service re-forms the job
  // without this node as a membership change, instead of the other nodes
  // seeing their collectives break while these workers wind down.
  session.Stop();
  session_thread.join();
  if (!daemon.WaitIdle(agent_options.grace + absl::Seconds(10))) {
    // The runner thread still holds an attempt; exiting kills its workers
    // (their parent-death signal is tied to that thread).
    LOG(ERROR) << "workers did not end in time; exiting anyway";
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(exit_code);
  }
  router.store(nullptr);  // the Daemon goes first; the agent's hooks see none
  LOG(INFO) << "elastrund " << node_id << " exits";
  return exit_code;
}
