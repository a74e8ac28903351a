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
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/strings.h"
#include "glog/logging.h"
#include "common/files.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/barrier.h"
#include "launcher/daemon/daemon.h"
#include "launcher/daemon/flags.h"
#include "launcher/daemon/logs.h"
#include "launcher/daemon/runner.h"
#include "launcher/daemon/session.h"
#include "common/strings.h"

extern char** environ;

namespace {

using namespace elastrun::launcher;  // NOLINT: a main file

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
  DaemonFlags flags;
  if (std::optional<int> exit = ParseDaemonFlags(
          std::vector<std::string>(argv + 1, argv + argc),
          [](const std::string& name) -> std::optional<std::string> {
            const char* v = std::getenv(name.c_str());
            if (v == nullptr) return std::nullopt;
            return std::string(v);
          },
          Hostname(), std::cout, std::cerr, &flags)) {
    return *exit;
  }
  const std::string& target = flags.rendezvous;
  const std::string& host = flags.rendezvous_host;
  const int port = flags.rendezvous_port;
  const std::string& node_id = flags.node_id;
  const std::string& log_dir = flags.log_dir;
  const std::string& token = flags.token;
  const int slots = flags.slots;
  std::string advertise = flags.advertise_addr;
  AgentOptions agent_options;
  agent_options.standby = flags.standby;
  agent_options.grace = flags.shutdown_timeout;
  SessionOptions session_options;
  session_options.labels = flags.labels;
  if (advertise.empty()) {
    if (elastrun::IsLoopbackHost(host)) {
      advertise = "127.0.0.1";
    } else {
      absl::StatusOr<std::string> a = RouteAddress(host, port);
      if (!a.ok()) {
        std::cerr << elastrun::flags::UsageError("elastrund", std::string(a.status().message()));
        return elastrun::flags::kExitUsage;
      }
      advertise = *a;
    }
  }
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
