#include "rendezvous/flags.h"

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

constexpr char kFooter[] = R"(DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
Stops cleanly on SIGINT or SIGTERM; daemons keep their workers running and
reconnect when the service is back.
)";

}  // namespace

std::optional<int> ParseServiceFlags(const std::vector<std::string>& args,
                                     std::ostream& out, std::ostream& err,
                                     ServiceFlags* flags) {
  std::unique_ptr<CLI::App> app = flags::NewApp(kBinary, kIntro, kFooter);
  std::string heartbeat, lease, token_file;
  app->add_option("--listen", flags->listen,
                  "address to serve on (default 127.0.0.1:29400).\n"
                  "Port 0 picks a free port. The chosen address is\n"
                  "printed on stdout as \"listening on HOST:PORT\".\n"
                  "A non-loopback HOST requires --token or --token-file.")
      ->type_name("HOST:PORT");
  app->add_option("--state-dir", flags->state_dir,
                  "keep state in DIR/state.db (SQLite; DIR is created).\n"
                  "Jobs, rounds, history and nodes survive a restart.\n"
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
  CLI::Option* token =
      app->add_option("--token", flags->token,
                      "require \"authorization: Bearer TOKEN\" on every\n"
                      "call (visible in ps: prefer --token-file).")
          ->type_name("TOKEN");
  app->add_option("--token-file", token_file,
                  "read the token from FILE (surrounding whitespace ignored).")
      ->type_name("FILE")
      ->excludes(token);
  if (std::optional<int> exit = flags::Parse(*app, args, out, err)) return exit;

  auto usage = [&](const absl::Status& st) {
    err << flags::UsageError(kBinary, std::string(st.message()));
    return flags::kExitUsage;
  };
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
  if (!token_file.empty()) {
    absl::StatusOr<std::string> t = flags::ReadTokenFile(token_file);
    if (!t.ok()) return usage(t.status());
    flags->token = *t;
  }
  return std::nullopt;
}

}  // namespace elastrun::rendezvous
