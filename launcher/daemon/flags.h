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
#include "common/tls.h"

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
  // --pool: only jobs of this pool are placed here; empty: the default pool.
  std::string pool;
  // --state-dir: the daemon's own folder (logs, agent socket); default
  // DefaultStateDir().
  std::string state_dir;
  // --log-dir; default <state dir>/logs.
  std::string log_dir;
  // --token, --token-file, else $ELASTRUN_TOKEN, else $ELASTRUN_TOKEN_FILE
  // (files read with auth::ReadTokenFile's checks); empty: main reads the
  // default token file.
  std::string token;
  // --tls-ca / --tls-cert / --tls-key / --tls-server-name, else
  // $ELASTRUN_TLS_CA / _CERT / _KEY / _SERVER_NAME; all empty: plaintext.
  tls::TlsFiles tls;
  // --cred-socket, else $ELASTRUN_CRED_SOCKET; empty: main's default
  // (DefaultCredSocket); "none": no credential socket.
  std::string cred_socket;
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

// The state folder when --state-dir is not given: /var/lib/elastrund/<node>
// for root, else $XDG_STATE_HOME/elastrund/<node>, else
// $HOME/.local/state/elastrund/<node> (else under /tmp, for a user without
// a home). <node> is the node id made safe as one path component.
std::string DefaultStateDir(const std::string& node_id, bool is_root,
                            const EnvLookup& env);

// Parses `args` (without argv[0]); `env` gives $ELASTRUN_RENDEZVOUS,
// $ELASTRUN_TOKEN, $ELASTRUN_TOKEN_FILE, $ELASTRUN_CRED_SOCKET, $ELASTRUN_TLS_*
// (and the state folder's default), `hostname` the default node id, `is_root` whether the daemon runs as root. Returns an exit code when
// the program should exit now (0 after --help or --version printed to
// `out`; 2 after a usage error naming the flag printed to `err`), else
// std::nullopt with *flags filled.
std::optional<int> ParseDaemonFlags(const std::vector<std::string>& args,
                                    const EnvLookup& env, const std::string& hostname,
                                    bool is_root, std::ostream& out, std::ostream& err,
                                    DaemonFlags* flags);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_FLAGS_H_
