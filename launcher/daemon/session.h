// The daemon's connection to the rendezvous service: register, keep the
// lease with heartbeats, hold the Watch stream and feed its commands to the
// Daemon; when the service is away, reconnect with a capped backoff and
// re-register with the same incarnation and the attempts still running, so
// healthy workers go on.
//
// Threads: Run() is the session loop (register, Watch, commands); a second
// thread heartbeats while a stream is open. Stop() may be called from any
// thread.
#ifndef ELASTRUN_LAUNCHER_DAEMON_SESSION_H_
#define ELASTRUN_LAUNCHER_DAEMON_SESSION_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/daemon.h"

namespace elastrun::launcher {

struct SessionOptions {
  std::string node_id;
  // Unique per daemon start; kept across reconnects.
  std::string incarnation;
  std::string addr;  // advertised address (MASTER_ADDR when rank 0)
  int slots = 1;
  std::map<std::string, std::string> labels;
  // RegisterNodeRequest.pool: only that pool's jobs are placed here; empty:
  // the default pool.
  std::string pool;
  // Reconnect backoff: doubles from `initial_backoff` up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
};

// The RegisterNode request of `options` with the attempts still `running`.
v1::RegisterNodeRequest RegisterRequest(const SessionOptions& options,
                                        const std::vector<v1::RunningAttempt>& running);

// A daemon's first registration, made before it starts anything (agent,
// sockets, snapshot clean-up), so that a second daemon with a node id in
// use touches nothing of the first's. Retries with the options' backoff
// while the service cannot be reached; `wait(d)` waits d and returns false
// when the daemon is being stopped. Returns OK once registered (the
// session's Run then re-registers the same incarnation, a reconnect);
// AlreadyExists when another live daemon holds the node id; the
// refusals of Run (InvalidArgument, Unauthenticated); Cancelled when `wait`
// said stop.
absl::Status ClaimNodeId(const SessionOptions& options, RendezvousClient* client,
                         const std::function<bool(absl::Duration)>& wait);

class DaemonSession {
 public:
  // Not owned; both must outlive the session.
  DaemonSession(SessionOptions options, RendezvousClient* client, Daemon* daemon);

  // Runs until Stop(). Returns an error only for a refusal that retrying
  // cannot fix (INVALID_ARGUMENT: a bad node id, address, slots or label;
  // UNAUTHENTICATED: a wrong or missing token; ALREADY_EXISTS: another live
  // daemon holds the node id, at this session's first registration).
  // ALREADY_EXISTS on a later registration (the id was taken while this
  // daemon was away) stops this node's attempts, whose rounds the service
  // ended when it lost the node, and retries with backoff.
  absl::Status Run();

  // Ends Run(): cancels the stream and the backoff wait. Idempotent.
  void Stop();

  // Whether a Watch stream is open (for tests and logs).
  bool connected() const;

 private:
  // How a Watch stream ended, and how long it had been open.
  struct StreamEnd {
    absl::Status status;
    absl::Duration lasted;
  };

  bool IsStopped() const ABSL_LOCKS_EXCLUDED(mu_);

  // Another daemon took the node id while this one was away: stops every
  // attempt of this node (their ends are not reported).
  void StopAttempts(const absl::Status& why);

  // Waits `*backoff` unless stopped, then doubles it up to max_backoff.
  // Returns false when stopped.
  bool WaitBackoff(absl::Duration* backoff) ABSL_LOCKS_EXCLUDED(mu_);

  // Registers the node with the attempts it still runs. Returns the
  // service's answer, or the RPC's error.
  absl::StatusOr<v1::RegisterNodeResponse> Register();

  // Opens a Watch stream and feeds its commands to the Daemon, heartbeating
  // every `interval` beside it, until the stream ends.
  StreamEnd Serve(absl::Duration interval, absl::Duration lease) ABSL_LOCKS_EXCLUDED(mu_);

  // Heartbeats every `interval` until the stream `generation` ends; cancels
  // the stream when the service no longer knows the node or cannot be
  // reached for `lease`.
  void HeartbeatLoop(uint64_t generation, absl::Duration interval, absl::Duration lease);

  const SessionOptions options_;
  RendezvousClient* const client_;
  Daemon* const daemon_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped when a stream ends, so its heartbeat thread exits.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  WatchStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open one, if any
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_SESSION_H_
