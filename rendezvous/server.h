// The gRPC face of the rendezvous service: the Rendezvous and Jobs services
// (callback API) over one Coordinator, the listening socket, caller checks
// (caller.h: the token, user credentials, job owners), the timer thread that
// fires leases and round deadlines, gRPC's standard health service
// (grpc.health.v1.Health, no token needed: load balancers and probes call
// it), and the optional Prometheus endpoint.
#ifndef ELASTRUN_RENDEZVOUS_SERVER_H_
#define ELASTRUN_RENDEZVOUS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics_server.h"
#include "common/strings.h"
#include "common/tls.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/log_store.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace elastrun::rendezvous {

struct ServerOptions {
  // "HOST:PORT" ("[v6]:PORT" for IPv6); port 0 picks a free port.
  std::string listen = "127.0.0.1:29400";
  // The cluster token (rendezvous/caller.h): callers carry it as
  // "authorization: Bearer <token>", or a credential signed with it.
  // Empty: no check, every caller counts as holding the token; allowed only
  // on a loopback address, and used only by in-process tests
  // (elastrun-rendezvous always has a token: flag, or its token file).
  std::string token;
  // TLS (cert+key) or mutual TLS (and ca); all empty: plaintext. TLS does
  // not lift the token rule above.
  tls::TlsFiles tls;
  // Serve plaintext on a non-loopback `listen` (--insecure): the token
  // then travels in clear. Refused without it (CheckListenSecurity).
  bool insecure = false;
  CoordinatorOptions coordinator;
  // SQLite file keeping the worker-log tail (LogStore) so `elastrun logs`
  // works after a restart; empty: logs in memory only.
  std::string logs_path;
  // Opens the log store instead of logs_path when set (etcd: etcd_store.h).
  std::function<absl::StatusOr<std::unique_ptr<LogDb>>()> open_logs;
  // Jobs whose logs the service keeps (LogStore::Options::max_jobs); live
  // jobs' logs are kept beyond it.
  size_t logs_max_jobs = 256;
  // "HOST:PORT" of the Prometheus endpoint (GET /metrics); empty: none.
  // Port 0 picks a free port (see metrics_address()).
  std::string metrics_listen;
  // Fire timers from a thread that waits on the clock's deadlines (in real
  // time). Tests with a FakeClock turn it off and call Tick() themselves.
  bool timer_thread = true;
};

// OK, or InvalidArgument naming the fix: a non-loopback `listen` needs a
// token, and TLS (`tls.cert`) unless `insecure`: in plaintext the token,
// which is root on every root daemon, travels in clear.
absl::Status CheckListenSecurity(const ServerOptions& options);

// Thread-safe. Destruction shuts down (Shutdown()).
class RendezvousServer {
 public:
  // Builds the coordinator (reloading state) and starts serving. Errors: a
  // bad listen address or missing token, TLS files that are missing or
  // wrong (tls::MakeServerCredentials; InvalidArgument), a port that
  // cannot be bound (Unavailable), the Coordinator's errors.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Create(ServerOptions options);
  ~RendezvousServer();

  // The bound address, with the chosen port: "HOST:PORT".
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  Coordinator& coordinator() { return *coordinator_; }
  // The bound metrics address "HOST:PORT"; empty without metrics_listen.
  std::string metrics_address() const {
    return metrics_server_ ? metrics_server_->address() : "";
  }

  // Fires due timers now (what the timer thread does). For tests.
  void Tick() { coordinator_->Tick(); }

  // Stops accepting calls, ends streams (daemons reconnect to the next
  // service), joins the timer thread. Idempotent.
  void Shutdown();
  // Blocks until a Shutdown() (from another thread) completed.
  void Wait();

 private:
  class RendezvousService;
  class JobsService;

  explicit RendezvousServer(ServerOptions options);
  void TimerLoop();
  void WakeTimer();

  ServerOptions options_;
  std::string address_;
  int port_ = 0;
  std::unique_ptr<Coordinator> coordinator_;  // outlives the services/server
  LogStore logs_;  // worker output pushed by daemons, for `elastrun logs`
  std::unique_ptr<RendezvousService> rendezvous_service_;
  std::unique_ptr<JobsService> jobs_service_;
  std::unique_ptr<grpc::Server> server_;
  // After coordinator_: destroyed first, as it renders the coordinator's
  // metrics.
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  std::thread timer_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // Shutdown() completed
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_SERVER_H_
