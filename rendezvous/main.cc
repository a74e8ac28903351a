// elastrun-rendezvous: the coordinator that node daemons (elastrund) and the
// CLI (elastrun) talk to. Thin: parse flags, build a RendezvousServer, wait
// for SIGINT/SIGTERM.
#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "glog/logging.h"
#include "rendezvous/flags.h"
#include "rendezvous/server.h"

int main(int argc, char** argv) {
  elastrun::rendezvous::ServiceFlags flags;
  if (std::optional<int> exit = elastrun::rendezvous::ParseServiceFlags(
          std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr, &flags)) {
    return *exit;
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  elastrun::rendezvous::ServerOptions options;
  options.listen = flags.listen;
  options.token = flags.token;
  options.metrics_listen = flags.metrics_listen;
  options.coordinator.lease.heartbeat_interval = flags.heartbeat_interval;
  options.coordinator.lease.lease_timeout = flags.lease_timeout;
  const std::string& state_dir = flags.state_dir;
  if (!state_dir.empty()) {
    if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      std::fprintf(stderr, "elastrun-rendezvous: --state-dir %s: cannot create: %s\n",
                   state_dir.c_str(), std::strerror(errno));
      return 1;
    }
    options.coordinator.state_path = state_dir + "/state.db";
  }

  // Block the stop signals in every thread (gRPC's inherit the mask); one
  // thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<elastrun::rendezvous::RendezvousServer>> server =
      elastrun::rendezvous::RendezvousServer::Create(options);
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) {  // e.g. --listen without a token
      std::cerr << elastrun::flags::UsageError("elastrun-rendezvous",
                                               std::string(server.status().message()));
      return elastrun::flags::kExitUsage;
    }
    std::fprintf(stderr, "elastrun-rendezvous: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
  if (!(*server)->metrics_address().empty()) {
    std::printf("metrics on %s\n", (*server)->metrics_address().c_str());
  }
  std::fflush(stdout);

  std::thread([&stop, s = server->get()] {
    int sig = 0;
    sigwait(&stop, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    s->Shutdown();
  }).detach();
  (*server)->Wait();
  return 0;
}
