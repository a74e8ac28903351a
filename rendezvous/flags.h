// elastrun-rendezvous's command line (CLI11, common/flags.h): parsed and
// checked here, turned into ServerOptions by main.cc.
#ifndef ELASTRUN_RENDEZVOUS_FLAGS_H_
#define ELASTRUN_RENDEZVOUS_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/tls.h"

namespace elastrun::rendezvous {

struct ServiceFlags {
  // --listen HOST:PORT; port 0 picks a free port.
  std::string listen = "127.0.0.1:29400";
  // --state-dir: SQLite state in DIR/state.db; empty: in memory only.
  std::string state_dir;
  // --heartbeat-interval / --lease-timeout (the lease options).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lease_timeout = absl::Seconds(3);
  // --node-expiry: a node lost this long is forgotten; "0": never.
  absl::Duration node_expiry = absl::Minutes(10);
  // --max-nodes: nodes kept at most (CoordinatorOptions::max_nodes).
  int max_nodes = 50000;
  // --metrics-listen HOST:PORT: the Prometheus endpoint; empty: none.
  std::string metrics_listen;
  // --token; empty: the token is in a file (token_file).
  std::string token;
  // --tls-cert / --tls-key (TLS), --tls-ca (mutual TLS); empty: plaintext.
  tls::TlsFiles tls;
  // --insecure: serve plaintext off loopback (the token travels in clear).
  bool insecure = false;
  // --token-file; empty: the default (auth::DefaultTokenFile). Read, or
  // created when missing, by main.cc.
  std::string token_file;
};

// Parses `args` (without argv[0]) into *flags. Returns an exit code when
// the program should exit now (0 after --help or --version printed to
// `out`; 2 after a usage error naming the flag printed to `err`), else
// std::nullopt.
std::optional<int> ParseServiceFlags(const std::vector<std::string>& args,
                                     std::ostream& out, std::ostream& err,
                                     ServiceFlags* flags);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_FLAGS_H_
