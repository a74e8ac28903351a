#include "launcher/daemon/flags.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth.h"
#include "common/flags.h"
#include "common/strings.h"

namespace elastrun::launcher {
namespace {

constexpr char kBinary[] = "elastrund";

constexpr char kIntro[] = R"(usage: elastrund --rendezvous HOST:PORT [flags]

The elastrun node daemon: registers this node with elastrun-rendezvous, keeps
its lease, and runs the worker groups of the jobs the service places here,
reporting how each attempt ends. Workers keep running while the service is
away; the daemon reconnects and re-registers.
)";

constexpr char kFooter[] =
    R"(DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
On SIGINT/SIGTERM/SIGHUP/SIGQUIT the daemon stops its workers (the signal,
then SIGKILL after the grace), and exits with 128+signal; the service sees
the node leave and re-forms the job without it.
The state folder (--state-dir) is the daemon's own: made 0700 (0711 for a
root daemon, so that workers of other users reach their folders in it); an
existing one that is a symlink, belongs to another user or is writable by
others, or lies inside a folder others own or may write to (not sticky), is
refused (exit 1). Worker logs and the agent socket live in it, and
log-spill: worker lines the service cannot take yet (away, or its disk
full) beyond a 1 MiB buffer, up to 256 MiB, sent in order once it can;
new log folders and files are never reused or written through a link.
A root daemon runs a job's workers as the job's owner (uid, gid, the user's
groups, HOME/USER/LOGNAME), in the job's working folder; a non-root daemon
runs only its own user's jobs.
Snapshots live in BASE/elastrun-UID/JOB@NODE/ (BASE: $ELASTRUN_SNAPSHOT_BASE,
else /dev/shm, else $XDG_RUNTIME_DIR, else $TMPDIR), one per job, removed when
the job ends or leaves this node; at start the daemon removes its own leftovers.
Each attempt runs in a cgroup v2 of its own where the machine allows it (a
writable cgroup2: root, or a delegated cgroup), killed as a whole when the
attempt ends; at start the daemon kills what a previous daemon of the same
node id left there. Elsewhere one line says why, and workers are stopped by
process group only.
The cluster token comes from --token, --token-file, $ELASTRUN_TOKEN,
$ELASTRUN_TOKEN_FILE, else the service's default token file
(/var/lib/elastrun/token for root, else $XDG_STATE_HOME/elastrun/token or
~/.local/state/elastrun/token); a token file must be this user's, mode 0600.
With the token, the daemon gives local users credentials for their own uid on
--cred-socket, so that they can use `elastrun` without reading the token.
)";

struct Raw {
  std::string slots, labels, token_file, shutdown_timeout;
};

// How the daemon proves itself to the service, and vouches for its users.
void AddCredentialFlags(CLI::App* app, DaemonFlags* f, Raw* raw) {
  CLI::Option* token =
      app->add_option("--token", f->token,
                      "send \"authorization: Bearer TOKEN\" (default:\n"
                      "$ELASTRUN_TOKEN; visible in ps: prefer --token-file).\n"
                      "Never passed on to workers.")
          ->type_name("TOKEN");
  app->add_option("--token-file", raw->token_file,
                  "read the token from FILE (this user's, mode 0600;\n"
                  "default: $ELASTRUN_TOKEN_FILE, else the service's\n"
                  "default token file).")
      ->type_name("FILE")
      ->excludes(token);
  app->add_option("--tls-ca", f->tls.ca,
                  "speak TLS to the service and verify its certificate\n"
                  "against this PEM CA (default: $ELASTRUN_TLS_CA).")
      ->type_name("FILE");
  app->add_option("--tls-cert", f->tls.cert,
                  "client certificate (PEM) for a service with mutual\n"
                  "TLS; needs --tls-key and --tls-ca (default:\n"
                  "$ELASTRUN_TLS_CERT).")
      ->type_name("FILE");
  app->add_option("--tls-key", f->tls.key,
                  "the PEM private key of --tls-cert (default:\n"
                  "$ELASTRUN_TLS_KEY).")
      ->type_name("FILE");
  app->add_option("--tls-server-name", f->tls.server_name,
                  "the name the service's certificate must carry, when\n"
                  "--rendezvous's host is not in it (default:\n"
                  "$ELASTRUN_TLS_SERVER_NAME).")
      ->type_name("NAME");
  app->add_option("--cred-socket", f->cred_socket,
                  "unix socket where local users get a credential for\n"
                  "their own uid (default: $ELASTRUN_CRED_SOCKET, else\n"
                  "/run/elastrund/cred.sock for root, else\n"
                  "$XDG_RUNTIME_DIR/elastrund-cred.sock; none: off).")
      ->type_name("PATH");
}

std::unique_ptr<CLI::App> NewDaemonApp(DaemonFlags* f, Raw* raw) {
  std::unique_ptr<CLI::App> app = flags::NewApp(kBinary, kIntro, kFooter);
  app->add_option("--rendezvous", f->rendezvous,
                  "the service (default: $ELASTRUN_RENDEZVOUS); its\n"
                  "replicas comma-separated (a:1,b:2,c:3): the daemon\n"
                  "follows whichever leads.")
      ->type_name("HOST:PORT[,...]");
  app->add_option("--node-id", f->node_id,
                  "this node's stable id (default: the host name); one\n"
                  "live daemon per id: a second one exits 1.")
      ->type_name("ID");
  app->add_option("--slots", raw->slots,
                  "worker slots (GPUs or CPUs) offered, >= 1: jobs run\n"
                  "here at once while their workers fit (default: the\n"
                  "number of /dev/nvidiaN devices, else of CPUs).")
      ->type_name("N");
  app->add_option("--advertise-addr", f->advertise_addr,
                  "address other nodes reach this one at (MASTER_ADDR\n"
                  "when it is rank 0). Default: 127.0.0.1 when the\n"
                  "service is on loopback, else the address of the\n"
                  "interface that routes to the service.")
      ->type_name("ADDR");
  app->add_option("--labels", raw->labels, "labels shown by `elastrun nodes`.")
      ->type_name("K=V,...");
  app->add_option("--pool", f->pool,
                  "the pool this node serves: only jobs submitted with\n"
                  "the same --pool (job file: pool) run here, and\n"
                  "those only on such nodes ([A-Za-z0-9._-], at most\n"
                  "64; default: the default pool, jobs given none)")
      ->type_name("NAME");
  app->add_option("--state-dir", f->state_dir,
                  "the daemon's own folder: logs and the agent socket\n"
                  "(default: /var/lib/elastrund/<node id> as root, else\n"
                  "$XDG_STATE_HOME/elastrund/<node id>, else\n"
                  "~/.local/state/elastrund/<node id>). Must belong to\n"
                  "the daemon's user and be writable by no one else, and\n"
                  "every folder above it to root or that user (others may\n"
                  "write only to sticky ones, as /tmp).")
      ->type_name("DIR");
  app->add_option("--metrics-listen", f->metrics_listen,
                  "serve Prometheus metrics (GET /metrics) on this\n"
                  "address; port 0 picks a free port, printed on\n"
                  "stdout as \"metrics on HOST:PORT\". Default: none.")
      ->type_name("HOST:PORT");
  app->add_option("--log-dir", f->log_dir,
                  "worker logs: DIR/<job>/attempt_<round>/<local_rank>/\n"
                  "{stdout,stderr}.log and error.json, under the same\n"
                  "rules as --state-dir (default: <state dir>/logs).")
      ->type_name("DIR");
  AddCredentialFlags(app.get(), f, raw);
  app->add_option("--shutdown-timeout", raw->shutdown_timeout,
                  "grace between SIGTERM to workers and SIGKILL (default 30s).")
      ->type_name("DUR");
  app->add_flag("--standby", f->standby,
                "pre-start the next attempt's workers (workers built on\n"
                "libelastrun_worker only), so restarts are faster.\n"
                "Standbys are used only by an attempt of the same\n"
                "program and environment; otherwise they are discarded\n"
                "and fresh workers start.");
  app->add_flag("--no-snapshots", f->no_snapshots,
                "give workers no ELASTRUN_SNAPSHOT folder (in-memory\n"
                "training snapshots that survive a worker's restart).");
  return app;
}

// The checks CLI11 does not know: values, the environment's fallbacks.
absl::Status Finish(const Raw& raw, const EnvLookup& env, const std::string& hostname,
                    bool is_root, DaemonFlags* f) {
  if (f->rendezvous.empty()) {
    if (auto v = env("ELASTRUN_RENDEZVOUS"); v) f->rendezvous = *v;
  }
  if (f->rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "--rendezvous HOST:PORT (or $ELASTRUN_RENDEZVOUS) is required");
  }
  // Several endpoints (the service's replicas): each must be HOST:PORT; the
  // first stands for all in what the node derives from the address (the
  // route to the service).
  bool first = true;
  for (absl::string_view e : absl::StrSplit(f->rendezvous, ',')) {
    std::string host;
    int port = 0;
    if (absl::Status st = SplitHostPort(e, "--rendezvous", &host, &port); !st.ok())
      return st;
    if (first) {
      f->rendezvous_host = host;
      f->rendezvous_port = port;
      first = false;
    }
  }
  if (f->node_id.empty()) f->node_id = hostname;
  if (f->node_id.empty()) return absl::InvalidArgumentError("--node-id: must not be empty");
  if (!raw.slots.empty()) {
    absl::StatusOr<int64_t> n = ParseInt(raw.slots, "--slots", 1, 1 << 20);
    if (!n.ok()) return n.status();
    f->slots = static_cast<int>(*n);
  }
  for (absl::string_view kv : absl::StrSplit(raw.labels, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || !absl::StrContains(kv, '=')) {
      return absl::InvalidArgumentError(absl::StrCat("--labels: \"", kv, "\" is not key=value"));
    }
    f->labels[p.first] = p.second;
  }
  if (!IsServiceName(f->pool)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pool: \"", absl::CHexEscape(f->pool),
                     "\" is not a pool name ([A-Za-z0-9._-], at most 64 characters)"));
  }
  absl::StatusOr<std::string> token = auth::NamedToken(env, f->token, raw.token_file);
  if (!token.ok()) return token.status();
  f->token = *std::move(token);
  if (f->cred_socket.empty()) {
    if (auto v = env("ELASTRUN_CRED_SOCKET"); v) f->cred_socket = *v;
  }
  for (auto [field, var] : {std::pair{&f->tls.ca, "ELASTRUN_TLS_CA"},
                            std::pair{&f->tls.cert, "ELASTRUN_TLS_CERT"},
                            std::pair{&f->tls.key, "ELASTRUN_TLS_KEY"},
                            std::pair{&f->tls.server_name, "ELASTRUN_TLS_SERVER_NAME"}}) {
    if (field->empty()) {
      if (auto v = env(var); v) *field = *v;
    }
  }
  if (absl::Status st = tls::CheckClientFlags(f->tls); !st.ok()) return st;
  if (!raw.shutdown_timeout.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(raw.shutdown_timeout, "--shutdown-timeout");
    if (!d.ok()) return d.status();
    f->shutdown_timeout = *d;
  }
  if (f->state_dir.empty()) f->state_dir = DefaultStateDir(f->node_id, is_root, env);
  if (f->log_dir.empty()) f->log_dir = f->state_dir + "/logs";
  return absl::OkStatus();
}

}  // namespace

std::string DefaultStateDir(const std::string& node_id, bool is_root,
                            const EnvLookup& env) {
  // One path component: never a subfolder, never "." or "..".
  std::string node = node_id;
  for (char& c : node) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-') {
      c = '_';
    }
  }
  if (node.find_first_not_of('.') == std::string::npos) node = "_" + node;
  if (is_root) return "/var/lib/elastrund/" + node;
  auto set = [&](const char* name) -> std::optional<std::string> {
    std::optional<std::string> v = env(name);
    // The XDG spec: a relative value is invalid and ignored.
    if (v && absl::StartsWith(*v, "/")) return v;
    return std::nullopt;
  };
  if (auto v = set("XDG_STATE_HOME")) return absl::StrCat(*v, "/elastrund/", node);
  if (auto v = set("HOME")) return absl::StrCat(*v, "/.local/state/elastrund/", node);
  return "/tmp/elastrund-" + node;
}

std::optional<int> ParseDaemonFlags(const std::vector<std::string>& args,
                                    const EnvLookup& env, const std::string& hostname,
                                    bool is_root, std::ostream& out, std::ostream& err,
                                    DaemonFlags* flags) {
  Raw raw;
  std::unique_ptr<CLI::App> app = NewDaemonApp(flags, &raw);
  flags::ConfigFile config(app.get());
  if (std::optional<int> exit = flags::Parse(*app, args, out, err)) return exit;
  absl::Status st = config.Apply();
  if (st.ok()) st = Finish(raw, env, hostname, is_root, flags);
  if (!st.ok()) {
    // An error about a value from the config file names its file and line.
    err << flags::UsageError(kBinary, config.Locate(std::string(st.message())));
    return flags::kExitUsage;
  }
  return std::nullopt;
}

}  // namespace elastrun::launcher
