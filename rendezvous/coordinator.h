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
#include <set>
#include <string>
#include <vector>

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
#include "rendezvous/node_writes.h"
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
  // Opens the store instead of state_path when set (etcd: etcd_store.h).
  std::function<absl::StatusOr<std::unique_ptr<Store>>()> open_store;
  // At most this many nodes, alive or lost, are kept (> 0). A registration
  // of a new node id beyond it makes room by forgetting the node lost
  // longest, or, when none is lost, is refused (ResourceExhausted): it
  // bounds what a flood of fresh node ids can make the service hold
  // before --node-expiry clears it. 50,000 is above the largest clusters
  // while a full registry of typical nodes is some 10 MB.
  int max_nodes = 50000;
  // How progress reports are persisted (at most one small write per job
  // per interval; never the job record).
  JobTableOptions jobs;
  // Called (outside any lock) after a change that may move the next timer
  // deadline, so a timer thread can wake up and call Tick(). May be empty.
  std::function<void()> on_timers_changed;
};

// Thread-safe: one mutex guards all state; commands, stream closes and
// barrier completions run after it is released. Store writes happen under
// it (local disk writes, or one etcd transaction each); progress reports write at most
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
  // Whether job `job_id` is known and not finished (queued or running).
  bool JobLive(const std::string& job_id);
  // Node `node_id` sent job `job_id`'s last lines (PushLogsRequest.last).
  void LogsDone(const std::string& job_id, const std::string& node_id);
  // One page of jobs, oldest first (paging.h). InvalidArgument for a
  // negative page size or a page token this service did not make.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& r);
  absl::StatusOr<v1::JobStatus> CancelJob(const v1::CancelJobRequest& r);
  // One page of nodes by id (paging.h). InvalidArgument for a negative page
  // size.
  absl::StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& r = {});
  // Drains the node (r.undo: un-drains it, and queued jobs may be placed
  // on it at once); returns it. Its running jobs go on. NotFound for an
  // unknown node; a failed state write changes nothing and is returned.
  absl::StatusOr<v1::NodeInfo> DrainNode(const v1::NodeRequest& r);
  // Forgets the node and closes its Watch stream (a daemon still running
  // registers again as a fresh node); returns the node as it was.
  // NotFound for an unknown node; FailedPrecondition naming the jobs that
  // hold its slots, unless r.force: then it is lost for those jobs first.
  absl::StatusOr<v1::NodeInfo> RemoveNode(const v1::NodeRequest& r);
  // The job's timeline, oldest first. NotFound for an unknown job.
  absl::StatusOr<v1::EventsResponse> Events(const v1::EventsRequest& r);

  // --- Timers ---
  // Fires everything due at the clock's now (lease expiries, lost nodes'
  // expiry, last calls, join timeouts, pending progress writes) and
  // returns the next deadline, if any.
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
  // Removes the nodes from the registry and the store (their jobs are
  // released already).
  void ForgetNodes(Outbox& out, const std::vector<std::string>& node_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before registering `node_id`: OK when it is known or there is room;
  // else forgets the node lost longest, or ResourceExhausted when none is.
  absl::Status MakeRoomFor(Outbox& out, const std::string& node_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the LOST nodes whose expiry is due at `now`.
  void ExpireLostNodes(Outbox& out, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::NodeInfo NodeInfoOf(const NodeRecord& n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's record is durable, or the error an RPC that changed it must
  // return (see JobTable::EnsureSaved). OK for an unknown job.
  absl::Status JobSaved(Outbox& out, const std::string& job_id)
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
  NodeWrites node_writes_ ABSL_GUARDED_BY(mu_);
  Rounds rounds_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_COORDINATOR_H_
