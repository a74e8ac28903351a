// elastrun-rendezvous: the coordinator that node daemons (elastrund) and the
// CLI (elastrun) talk to. Thin: parse flags, build a RendezvousServer, wait
// for SIGINT/SIGTERM.
#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "common/strings.h"
#include "glog/logging.h"
#include "rendezvous/server.h"

namespace {

constexpr char kUsage[] = R"(usage: elastrun-rendezvous [flags]

The elastrun rendezvous service: node registry with leases, job queue and
placement, rendezvous rounds, barriers. Node daemons (elastrund) and the CLI
(elastrun) connect to it over gRPC.

flags:
  --listen HOST:PORT          address to serve on (default 127.0.0.1:29400).
                              Port 0 picks a free port. The chosen address is
                              printed on stdout as "listening on HOST:PORT".
                              A non-loopback HOST requires --token or
                              --token-file.
  --state-dir DIR             keep state in DIR/state.db (SQLite; DIR is
                              created). Jobs, rounds, history and nodes survive
                              a restart. Without it, state is in memory only.
  --heartbeat-interval DUR    how often daemons heartbeat (default 1s).
  --lease-timeout DUR         a node silent this long is lost (default 3s;
                              must exceed the heartbeat interval).
  --token TOKEN               require "authorization: Bearer TOKEN" on every
                              call (visible in ps: prefer --token-file).
  --token-file FILE           read the token from FILE (surrounding whitespace
                              ignored).
  --help                      show this help.

DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
Stops cleanly on SIGINT or SIGTERM; daemons keep their workers running and
reconnect when the service is back.
)";

int Usage(const std::string& error) {
  std::fprintf(stderr, "elastrun-rendezvous: %s\n(see --help)\n", error.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  elastrun::rendezvous::ServerOptions options;
  std::string state_dir, token_file;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
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
    const bool known = arg == "--listen" || arg == "--state-dir" ||
                       arg == "--heartbeat-interval" || arg == "--lease-timeout" ||
                       arg == "--token" || arg == "--token-file";
    if (!known) return Usage(absl::StrFormat("unknown argument \"%s\"", arg));
    if (!has_value) {
      if (i + 1 >= argc) return Usage(absl::StrFormat("%s needs a value", arg));
      value = argv[++i];
    }
    if (arg == "--listen") {
      options.listen = value;
    } else if (arg == "--state-dir") {
      state_dir = value;
    } else if (arg == "--token") {
      options.token = value;
    } else if (arg == "--token-file") {
      token_file = value;
    } else {
      absl::StatusOr<absl::Duration> d = elastrun::ParseDuration(value, arg);
      if (!d.ok()) return Usage(std::string(d.status().message()));
      (arg == "--heartbeat-interval" ? options.coordinator.lease.heartbeat_interval
                                     : options.coordinator.lease.lease_timeout) = *d;
    }
  }
  if (!token_file.empty()) {
    if (!options.token.empty()) return Usage("give --token or --token-file, not both");
    std::ifstream in(token_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return Usage(absl::StrFormat("--token-file %s: cannot read: %s", token_file,
                                   std::strerror(errno)));
    }
    options.token = std::string(absl::StripAsciiWhitespace(text.str()));
    if (options.token.empty()) {
      return Usage(absl::StrFormat("--token-file %s is empty", token_file));
    }
  }
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
    std::fprintf(stderr, "elastrun-rendezvous: %s\n",
                 std::string(server.status().message()).c_str());
    return absl::IsInvalidArgument(server.status()) ? 2 : 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
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
