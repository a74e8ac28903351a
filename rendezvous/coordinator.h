// The rendezvous service's logic, free of gRPC: a thin facade that the gRPC
// layer (server.h) calls, one method per RPC. It takes its one mutex,
// delegates to the part that owns the concern, and runs the collected
// Outbox (commands, stream closes, barrier completions) after releasing it:
//   NodeRegistry (registry.h)  nodes, slots, leases
//   NodeStreams (node_streams.h)  each node's Watch stream
//   JobTable (job_table.h)     job records, their persistence, progress
//   Rounds (rounds.h)          placement, each job's core, joins, reports
//   BarrierTable (barriers.h)  named barriers of running rounds
// Worker logs are not here: the server keeps them in a LogStore.
//
// Commands are idempotent and keyed by (job, round), and a node that
// (re)attaches its stream is sent everything it must be doing now, so a
// command dropped because the node had no stream is never lost for good.
#ifndef ELASTRUN_RENDEZVOUS_COORDINATOR_H_
#define ELASTRUN_RENDEZVOUS_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "elastrun/v1/jobs.pb.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/barriers.h"
#include "rendezvous/job_metrics.h"
#include "rendezvous/job_table.h"
#include "rendezvous/node_streams.h"
#include "rendezvous/outbox.h"
#include "rendezvous/registry.h"
#include "rendezvous/rounds.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {

struct CoordinatorOptions {
  // Time source for leases and rounds; not owned, must outlive the
  // Coordinator.
  Clock* clock = &RealClock();
  LeaseOptions lease;
  // The SQLite file; empty: state lives in memory only (tests, `--state-dir`
  // not given).
  std::string state_path;
  // How progress reports are persisted (at most one small write per job
  // per interval; never the job record).
  JobTableOptions jobs;
  // Called (outside any lock) after a change that may move the next timer
  // deadline, so a timer thread can wake up and call Tick(). May be empty.
  std::function<void()> on_timers_changed;
};

// Thread-safe: one mutex guards all state; commands, stream closes and
// barrier completions run after it is released. Store writes happen under
// it (they are local disk writes, not RPCs); progress reports write at most
// one small row per job per interval.
class Coordinator {
 public:
  // Opens the store and reloads nodes and jobs. Errors: bad lease options
  // (InvalidArgument), an unreadable or damaged state file (the Store's
  // errors, naming the file), a stored job the core refuses (DataLoss
  // naming the file and the job).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options);
  ~Coordinator();

  // --- Rendezvous (daemons) ---
  absl::StatusOr<v1::RegisterNodeResponse> RegisterNode(const v1::RegisterNodeRequest& r);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& r);
  // Makes `stream` the node's Watch stream (closing an older one, which is
  // not a node loss) and sends Welcome plus everything the node must be
  // doing. NotFound / FailedPrecondition as Heartbeat.
  absl::Status AttachWatch(const v1::WatchRequest& r, std::shared_ptr<NodeStream> stream);
  // The stream ended. If it is still the node's stream and the service is
  // not shutting down, the node is lost at once.
  void DetachWatch(const std::string& node_id, const NodeStream* stream);
  absl::StatusOr<v1::JoinRoundResponse> JoinRound(const v1::JoinRoundRequest& r);
  absl::Status ReportExit(const v1::ReportExitRequest& r);
  // Keeps the newest progress of the job in memory; persisted as its own
  // small row at most every jobs.progress_interval (see JobTable).
  // NotFound for an unknown job, InvalidArgument for too many metrics.
  absl::Status ReportProgress(const v1::ReportProgressRequest& r);

  // Arrives at a barrier. `done` is called exactly once, outside the lock,
  // possibly before Barrier returns: OK when every node of the round arrived,
  // ABORTED when the round ends first, UNAVAILABLE at shutdown, CANCELLED
  // after AbandonBarrier, or the request's error. Returns a waiter id for
  // AbandonBarrier (0 when `done` already ran).
  using BarrierDone = rendezvous::BarrierDone;
  uint64_t Barrier(const v1::BarrierRequest& r, BarrierDone done);
  // The caller gave up waiting (RPC cancelled): `done` runs with CANCELLED
  // unless it already ran. The arrival itself stays counted.
  void AbandonBarrier(uint64_t waiter_id);

  // --- Jobs (CLI) ---
  absl::StatusOr<v1::SubmitResponse> Submit(const v1::SubmitRequest& r);
  absl::StatusOr<v1::JobStatus> GetJob(const v1::GetJobRequest& r);
  v1::ListJobsResponse ListJobs(const v1::ListJobsRequest& r);
  absl::StatusOr<v1::JobStatus> CancelJob(const v1::CancelJobRequest& r);
  v1::ListNodesResponse ListNodes();
  // The job's timeline, oldest first. NotFound for an unknown job.
  absl::StatusOr<v1::EventsResponse> Events(const v1::EventsRequest& r);

  // --- Timers ---
  // Fires everything due at the clock's now (lease expiries, last calls,
  // join timeouts, pending progress writes) and returns the next deadline,
  // if any.
  std::optional<absl::Time> Tick();

  // From now on a closing stream is not a node loss (the service stops, the
  // daemons will reconnect to the next one): writes pending progress,
  // closes every stream and fails every barrier wait with UNAVAILABLE.
  // Idempotent.
  void Shutdown();

  const LeaseOptions& lease_options() const { return options_.lease; }
  // The service's metrics (job_metrics.h, README "Metrics"): round
  // counters, and jobs and nodes computed at each render. Thread-safe.
  metrics::Registry& metrics() { return metrics_; }
  // Rows written to the store so far, for tests.
  Store::Writes store_writes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delivers `out` and signals that timers may have moved.
  void Flush(Outbox& out) ABSL_LOCKS_EXCLUDED(mu_);
  void NodeLost(Outbox& out, const std::string& node_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistNode(Outbox& out, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Barrier's checks and arrival; `done` is kept only when it must wait.
  absl::StatusOr<uint64_t> Arrive(Outbox& out, const v1::BarrierRequest& r,
                                  BarrierDone& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The families computed at scrape time: jobs, nodes, per-job rates.
  std::vector<metrics::Family> CollectMetrics() ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  Clock& clock_;
  // Thread-safe themselves; declared before rounds_, which updates them.
  metrics::Registry metrics_;
  ServiceMetrics service_metrics_{metrics_};

  mutable absl::Mutex mu_;
  std::unique_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  NodeRegistry registry_ ABSL_GUARDED_BY(mu_);
  NodeStreams streams_ ABSL_GUARDED_BY(mu_);
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  BarrierTable barriers_ ABSL_GUARDED_BY(mu_);
  Rounds rounds_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_COORDINATOR_H_
