// elastrund's command line (CLI11, common/flags.h), parsed and checked
// here; main.cc turns it into the Agent's, Daemon's and session's options.
#ifndef ELASTRUN_LAUNCHER_DAEMON_FLAGS_H_
#define ELASTRUN_LAUNCHER_DAEMON_FLAGS_H_

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace elastrun::launcher {

struct DaemonFlags {
  // --rendezvous HOST:PORT, else $ELASTRUN_RENDEZVOUS (required), and its parts.
  std::string rendezvous;
  std::string rendezvous_host;
  int rendezvous_port = 0;
  // --node-id; default: the host name.
  std::string node_id;
  // --slots; 0: not given (main counts GPUs, else CPUs).
  int slots = 0;
  // --advertise-addr; empty: not given (main picks the route's address).
  std::string advertise_addr;
  // --labels k=v,...
  std::map<std::string, std::string> labels;
  // --log-dir; default /tmp/elastrund-<node id>.
  std::string log_dir;
  // --token, --token-file, else $ELASTRUN_TOKEN; empty: none.
  std::string token;
  // --shutdown-timeout: grace between the stop signal and SIGKILL.
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // --standby: pre-start the next attempt's workers.
  bool standby = false;
  // --no-snapshots: no snapshot folders, no ELASTRUN_SNAPSHOT for workers.
  bool no_snapshots = false;
  // --metrics-listen HOST:PORT: the Prometheus endpoint; empty: none.
  std::string metrics_listen;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Parses `args` (without argv[0]); `env` gives $ELASTRUN_RENDEZVOUS and
// $ELASTRUN_TOKEN, `hostname` the default node id. Returns an exit code when
// the program should exit now (0 after --help or --version printed to
// `out`; 2 after a usage error naming the flag printed to `err`), else
// std::nullopt with *flags filled.
std::optional<int> ParseDaemonFlags(const std::vector<std::string>& args, const EnvLookup& env,
                                    const std::string& hostname, std::ostream& out,
                                    std::ostream& err, DaemonFlags* flags);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_FLAGS_H_
