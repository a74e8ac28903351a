// The job records of the rendezvous service: every submitted job (spec,
// placement, its RendezvousCore once placed, its last progress), in
// submission order, and their persistence in the Store.
//
// Progress is kept off the hot path: a ReportProgress updates memory and
// writes its own small row (never the job record) at most every
// `progress_interval` per job; Flush() writes what is due from the timer,
// and every job-record write carries the newest progress too (so a job's
// end saves it). A failed progress write only delays that row: the job
// record is never touched by it, and the row is retried later.
#ifndef ELASTRUN_RENDEZVOUS_JOB_TABLE_H_
#define ELASTRUN_RENDEZVOUS_JOB_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "elastrun/v1/jobs.pb.h"
#include "rendezvous/core.h"
#include "rendezvous/outbox.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {

// The nodes holding slots for a job, in the order they were placed, with
// an index: each of a round's N JoinRounds asks whether its node is placed.
class PlacedNodes {
 public:
  using const_iterator = std::vector<std::string>::const_iterator;
  const_iterator begin() const { return order_.begin(); }
  const_iterator end() const { return order_.end(); }
  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }
  const std::vector<std::string>& list() const { return order_; }
  bool contains(absl::string_view node) const { return index_.contains(node); }
  // Adds `node` last; no-op when it is placed already.
  void push_back(const std::string& node) {
    if (index_.insert(node).second) order_.push_back(node);
  }
  void erase(const std::string& node) {
    if (index_.erase(node) == 0) return;
    order_.erase(std::find(order_.begin(), order_.end(), node));
  }
  void clear() {
    order_.clear();
    index_.clear();
  }

 private:
  std::vector<std::string> order_;
  absl::flat_hash_set<std::string> index_;
};

// One job as the service knows it.
struct JobRecord {
  std::string id;
  int64_t seq = 0;
  v1::JobSpec spec;  // with defaults filled in
  absl::Time submit_time;
  std::string request_id;  // SubmitRequest.request_id ("" when none)
  std::unique_ptr<RendezvousCore> core;  // null while queued
  PlacedNodes placed;                    // nodes holding slots for it
  std::optional<v1::Progress> last_progress;
  // Not persisted: why a queued job is not placed yet (set by each
  // placement pass; empty until the first one after a reload).
  std::string pending_reason;
  // Not persisted: which round each node was last asked to join, so a
  // reconcile does not repeat the command (repeats are harmless anyway).
  absl::flat_hash_map<std::string, int64_t> asked;
  // Not persisted: nodes that sent the job's last lines (PushLogs last).
  std::set<std::string> logs_done;
  // last_progress is newer than anything written; when it was last tried.
  bool progress_dirty = false;
  absl::Time progress_written = absl::InfinitePast();
  // Not persisted: set when the service restarts with this job RUNNING,
  // until every node of that round re-registered (or was lost): whether
  // its daemons still run the round (see Rounds::Restored).
  struct RestartCheck {
    int64_t round = 0;
    std::set<std::string> waiting;  // not heard from since the restart
    std::set<std::string> running;  // re-registered, running the round
    std::set<std::string> missing;  // re-registered without it, or lost
  };
  std::optional<RestartCheck> restart_check;
  // Not persisted: the record's last write failed (disk full, I/O error),
  // so memory is ahead of the store; retried from the timer with backoff
  // (JobTable::RetryUnsaved) and by the next event that writes the job.
  bool unsaved = false;
  absl::Time retry_at = absl::InfinitePast();
  absl::Duration retry_backoff;
  // The job's timeline, oldest first, at most kMaxJobEvents (job_events.h);
  // persisted with the record.
  std::deque<v1::JobEvent> events;
  // Not persisted, for the metrics (job_metrics.h): the highest step
  // reported in round `rate_round`, sampled at each report over the last
  // window, and when each round's first progress report came.
  int64_t rate_round = -1;
  std::deque<std::pair<absl::Time, int64_t>> step_samples;
  std::map<int64_t, absl::Time> progress_start;
  // Not persisted: the round whose ending failure was a hang (-1: none).
  int64_t hung_round = -1;
};

struct JobTableOptions {
  // At most one progress row write per job in this period; the newest
  // report of the period is written when it ends (Flush).
  absl::Duration progress_interval = absl::Seconds(2);
  // A failed job-record write is retried after this, doubling up to
  // `max_retry_backoff`.
  absl::Duration retry_backoff = absl::Milliseconds(100);
  absl::Duration max_retry_backoff = absl::Seconds(5);
};

// Not thread-safe: the Coordinator serializes calls under its mutex.
// Pointers to records stay valid for the table's lifetime.
class JobTable {
 public:
  // `store` is not owned and must outlive the table.
  JobTable(Store* store, JobTableOptions options) : store_(store), options_(options) {}

  // Rebuilds the records from the store's contents (placement is the
  // caller's to re-reserve). DataLoss naming the file and the job for a
  // stored core that does not restore.
  absl::Status Restore(const Store::Contents& contents);

  // Adds a job, durable before visible: a failed write adds nothing and is
  // returned. `spec` is valid and has its defaults; `request_id` (may be
  // empty) is kept with it for FindRequest.
  absl::StatusOr<JobRecord*> Submit(const v1::JobSpec& spec, absl::Time now,
                                    const std::string& request_id = "");
  // The job that `spec`'s owner submitted with `request_id`, or null (also
  // for an empty request_id).
  JobRecord* FindRequest(const v1::JobSpec& spec, const std::string& request_id) const;

  // NotFound naming the job.
  absl::StatusOr<JobRecord*> Find(const std::string& job_id);
  const std::vector<JobRecord*>& by_seq() const { return by_seq_; }

  // Writes the whole record (with its newest progress). A failure is
  // logged, kept in `out`, and marks the record unsaved: RetryUnsaved
  // writes it again later, so a job's end is never lost to a full disk.
  void Persist(Outbox& out, JobRecord& job);
  // Writes again every unsaved record whose retry is due at `now` (all of
  // them with absl::InfiniteFuture()); a record that fails again waits
  // twice as long, up to max_retry_backoff.
  void RetryUnsaved(Outbox& out, absl::Time now);
  // When the earliest unsaved record is due for a retry; nullopt if none.
  std::optional<absl::Time> NextRetry() const;
  // OK when the job's record is durable (trying an unsaved one once more
  // now), else the write's error (UNAVAILABLE for a full or failing disk):
  // what an RPC that changed the job must return, so that its caller does
  // not take an unwritten change as done and retries.
  absl::Status EnsureSaved(Outbox& out, JobRecord& job);

  // Records `progress` (its time set to `now` when missing). Writes the
  // progress row only when the job's last one is older than the interval.
  // InvalidArgument for too many metrics.
  absl::Status ReportProgress(Outbox& out, JobRecord& job, v1::Progress progress,
                              absl::Time now);
  // Writes every progress row that is due at `now` (or all pending ones
  // when `all`, at shutdown).
  void FlushProgress(Outbox& out, absl::Time now, bool all = false);
  // When the earliest pending progress row is due; nullopt if none.
  std::optional<absl::Time> NextProgressFlush() const;

  // One page of jobs in submission order (paging.h); the page token is the
  // last seq of the previous page, so jobs submitted meanwhile come later.
  // InvalidArgument for a negative page size or a token not made here.
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& request) const;

 private:
  void WriteProgress(Outbox& out, JobRecord& job, absl::Time now);
  // The record's write, without the unsaved bookkeeping.
  absl::Status Write(const JobRecord& job);

  Store* const store_;
  const JobTableOptions options_;
  std::map<std::string, std::unique_ptr<JobRecord>> jobs_;
  std::vector<JobRecord*> by_seq_;  // submission order
  // "<owner uid>/<request_id>" -> its job, for jobs submitted with one.
  std::map<std::string, JobRecord*> by_request_;
  std::set<JobRecord*> dirty_;      // progress_dirty, for the timer
  std::set<JobRecord*> unsaved_;    // JobRecord::unsaved, for the timer
  int64_t next_seq_ = 1;
};

// The public status of a job: state, phase, rounds, nodes, progress;
// `with_history` adds every round's record.
v1::JobStatus JobStatusOf(const JobRecord& job, bool with_history);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_JOB_TABLE_H_
