// elastrun-rendezvous: the coordinator that node daemons (elastrund) and the
// CLI (elastrun) talk to. Thin: parse flags, build a RendezvousServer, wait
// for SIGINT/SIGTERM.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/auth.h"
#include "common/files.h"
#include "common/flags.h"
#include "common/host.h"
#include "glog/logging.h"
#include "rendezvous/flags.h"
#include "rendezvous/replica.h"
#include "rendezvous/server.h"

using elastrun::GetEnv;
using elastrun::rendezvous::Replica;

namespace {

// The cluster token: --token, else the token file, created with a new
// random token on the first start. Errors name the file and the fix.
absl::StatusOr<std::string> ServiceToken(const elastrun::rendezvous::ServiceFlags& flags) {
  if (!flags.token.empty()) return flags.token;
  std::string path = flags.token_file;
  if (path.empty()) path = elastrun::auth::DefaultTokenFile(GetEnv, geteuid());
  if (path.empty()) {
    return absl::FailedPreconditionError(
        "no token file: give --token-file FILE (neither $XDG_STATE_HOME nor $HOME is set)");
  }
  bool created = false;
  absl::StatusOr<std::string> token = elastrun::auth::LoadOrCreateTokenFile(path, &created);
  if (!token.ok()) return token.status();
  if (created) {
    LOG(INFO) << "created the token file " << path
              << " (mode 0600); daemons and the CLI read it, or copy it to other nodes";
  } else {
    LOG(INFO) << "the cluster token is in " << path;
  }
  return token;
}

// Every node holds one connection (its daemon's channel) and the CLI a few
// more: the soft limit on open files (1024 by default) is raised to the
// hard one, as servers of many clients do, and a hard limit too low for
// the cluster is said at start.
void RaiseOpenFileLimit(int max_nodes) {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t was = limit.rlim_cur;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = was;
  }
  // Descriptors the service holds besides its nodes' connections.
  constexpr rlim_t kOwn = 64;
  const rlim_t want = static_cast<rlim_t>(std::min(max_nodes, 10000)) + kOwn;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < want) {
    LOG(WARNING) << "at most " << limit.rlim_cur
                 << " open files (ulimit -n; LimitNOFILE= in a systemd unit): about "
                 << (limit.rlim_cur > kOwn ? limit.rlim_cur - kOwn : 0)
                 << " nodes can be connected at once";
  }
}

elastrun::rendezvous::ServerOptions MakeServerOptions(
    const elastrun::rendezvous::ServiceFlags& flags, const std::string& token) {
  elastrun::rendezvous::ServerOptions options;
  options.listen = flags.listen;
  options.token = token;
  options.tls = flags.tls;
  options.insecure = flags.insecure;
  options.metrics_listen = flags.metrics_listen;
  options.coordinator.lease.heartbeat_interval = flags.heartbeat_interval;
  options.coordinator.lease.lease_timeout = flags.lease_timeout;
  options.coordinator.lease.max_heartbeat_rate = flags.max_heartbeat_rate;
  options.coordinator.lease.node_expiry = flags.node_expiry;
  options.coordinator.max_nodes = flags.max_nodes;
  if (const std::string& state_dir = flags.state_dir; !state_dir.empty()) {
    options.coordinator.state_path = state_dir + "/state.db";
    options.logs_path = state_dir + "/logs.db";
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  elastrun::rendezvous::ServiceFlags flags;
  if (std::optional<int> exit = elastrun::rendezvous::ParseServiceFlags(
          std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr, &flags)) {
    return *exit;
  }
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  // absl's lock-order graph (a debugging aid, on in Debian's build) costs
  // every lock of every RPC; the unit tests, which run the service in
  // their own process, keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  RaiseOpenFileLimit(flags.max_nodes);
  // The state folder holds state.db and logs.db, every user's job logs:
  // private to the service's user (0700), never reached through a link,
  // never a folder another user made or may write to, nor inside one
  // another user could replace it in, so that no one else reads it or
  // steers where the service writes (as elastrund's folders).
  // Checked first: the token file may live in it.
  const std::string& state_dir = flags.state_dir;
  if (!state_dir.empty()) {
    absl::Status st = elastrun::CheckParentsSafe(state_dir);
    if (st.ok()) st = elastrun::MakePrivateDir(state_dir, 0700, /*must_be_new=*/false);
    if (!st.ok()) {
      std::fprintf(stderr, "elastrun-rendezvous: --state-dir: %s\n",
                   std::string(st.message()).c_str());
      return 1;
    }
  }
  absl::StatusOr<std::string> token = ServiceToken(flags);
  if (!token.ok()) {
    std::fprintf(stderr, "elastrun-rendezvous: %s\n",
                 std::string(token.status().message()).c_str());
    return 1;
  }
  const elastrun::rendezvous::ServerOptions options = MakeServerOptions(flags, *token);

  // Block the stop signals in every thread (gRPC's inherit the mask); one
  // thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The stop signal ends the wait to lead, or the serving.
  std::atomic<bool> stopping{false};
  absl::Mutex server_mu;
  elastrun::rendezvous::RendezvousServer* serving = nullptr;
  std::thread([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    LOG(INFO) << "signal " << sig << ": shutting down";
    stopping = true;
    absl::MutexLock lock(&server_mu);
    if (serving != nullptr) serving->Shutdown();
  }).detach();

  std::unique_ptr<Replica> replica;
  elastrun::rendezvous::ServerOptions serve_options = options;
  if (!flags.store.empty()) {
    absl::StatusOr<std::unique_ptr<Replica>> led = Replica::Lead(flags, argv, stopping);
    if (absl::IsCancelled(led.status())) return 0;
    if (!led.ok()) {
      std::fprintf(stderr, "elastrun-rendezvous: %s\n",
                   std::string(led.status().message()).c_str());
      return 1;
    }
    replica = *std::move(led);
    replica->Configure(serve_options);
  }

  absl::StatusOr<std::unique_ptr<elastrun::rendezvous::RendezvousServer>> server =
      elastrun::rendezvous::RendezvousServer::Create(serve_options);
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
  if (elastrun::tls::ServerWantsTls(flags.tls)) {
    LOG(INFO) << "TLS only"
              << (flags.tls.ca.empty()
                      ? std::string()
                      : "; clients must present a certificate signed by " + flags.tls.ca);
  }

  {
    absl::MutexLock lock(&server_mu);
    serving = server->get();
    if (stopping) serving->Shutdown();
  }
  (*server)->Wait();
  {
    absl::MutexLock lock(&server_mu);
    serving = nullptr;
  }
  server->reset();
  replica.reset();  // resigns: a follower leads at once
  return 0;
}
