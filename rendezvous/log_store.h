// The service's buffer of worker output for `elastrun logs`: per job, the
// newest chunks up to a byte bound (oldest dropped first), each with a
// sequence number increasing per job, so a reader can resume after the last
// chunk it saw. In memory, and, once Persist() gave it a LogDb (a service
// with --state-dir), also on disk: a chunk is acknowledged (Append's `done`)
// and shown to readers only once the transaction holding it committed, so
// what a daemon was told is stored, or a follower saw, survives a SIGKILL
// of the service (SQLite's WAL commit, without fsync: not an OS crash).
// One writer thread commits (group commit): a waiting Append wakes it at
// once, and the Appends that arrive while it writes share its next
// transaction. A restarted service reloads the logs and numbers new chunks
// above the stored ones. Logs also stay in files on each node.
//
// No chunk is stored twice: a push names its sender (the daemon's node id
// and incarnation) and its chunks' numbers in that incarnation, and the
// store keeps, per job and node, the highest number stored, in the same
// transaction as the chunks. A service killed after a commit but before
// its answer reached the daemon gets those chunks again from it, after its
// restart, and skips them. (An older daemon's pushes carry no numbers and
// are stored as they come.)
//
// Thread-safe.
#ifndef ELASTRUN_RENDEZVOUS_LOG_STORE_H_
#define ELASTRUN_RENDEZVOUS_LOG_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "elastrun/v1/types.pb.h"
#include "rendezvous/log_db.h"

namespace elastrun::rendezvous {

class LogStore {
 public:
  struct Options {
    // Bytes of output kept per job; older chunks are dropped.
    size_t max_bytes_per_job = 8 << 20;
    // Jobs whose logs are kept; beyond it the oldest job's log goes, but
    // never one that `keep` holds (a live job's: its log may exceed the
    // bound rather).
    size_t max_jobs = 256;
    std::function<bool(const std::string& job_id)> keep;
    // Every job's first chunk's seq. The service starts it at its start
    // time in microseconds, so a restarted service (whose store starts
    // empty) numbers above what a follower (`logs -f`) saw from the one
    // before, and the follower's next read gets the new chunks.
    int64_t first_seq = 1;
    // With a LogDb: the writer retries deletions (trims, evicted jobs) a
    // failed write left this often; chunks are written as soon as they come.
    absl::Duration flush_interval = absl::Milliseconds(200);
  };
  LogStore() : LogStore(Options{}) {}
  explicit LogStore(Options options) : options_(options) {}
  ~LogStore() { Close(); }
  LogStore(const LogStore&) = delete;
  LogStore& operator=(const LogStore&) = delete;

  // Loads what `db` holds (each job's chunks, bounded as in memory; new
  // chunks of a job are numbered above its stored ones, and at least from
  // first_seq) and keeps the logs there from now on. Call once, before any
  // Append or Read. Errors: the db's Load errors (nothing changes).
  absl::Status Persist(std::unique_ptr<LogDb> db);
  // Writes what is pending now, with the deletions an earlier failed write
  // left, and returns the write's status. OK without a db. For shutdown and
  // tests.
  absl::Status Flush();
  // Stops the writer thread after a last Flush; later Appends are refused
  // (Unavailable). Idempotent.
  void Close();

  // Who sent an Append's chunks and their numbers (PushLogsRequest).
  struct Origin {
    std::string node_id;
    // The daemon's incarnation. Empty: the chunks are not numbered (an
    // older daemon) and are stored as new.
    std::string incarnation;
    // The number of the first chunk in that incarnation; the others follow
    // it. 0: not numbered.
    int64_t first_chunk = 0;
  };
  // Called once with the outcome of an Append.
  using Done = std::function<void(absl::Status)>;
  // Appends chunks of `job_id` (their seq is assigned here) and calls `done`
  // once they are stored: without a db at once, before Append returns; with
  // one once the transaction holding them committed (readers see them only
  // then), from the thread that wrote it (the writer's, or a Flush or
  // Close caller's). `done` gets Unavailable when that write failed (a full
  // disk: the chunks are dropped here, and the sender, told so, may send
  // them again without duplicating them) or the store is closed. `done`
  // runs with no lock of the store held.
  //
  // With a numbered `from`, chunks at or below the highest number stored of
  // its node and incarnation in this job are skipped (a resend: they are
  // stored) and the rest appended; `done` gets OK at once when nothing is
  // new. Unavailable (send again) while an earlier push of some of them
  // waits for its commit, which may still fail. Relies on what a daemon's
  // forwarder does: one push at a time, numbers increasing. A node's newer
  // incarnation replaces its older one's number in the job.
  void Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks,
              const Origin& from, Done done);
  // Unnumbered chunks: stored as new.
  void Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks,
              Done done) {
    Append(job_id, chunks, Origin{}, std::move(done));
  }
  // Append that waits for `done` and returns its status.
  absl::Status Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks,
                      const Origin& from);
  absl::Status Append(const std::string& job_id, const std::vector<v1::LogChunk>& chunks) {
    return Append(job_id, chunks, Origin{});
  }

  struct ReadResult {
    std::vector<v1::LogChunk> chunks;
    // Chunks after the reader's position were dropped before it read them
    // (the byte bound). Not known for what was dropped before a restart.
    bool dropped = false;
    // The job's log was evicted (the jobs bound): nothing of it is kept.
    bool evicted = false;
  };
  // Chunks of `job_id` with seq > `after_seq`, of `rank` (-1: all), at most
  // `max_bytes` of data (at least one chunk when any is there).
  ReadResult Read(const std::string& job_id, int64_t after_seq, int rank,
                  size_t max_bytes) const;

 private:
  struct JobLog {
    std::deque<v1::LogChunk> chunks;
    size_t bytes = 0;
    int64_t next_seq = 0;  // Set to Options::first_seq when the job's log is made.
    // Readers see chunks up to this seq: those committed (all, without a db).
    int64_t visible_seq = 0;
    int64_t created = 0;  // tells a job's log from a later one of the same id
    int64_t dropped_through = 0;  // the newest seq the byte bound dropped
    // Per node id: its newest incarnation's highest chunk number committed
    // (`stored`) and taken (`taken`: stored, or in a write under way).
    struct Mark {
      std::string incarnation;
      int64_t stored = 0;
      int64_t taken = 0;
    };
    std::map<std::string, Mark> senders;
  };
  // The chunks of one job in a batch: seqs [first, last] (none when
  // last < first) of its log `created`, and the senders' numbers.
  struct Span {
    int64_t created = 0;
    int64_t first = 0;
    int64_t last = -1;
    std::map<std::string, LogDb::Sender> senders;
  };
  // What the writer's next transaction holds.
  struct Pending {
    LogDb::Batch batch;
    std::map<std::string, Span> spans;
    std::vector<Done> waiters;
  };
  void WriterLoop();
  // How many of the `n` chunks `from` sends to `log` lead with numbers
  // already stored; Unavailable while some of them wait for a commit.
  absl::StatusOr<size_t> StoredLocked(const JobLog& log, const Origin& from, size_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the chunks after the first `skip`, and notes `from`'s numbers.
  void AddLocked(const std::string& job_id, JobLog& log,
                 const std::vector<v1::LogChunk>& chunks, size_t skip, const Origin& from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's Span in the pending batch, made for `log` if it has none.
  Span& PendingSpanLocked(const std::string& job_id, const JobLog& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts the oldest job's log to make room for a new one.
  void EvictOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job's oldest chunks while over the byte bound.
  void TrimLocked(const std::string& job_id, JobLog& log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a write of `spans`: shows their chunks (committed) or drops them
  // (the write failed).
  void SettleLocked(const std::map<std::string, Span>& spans, bool committed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, JobLog> jobs_ ABSL_GUARDED_BY(mu_);
  // Jobs whose logs were evicted, the newest kEvictedKept, oldest first.
  std::deque<std::string> evicted_ ABSL_GUARDED_BY(mu_);
  int64_t jobs_created_ ABSL_GUARDED_BY(mu_) = 0;
  // Persistence (after Persist): what changed since the last batch.
  bool persisting_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  Pending pending_ ABSL_GUARDED_BY(mu_);
  // Serializes writes (the writer thread, Flush, Close); taken before mu_.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<LogDb> db_ ABSL_GUARDED_BY(write_mu_);
  // The deletions (trims, evicted jobs) of a batch whose write failed.
  LogDb::Batch carry_ ABSL_GUARDED_BY(write_mu_);
  std::thread writer_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_LOG_STORE_H_
