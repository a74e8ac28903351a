#include "launcher/daemon/flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

constexpr char kFooter[] = R"(DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
On SIGINT/SIGTERM/SIGHUP/SIGQUIT the daemon stops its workers (the signal,
then SIGKILL after the grace), and exits with 128+signal; the service sees
the node leave and re-forms the job without it.
Snapshots live in BASE/elastrun-UID/JOB@NODE/ (BASE: $ELASTRUN_SNAPSHOT_BASE,
else /dev/shm, else $XDG_RUNTIME_DIR, else $TMPDIR), one per job, removed when
the job ends or leaves this node; at start the daemon removes its own leftovers.
)";

struct Raw {
  std::string slots, labels, token_file, shutdown_timeout;
};

std::unique_ptr<CLI::App> NewDaemonApp(DaemonFlags* f, Raw* raw) {
  std::unique_ptr<CLI::App> app = flags::NewApp(kBinary, kIntro, kFooter);
  app->add_option("--rendezvous", f->rendezvous,
                  "the service (default: $ELASTRUN_RENDEZVOUS).")
      ->type_name("HOST:PORT");
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
  app->add_option("--metrics-listen", f->metrics_listen,
                  "serve Prometheus metrics (GET /metrics) on this\n"
                  "address; port 0 picks a free port, printed on\n"
                  "stdout as \"metrics on HOST:PORT\". Default: none.")
      ->type_name("HOST:PORT");
  app->add_option("--log-dir", f->log_dir,
                  "worker logs: DIR/<job>/attempt_<round>/<local_rank>/\n"
                  "{stdout,stderr}.log and error.json\n"
                  "(default: /tmp/elastrund-<node id>).")
      ->type_name("DIR");
  CLI::Option* token =
      app->add_option("--token", f->token,
                      "send \"authorization: Bearer TOKEN\" (default:\n"
                      "$ELASTRUN_TOKEN; visible in ps: prefer --token-file).\n"
                      "Never passed on to workers.")
          ->type_name("TOKEN");
  app->add_option("--token-file", raw->token_file, "read the token from FILE.")
      ->type_name("FILE")
      ->excludes(token);
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
                    DaemonFlags* f) {
  if (f->rendezvous.empty()) {
    if (auto v = env("ELASTRUN_RENDEZVOUS"); v) f->rendezvous = *v;
  }
  if (f->rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "--rendezvous HOST:PORT (or $ELASTRUN_RENDEZVOUS) is required");
  }
  if (absl::Status st =
          SplitHostPort(f->rendezvous, "--rendezvous", &f->rendezvous_host, &f->rendezvous_port);
      !st.ok()) {
    return st;
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
  if (!raw.token_file.empty()) {
    absl::StatusOr<std::string> t = flags::ReadTokenFile(raw.token_file);
    if (!t.ok()) return t.status();
    f->token = *t;
  } else if (f->token.empty()) {
    if (auto v = env("ELASTRUN_TOKEN"); v) f->token = *v;
  }
  if (!raw.shutdown_timeout.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(raw.shutdown_timeout, "--shutdown-timeout");
    if (!d.ok()) return d.status();
    f->shutdown_timeout = *d;
  }
  if (f->log_dir.empty()) f->log_dir = "/tmp/elastrund-" + f->node_id;
  return absl::OkStatus();
}

}  // namespace

std::optional<int> ParseDaemonFlags(const std::vector<std::string>& args, const EnvLookup& env,
                                    const std::string& hostname, std::ostream& out,
                                    std::ostream& err, DaemonFlags* flags) {
  Raw raw;
  std::unique_ptr<CLI::App> app = NewDaemonApp(flags, &raw);
  if (std::optional<int> exit = flags::Parse(*app, args, out, err)) return exit;
  if (absl::Status st = Finish(raw, env, hostname, flags); !st.ok()) {
    err << flags::UsageError(kBinary, std::string(st.message()));
    return flags::kExitUsage;
  }
  return std::nullopt;
}

}  // namespace elastrun::launcher
