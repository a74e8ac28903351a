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

// Tells main when the Agent itself took a stop signal (its signalfd may read
// it before the signal thread's sigwait does).
class SignalAwareRunner : public AttemptRunner {
 public:
  SignalAwareRunner(AttemptRunner* inner, Agent* agent, std::function<void(int)> on_signal)
      : inner_(inner), agent_(agent), on_signal_(std::move(on_signal)) {}
  void Start(uint64_t id, AttemptSpec spec,
             std::function<void(const AttemptOutcome&)> done) override {
    inner_->Start(id, std::move(spec), [this, done](const AttemptOutcome& o) {
      done(o);
      if (int sig = agent_->received_signal(); sig != 0) on_signal_(sig);
    });
  }
  void Stop(uint64_t id, int sig) override { inner_->Stop(id, sig); }

 private:
  AttemptRunner* inner_;
  Agent* agent_;
  std::function<void(int)> on_signal_;
};

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

  // Set once the forwarder exists; the hook runs only during attempts, which
  // start after that (through the runner's mutex).
  LogForwarder* forwarder = nullptr;
  // Workers report progress on a socket in the log folder (owner-only).
  agent_options.progress_socket = log_dir + "/agent.sock";
  agent_options.on_progress = [&forwarder](const elastrun::ProgressReport& report) {
    if (forwarder != nullptr) forwarder->OnProgress(report);
  };
  // Workers' named barriers meet here, then at the service (set like the
  // forwarder, before any attempt starts).
  BarrierRelay* barriers = nullptr;
  agent_options.on_barrier = [&barriers](const elastrun::BarrierArrival& arrival,
                                         std::function<void(const absl::Status&)> reply) {
    if (barriers == nullptr) {
      reply(absl::UnavailableError("the node daemon is starting"));
      return;
    }
    barriers->OnArrival(arrival, std::move(reply));
  };
  agent_options.on_output_line = [&forwarder](const OutputLine& line) {
    if (forwarder != nullptr) forwarder->OnLine(line);
  };
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
  forwarder = &log_forwarder;
  BarrierRelay barrier_relay(client.get(), node_id);
  barriers = &barrier_relay;
  daemon_options.on_attempt_start = [&log_forwarder, &barrier_relay](const std::string& job,
                                                                     int64_t round) {
    log_forwarder.SetAttempt(job, round);
    barrier_relay.SetAttempt(job, round);
  };
  daemon_options.before_reports = [&log_forwarder] { log_forwarder.Flush(); };

  absl::Mutex mu;
  int stop_signal = 0;  // guarded by mu
  auto request_stop = [&](int sig) {
    absl::MutexLock lock(&mu);
    if (stop_signal == 0) stop_signal = sig;
  };
  AgentRunner agent_runner(agent->get());
  SignalAwareRunner runner(&agent_runner, agent->get(), request_stop);
  Daemon daemon(daemon_options, client.get(), &runner);

  session_options.node_id = node_id;
  session_options.incarnation = RandomIncarnation();
  session_options.addr = advertise;
  session_options.slots = slots > 0 ? slots : DefaultSlots();
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
  LOG(INFO) << "elastrund " << node_id << " exits";
  return exit_code;
}
