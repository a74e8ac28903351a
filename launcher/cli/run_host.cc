#include "launcher/cli/run_host.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/auth.h"
#include "common/strings.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher {

absl::StatusOr<std::string> RendezvousToken(const RunOptions& o, const EnvLookup& env,
                                            bool* derived) {
  *derived = false;
  absl::StatusOr<std::string> named =
      auth::NamedToken(env, "", o.rdzv_conf.token_file, "--rdzv-conf token_file");
  if (!named.ok() || !named->empty()) return named;
  if (o.external_rendezvous()) {
    return absl::InvalidArgumentError(
        "--rdzv-backend elastrun needs the service's token: --rdzv-conf token_file=FILE, "
        "$ELASTRUN_TOKEN_FILE or $ELASTRUN_TOKEN");
  }
  *derived = true;
  return absl::StrCat("elastrun-run-", o.run_id);
}

rendezvous::ServerOptions EmbeddedServerOptions(const RunOptions& o,
                                                const std::string& token) {
  rendezvous::ServerOptions so;
  // A loopback endpoint stays on loopback (one machine). Any other is
  // served on every address, as torchrun's store is: the host's own name
  // may resolve to a loopback address there (Debian maps it to 127.0.1.1)
  // while the other nodes reach it by another, and is_host=1 may be given
  // on a node the endpoint does not name (an alias, a forwarded address).
  std::string host;
  int port = 0;
  if (!SplitHostPort(o.rdzv_endpoint, "--rdzv-endpoint", &host, &port).ok() ||
      (o.endpoint_is_this_host && IsLoopbackHost(host))) {
    so.listen = o.rdzv_endpoint;
  } else {
    so.listen = absl::StrCat(absl::StrContains(host, ':') ? "[::]:" : "0.0.0.0:", port);
  }
  so.token = token;
  // Plaintext off loopback, as torchrun's c10d store: the token of a run
  // (derived from its run id unless given) drives this run only.
  so.insecure = true;
  rendezvous::LeaseOptions& lease = so.coordinator.lease;
  lease.heartbeat_interval = o.rdzv_conf.keep_alive_interval;
  lease.lease_timeout =
      o.rdzv_conf.keep_alive_interval * o.rdzv_conf.keep_alive_max_attempt;
  // Nodes of this one run only: a lost one is not coming back as itself
  // (a restarted `elastrun run` is a new node).
  lease.node_expiry = absl::Minutes(1);
  return so;
}

std::string RunPool(const std::string& run_id) {
  const std::string pool = absl::StrCat("run.", run_id);
  if (IsServiceName(pool)) return pool;
  // FNV-1a: the same on every node and every build.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : run_id) h = (h ^ c) * 1099511628211ull;
  return absl::StrCat("run.", absl::Hex(h, absl::kZeroPad16));
}

v1::JobSpec MultinodeJobSpec(const RunOptions& o, int nproc,
                             const std::vector<std::string>& argv) {
  v1::JobSpec spec;
  // The job id is "<name>-<n>"; a run id the service refuses as a name
  // (not [A-Za-z0-9._-]{1,64}) only changes that id, not the run's.
  spec.set_name(!o.run_id.empty() && IsServiceName(o.run_id) ? o.run_id : "run");
  if (o.external_rendezvous()) spec.set_pool(RunPool(o.run_id));
  // The workers' TORCHELASTIC_RUN_ID is the run's id, as under torchrun.
  spec.set_run_id(o.run_id);
  spec.set_min_nodes(o.nnodes.min);
  spec.set_max_nodes(o.nnodes.max);
  spec.set_nproc_per_node(nproc);
  spec.set_max_restarts(o.max_restarts);
  for (const std::string& a : argv) spec.add_argv(a);
  *spec.mutable_last_call_timeout() = rendezvous::ToProto(o.rdzv_conf.last_call_timeout);
  *spec.mutable_join_timeout() = rendezvous::ToProto(o.rdzv_conf.join_timeout);
  *spec.mutable_hang_timeout() = rendezvous::ToProto(o.hang_timeout.ToWire());
  spec.set_wait_for_nodes(true);
  return spec;
}

absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const RunOptions& o, const std::string& token) {
  const std::optional<bool> forced = o.rdzv_conf.is_host;
  if (forced == false || (!forced && !o.endpoint_is_this_host)) return nullptr;
  auto server = rendezvous::RendezvousServer::Create(EmbeddedServerOptions(o, token));
  if (!server.ok() && !forced && absl::IsUnavailable(server.status())) {
    return nullptr;  // another node of this host was first to bind the port
  }
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("cannot host the rendezvous at ", o.rdzv_endpoint,
                                     ": ", server.status().message()));
  }
  return server;
}

}  // namespace elastrun::launcher
