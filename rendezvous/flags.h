// elastrun-rendezvous's command line (CLI11, common/flags.h): parsed and
// checked here, turned into ServerOptions by main.cc.
#ifndef ELASTRUN_RENDEZVOUS_FLAGS_H_
#define ELASTRUN_RENDEZVOUS_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace elastrun::rendezvous {

struct ServiceFlags {
  // --listen HOST:PORT; port 0 picks a free port.
  std::string listen = "127.0.0.1:29400";
  // --state-dir: SQLite state in DIR/state.db; empty: in memory only.
  std::string state_dir;
  // --heartbeat-interval / --lease-timeout (the lease options).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lease_timeout = absl::Seconds(3);
  // --metrics-listen HOST:PORT: the Prometheus endpoint; empty: none.
  std::string metrics_listen;
  // --token, or read from --token-file; empty: no token.
  std::string token;
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
