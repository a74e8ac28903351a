#include "rendezvous/flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/strings.h"

namespace elastrun::rendezvous {
namespace {

constexpr char kBinary[] = "elastrun-rendezvous";

constexpr char kIntro[] = R"(usage: elastrun-rendezvous [flags]

The elastrun rendezvous service: node registry with leases, job queue and
placement, rendezvous rounds, barriers. Node daemons (elastrund) and the CLI
(elastrun) connect to it over gRPC.
)";

constexpr char kFooter[] = R"(Callers identify themselves with the cluster token, or with a short-lived
credential that the local elastrund gives any user for their own uid. The
token is read from the token file (--token-file; default
/var/lib/elastrun/token for root, else $XDG_STATE_HOME/elastrun/token or
~/.local/state/elastrun/token), which the service creates on its first start
(32 random bytes as hex, mode 0600, folder 0700). A token file that is a
symlink, not this user's, or open to group or others is refused. Daemons and
the CLI find the same file.
DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
Stops cleanly on SIGINT or SIGTERM; daemons keep their workers running and
reconnect when the service is back.
)";

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEtcdUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "etcd://";
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--store \"", url,
                     "\": give etcd://HOST:PORT[,HOST:PORT...] (SQLite is --state-dir)"));
  }
  std::vector<std::string> endpoints;
  for (absl::string_view e : absl::StrSplit(url.substr(kScheme.size()), ',')) {
    std::string host;
    int port = 0;
    if (absl::Status st = SplitHostPort(std::string(e), "--store", &host, &port);
        !st.ok() || port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store \"", url, "\": endpoint \"", e, "\" is not HOST:PORT"));
    }
    endpoints.emplace_back(e);
  }
  return endpoints;
}

std::optional<int> ParseServiceFlags(const std::vector<std::string>& args,
                                     std::ostream& out, std::ostream& err,
                                     ServiceFlags* flags) {
  std::unique_ptr<CLI::App> app = flags::NewApp(kBinary, kIntro, kFooter);
  flags::ConfigFile config(app.get());
  std::string heartbeat, lease, expiry;
  app->add_option("--listen", flags->listen,
                  "address to serve on (default 127.0.0.1:29400).\n"
                  "Port 0 picks a free port. The chosen address is\n"
                  "printed on stdout as \"listening on HOST:PORT\".\n"
                  "Off loopback it needs the token and --tls-cert, or\n"
                  "--insecure: without TLS the token travels in clear.")
      ->type_name("HOST:PORT");
  app->add_option("--state-dir", flags->state_dir,
                  "keep state in DIR/state.db (SQLite) and logs in\n"
                  "DIR/logs.db. DIR is made 0700; an existing one that is\n"
                  "a symlink, another user's or writable by others, or\n"
                  "one inside a folder others own or may write to (not\n"
                  "sticky), is refused (exit 1). Jobs, rounds, history and\n"
                  "nodes survive a restart.\n"
                  "Without it, state is in memory only.")
      ->type_name("DIR");
  app->add_option("--metrics-listen", flags->metrics_listen,
                  "serve Prometheus metrics (GET /metrics) on this\n"
                  "address; port 0 picks a free port, printed on\n"
                  "stdout as \"metrics on HOST:PORT\". Default: none.")
      ->type_name("HOST:PORT");
  app->add_option("--heartbeat-interval", heartbeat,
                  "how often daemons heartbeat (default 1s).")
      ->type_name("DUR");
  app->add_option("--lease-timeout", lease,
                  "a node silent this long is lost (default 3s;\n"
                  "must exceed the heartbeat interval).")
      ->type_name("DUR");
  app->add_option("--max-heartbeat-rate", flags->max_heartbeat_rate,
                  "heartbeats a second asked of all nodes together\n"
                  "(default 4000; 0: no limit). A larger cluster\n"
                  "heartbeats less often: interval and lease grow in\n"
                  "proportion (10,000 nodes at the defaults: every 2.5s,\n"
                  "lost after 7.5s). Daemons hear it in each reply.")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--node-expiry", expiry,
                  "a node lost this long is forgotten: gone from\n"
                  "`elastrun nodes` and the state file, and its next\n"
                  "registration is a fresh node (default 10m: longer\n"
                  "than a reboot, so a returning node keeps its record;\n"
                  "0: never). A node still holding a job's slots is\n"
                  "kept until the job lets go.")
      ->type_name("DUR");
  app->add_option("--max-nodes", flags->max_nodes,
                  "keep at most N nodes, alive or lost (default 50000).\n"
                  "A new node id beyond it makes room by forgetting the\n"
                  "node lost longest; with none lost it is refused.")
      ->type_name("N")
      ->check(CLI::Range(1, 10000000));
  CLI::Option* token =
      app->add_option("--token", flags->token,
                      "the cluster token, instead of the token file\n"
                      "(visible in ps: prefer --token-file).")
          ->type_name("TOKEN");
  app->add_option("--token-file", flags->token_file,
                  "the token file (default: see below); created with a\n"
                  "new random token when missing; must be this user's,\n"
                  "mode 0600.")
      ->type_name("FILE")
      ->excludes(token);
  app->add_option("--tls-cert", flags->tls.cert,
                  "serve TLS only, with this PEM certificate (chain);\n"
                  "needs --tls-key. Clients give --tls-ca. TLS keeps the\n"
                  "token secret; it does not replace it.")
      ->type_name("FILE");
  app->add_option("--tls-key", flags->tls.key, "the PEM private key of --tls-cert.")
      ->type_name("FILE");
  app->add_option("--tls-ca", flags->tls.ca,
                  "mutual TLS: every client (daemon, CLI) must present\n"
                  "a certificate signed by this PEM CA; needs --tls-cert.")
      ->type_name("FILE");
  app->add_flag("--insecure", flags->insecure,
                "serve plaintext on a non-loopback --listen. Without\n"
                "it such a listener needs --tls-cert: in plaintext the\n"
                "token, root on every root daemon, travels in clear\n"
                "(for a network only the cluster's machines reach).");
  std::string leader_lease;
  app->add_option("--store", flags->store,
                  "etcd://HOST:PORT[,HOST:PORT...]: keep the state and\n"
                  "the logs in etcd (v3), shared by several replicas of\n"
                  "this service: one leads and serves, the others wait\n"
                  "and take over within --leader-lease when it is lost.\n"
                  "Default: SQLite in --state-dir (or memory).")
      ->type_name("URL");
  app->add_option("--etcd-prefix", flags->etcd_prefix,
                  "every key of this cluster lives under this prefix\n"
                  "(default /elastrun): clusters may share one etcd.")
      ->type_name("PREFIX");
  app->add_option("--etcd-ca", flags->etcd_tls.ca,
                  "talk TLS to etcd, trusting this PEM CA.")
      ->type_name("FILE");
  app->add_option("--etcd-cert", flags->etcd_tls.cert,
                  "mutual TLS to etcd: this PEM client certificate\n"
                  "(needs --etcd-key and --etcd-ca).")
      ->type_name("FILE");
  app->add_option("--etcd-key", flags->etcd_tls.key,
                  "the PEM private key of --etcd-cert.")
      ->type_name("FILE");
  app->add_option("--etcd-user", flags->etcd_user,
                  "etcd's authentication: this user, with the password\n"
                  "in --etcd-password-file.")
      ->type_name("NAME");
  app->add_option("--etcd-password-file", flags->etcd_password_file,
                  "the file holding --etcd-user's password (one line).")
      ->type_name("FILE");
  app->add_option("--leader-lease", leader_lease,
                  "with etcd: the leadership's lease (default 2s; etcd\n"
                  "grants no less). A leader that cannot renew it stops\n"
                  "serving; a follower leads once it expired.")
      ->type_name("DUR");
  app->add_option("--advertise", flags->advertise,
                  "with etcd: the address clients reach this replica at,\n"
                  "named as the leader's in the log (default: --listen\n"
                  "as bound).")
      ->type_name("HOST:PORT");
  app->add_flag("--follower-proxy", flags->follower_proxy,
                "with etcd: while another replica leads, serve --listen\n"
                "by passing every call on to the leader, so that a load\n"
                "balancer or one address may reach any replica. Off by\n"
                "default: after a failover a client connected through a\n"
                "follower reaches the new leader 0.5-2 s later than one\n"
                "that finds it itself (bench/README.md).");
  if (std::optional<int> exit = flags::Parse(*app, args, out, err)) return exit;

  // An error about a value from the config file names its file and line.
  auto usage = [&](const absl::Status& st) {
    err << flags::UsageError(kBinary, config.Locate(std::string(st.message())));
    return flags::kExitUsage;
  };
  if (absl::Status st = config.Apply(); !st.ok()) return usage(st);
  if (!heartbeat.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(heartbeat, "--heartbeat-interval");
    if (!d.ok()) return usage(d.status());
    flags->heartbeat_interval = *d;
  }
  if (!lease.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(lease, "--lease-timeout");
    if (!d.ok()) return usage(d.status());
    flags->lease_timeout = *d;
  }
  if (!expiry.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(expiry, "--node-expiry");
    if (!d.ok()) return usage(d.status());
    flags->node_expiry = *d == absl::ZeroDuration() ? absl::InfiniteDuration() : *d;
  }
  if (!leader_lease.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(leader_lease, "--leader-lease");
    if (!d.ok()) return usage(d.status());
    if (*d < absl::Seconds(1)) {
      return usage(absl::InvalidArgumentError("--leader-lease must be at least 1s"));
    }
    flags->leader_lease = *d;
  }
  if (!flags->store.empty()) {
    absl::StatusOr<std::vector<std::string>> endpoints = ParseEtcdUrl(flags->store);
    if (!endpoints.ok()) return usage(endpoints.status());
    flags->etcd_endpoints = *std::move(endpoints);
    if (!flags->state_dir.empty()) {
      return usage(absl::InvalidArgumentError(
          "--store etcd://... and --state-dir: the state lives in one place; give one"));
    }
  } else if (!flags->etcd_tls.ca.empty() || !flags->etcd_tls.cert.empty() ||
             !flags->etcd_user.empty() || !flags->etcd_password_file.empty()) {
    return usage(
        absl::InvalidArgumentError("the --etcd-* flags need --store etcd://..."));
  }
  if (!flags->etcd_tls.cert.empty() != !flags->etcd_tls.key.empty() ||
      (!flags->etcd_tls.cert.empty() && flags->etcd_tls.ca.empty())) {
    return usage(absl::InvalidArgumentError(
        "--etcd-cert and --etcd-key go together, and with --etcd-ca"));
  }
  if (flags->etcd_user.empty() != flags->etcd_password_file.empty()) {
    return usage(
        absl::InvalidArgumentError("--etcd-user and --etcd-password-file go together"));
  }
  // Half a pair, or a CA without the pair, is a usage error now; the files
  // themselves are read when the server starts.
  if (absl::Status st = tls::CheckServerFlags(flags->tls); !st.ok()) return usage(st);
  return std::nullopt;
}

}  // namespace elastrun::rendezvous
