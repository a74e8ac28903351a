// A tiny HTTP/1.1 server for Prometheus scrapes: GET /metrics answers the
// registry's text (Content-Type: text/plain; version=0.0.4), anything else
// 404 (405 for a method other than GET/HEAD). One thread polls the listening
// socket and the connections; each connection serves one request and is
// closed ("Connection: close"), and one that sends no whole request within
// the idle timeout is closed too, so a silent client holds nothing for long.
#ifndef ELASTRUN_COMMON_METRICS_SERVER_H_
#define ELASTRUN_COMMON_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"

namespace elastrun::metrics {

struct MetricsServerOptions {
  // "HOST:PORT" ("[v6]:PORT"); port 0 picks a free port.
  std::string listen = "127.0.0.1:0";
  // A connection without a whole request this long after it opened (or
  // whose answer cannot be written in this time) is closed.
  absl::Duration idle_timeout = absl::Seconds(10);
  // Connections served at once; more wait in the listen backlog.
  int max_connections = 64;
};

// Thread-safe to destroy from any thread; the destructor stops the thread
// and closes every socket.
class MetricsServer {
 public:
  // Binds and starts serving `registry` (not owned; must outlive the
  // server). InvalidArgument for a bad address, Unavailable when it cannot
  // be bound (naming it and why).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Create(MetricsServerOptions options,
                                                               const Registry* registry);
  ~MetricsServer();

  // The bound address with the chosen port: "HOST:PORT".
  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  MetricsServer(MetricsServerOptions options, const Registry* registry, int listen_fd,
                int wake_fd);
  void Loop();

  const MetricsServerOptions options_;
  const Registry* const registry_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: written by the destructor to stop Loop
  std::string address_;
  int port_ = 0;
  std::thread thread_;
};

// Builds the answer to one HTTP request head (for tests and the server):
// status line, headers and body.
std::string HttpAnswer(const std::string& request_head, const Registry& registry);

}  // namespace elastrun::metrics

#endif  // ELASTRUN_COMMON_METRICS_SERVER_H_
