// elastrun-rendezvous's command line (CLI11, common/flags.h): parsed and
// checked here, turned into ServerOptions by main.cc.
#ifndef ELASTRUN_RENDEZVOUS_FLAGS_H_
#define ELASTRUN_RENDEZVOUS_FLAGS_H_

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
  // --max-heartbeat-rate (LeaseOptions::max_heartbeat_rate).
  double max_heartbeat_rate = 4000;
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

  // --store etcd://HOST:PORT[,HOST:PORT...]: the state (and logs) in etcd,
  // shared by several replicas of which one leads at a time; empty: SQLite
  // in --state-dir (or memory).
  std::string store;
  // The etcd endpoints of --store ("HOST:PORT" each); empty without etcd.
  std::vector<std::string> etcd_endpoints;
  // --etcd-prefix: every key of this cluster lives under it.
  std::string etcd_prefix = "/elastrun";
  // --etcd-ca / --etcd-cert / --etcd-key: TLS (and mutual TLS) to etcd.
  tls::TlsFiles etcd_tls;
  // --etcd-user and --etcd-password-file: etcd's own authentication.
  std::string etcd_user;
  std::string etcd_password_file;
  // --leader-lease: how long a leader that stopped renewing (dead, paused,
  // cut off) keeps the leadership; a follower takes over after it.
  absl::Duration leader_lease = absl::Seconds(2);
  // --advertise HOST:PORT: where clients reach this replica (stored as the
  // leader's address); empty: the bound --listen address.
  std::string advertise;
  // --follower-proxy: while following, serve --listen by passing every call
  // to the leader (FollowerProxy).
  bool follower_proxy = false;
};

// The endpoints of `url`, "etcd://HOST:PORT[,HOST:PORT...]"; InvalidArgument
// naming what is wrong.
absl::StatusOr<std::vector<std::string>> ParseEtcdUrl(absl::string_view url);

// Parses `args` (without argv[0]) into *flags. Returns an exit code when
// the program should exit now (0 after --help or --version printed to
// `out`; 2 after a usage error naming the flag printed to `err`), else
// std::nullopt.
std::optional<int> ParseServiceFlags(const std::vector<std::string>& args,
                                     std::ostream& out, std::ostream& err,
                                     ServiceFlags* flags);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_FLAGS_H_
