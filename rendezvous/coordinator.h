// The rendezvous service's logic, free of gRPC: the node registry, the job
// queue and placement, one RendezvousCore per job, barriers, the persisted
// state, and the commands pushed to nodes. The gRPC layer (server.h) is a
// thin adapter that calls one method per RPC.
//
// Commands reach nodes through NodeStream (a node's open Watch stream). They
// are idempotent and keyed by (job, round), and a node that (re)attaches its
// stream is sent everything it must be doing now, so a command dropped
// because the node had no stream is never lost for good.
#ifndef ELASTRUN_RENDEZVOUS_COORDINATOR_H_
#define ELASTRUN_RENDEZVOUS_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "elastrun/v1/jobs.pb.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/core.h"
#include "rendezvous/registry.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {

// The sending end of one node's Watch stream. Implementations must be
// thread-safe and must not block on the network or call back into the
// Coordinator.
class NodeStream {
 public:
  virtual ~NodeStream() = default;
  // Queues `command` (its seq is set by the stream). No-op once closed.
  virtual void Send(v1::Command command) = 0;
  // Ends the stream with `status`. No-op once closed.
  virtual void Close(absl::Status status) = 0;
};

struct CoordinatorOptions {
  // Time source for leases and rounds; not owned, must outlive the
  // Coordinator.
  Clock* clock = &RealClock();
  LeaseOptions lease;
  // The SQLite file; empty: state lives in memory only (tests, `--state-dir`
  // not given).
  std::string state_path;
  // Called (outside any lock) after a change that may move the next timer
  // deadline, so a timer thread can wake up and call Tick(). May be empty.
  std::function<void()> on_timers_changed;
};

// Thread-safe: one mutex guards all state; commands, stream closes and
// barrier completions run after it is released. Store writes happen under
// it (they are local disk writes, not RPCs).
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
  absl::Status ReportProgress(const v1::ReportProgressRequest& r);

  // Arrives at a barrier. `done` is called exactly once, outside the lock,
  // possibly before Barrier returns: OK when every node of the round arrived,
  // ABORTED when the round ends first, UNAVAILABLE at shutdown, CANCELLED
  // after AbandonBarrier, or the request's error. Returns a waiter id for
  // AbandonBarrier (0 when `done` already ran).
  using BarrierDone = std::function<void(absl::Status)>;
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

  // --- Timers ---
  // Fires everything due at the clock's now (lease expiries, last calls,
  // join timeouts) and returns the next deadline, if any.
  std::optional<absl::Time> Tick();

  // From now on a closing stream is not a node loss (the service stops, the
  // daemons will reconnect to the next one): closes every stream and fails
  // every barrier wait with UNAVAILABLE. Idempotent.
  void Shutdown();

  const LeaseOptions& lease_options() const { return options_.lease; }

 private:
  struct BarrierState {
    std::set<std::string> arrived;
    bool complete = false;
    std::vector<uint64_t> waiters;
  };
  struct Job {
    std::string id;
    int64_t seq = 0;
    v1::JobSpec spec;  // with defaults filled in
    absl::Time submit_time;
    std::unique_ptr<RendezvousCore> core;  // null while queued
    std::vector<std::string> placed;       // nodes holding slots for it
    std::optional<v1::Progress> last_progress;
    // Not persisted: which round each node was last asked to join, so a
    // reconcile does not repeat the command (repeats are harmless anyway).
    absl::flat_hash_map<std::string, int64_t> asked;
    int64_t barrier_round = -1;  // round of `barriers`
    std::map<std::string, BarrierState> barriers;
  };
  // Work collected under the lock and done after releasing it.
  struct Outbox {
    std::vector<std::pair<std::shared_ptr<NodeStream>, v1::Command>> sends;
    std::vector<std::pair<std::shared_ptr<NodeStream>, absl::Status>> closes;
    std::vector<std::pair<BarrierDone, absl::Status>> dones;
    absl::Status store_status;  // the first failed write, if any
  };

  Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store);
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Flush(Outbox& out) ABSL_LOCKS_EXCLUDED(mu_);

  // Commands and streams.
  void Send(Outbox& out, const std::string& node_id, v1::Command command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resync(Outbox& out, const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the job's placed nodes that are not in the open round to join it.
  void Reconcile(Outbox& out, Job& job, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Command JoinCommand(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The StartAttempt of round `a` without node entries; ForNode() makes a
  // node's copy carrying only that node's own entry.
  v1::Command StartCommand(const Job& job, const RoundAssignment& a) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static v1::Command ForNode(const v1::Command& start, const RoundAssignment& a,
                             const std::string& node_id);

  // Rounds and membership.
  void HandleEvents(Outbox& out, Job& job, const std::vector<Event>& events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TickJob(Outbox& out, Job& job, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NodeLost(Outbox& out, const std::string& node_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unplace(Job& job, const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places queued jobs (FIFO) and grows running jobs below max_nodes.
  void Schedule(Outbox& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortBarriers(Outbox& out, Job& job, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lookups and views.
  absl::StatusOr<Job*> FindJob(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus Status(const Job& job, bool with_history) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Persistence (write-through). Failures are logged and kept in `out`.
  void PersistJob(Outbox& out, const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistNode(Outbox& out, const std::string& node_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock& clock_;

  mutable absl::Mutex mu_;
  std::unique_ptr<Store> store_ ABSL_GUARDED_BY(mu_);
  NodeRegistry registry_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<Job*> by_seq_ ABSL_GUARDED_BY(mu_);  // submission order
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Shared with the gRPC reactor that owns the stream's lifetime: the
  // reactor may end while a command for it is in an Outbox.
  std::map<std::string, std::shared_ptr<NodeStream>> streams_ ABSL_GUARDED_BY(mu_);
  // Barrier waiters by id: (job id, done).
  std::map<uint64_t, std::pair<std::string, BarrierDone>> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_COORDINATOR_H_
