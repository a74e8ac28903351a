// Durable storage of the service's worker-log tail (LogStore): one SQLite
// file beside the state database, so that `elastrun logs` still shows a
// job's output after a service restart. A file of its own, written by the
// LogStore's writer thread: log traffic never delays a state write (only
// the checks of a push and of an eviction read the coordinator).
#ifndef ELASTRUN_RENDEZVOUS_LOG_DB_H_
#define ELASTRUN_RENDEZVOUS_LOG_DB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "elastrun/v1/types.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace elastrun::rendezvous {

// Where the worker-log tail is kept: SQLite beside the state database
// (SqliteLogDb, below) or etcd (etcd_store.h). Not thread-safe: one writer
// at a time (the LogStore's).
class LogDb {
 public:
  // SqliteLogDb::Open.
  static absl::StatusOr<std::unique_ptr<LogDb>> Open(const std::string& path,
                                                     int64_t keep_free = -1);
  virtual ~LogDb() = default;

  // Where a node's pushes to a job stand: the daemon incarnation that sent
  // them and the highest chunk number of it stored (PushLogsRequest).
  struct Sender {
    std::string incarnation;
    int64_t chunk = 0;
  };
  // Per job, per node id.
  using Senders = std::map<std::string, std::map<std::string, Sender>>;
  // Changes written in one transaction, in this order: jobs dropped whole
  // (their senders too), chunks added (each with its seq), senders set
  // (replacing the row of the node's older incarnation), then per job every
  // chunk below a seq removed (the in-memory bound dropped them).
  struct Batch {
    std::vector<std::string> dropped_jobs;
    std::vector<std::pair<std::string, v1::LogChunk>> chunks;
    Senders senders;
    std::map<std::string, int64_t> trim_below;
    bool empty() const {
      return dropped_jobs.empty() && chunks.empty() && senders.empty() &&
             trim_below.empty();
    }
  };
  // All or nothing. Unavailable when it cannot be stored now (a full or
  // failing disk, or one with less than the kept space free for a batch
  // that adds chunks; etcd out of reach): the caller keeps the batch's
  // deletions and tries again. Else an error naming the store.
  virtual absl::Status Write(const Batch& batch) = 0;

  // Every stored chunk, per job, in seq order. DataLoss naming the store
  // and job for a chunk that does not parse.
  virtual absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> Load() = 0;
  // Every stored sender row, per job and node.
  virtual absl::StatusOr<Senders> LoadSenders() = 0;
  // Per job, the seq below which its chunks were trimmed (Batch::trim_below
  // kept with them): a reader behind it missed output.
  virtual absl::StatusOr<std::map<std::string, int64_t>> LoadTrims() = 0;

  // What and where, for messages ("logs PATH").
  virtual std::string where() const = 0;
};

// The file is locked for this process, like the state database.
class SqliteLogDb final : public LogDb {
 public:
  // Space kept free on the file's disk for the service's job state: a
  // write that adds log lines is refused (Unavailable, "disk full") while
  // less than this is free, so that worker output never takes the room a
  // job's end needs. Logs are the copy that can wait: the nodes keep them
  // and send them again.
  static constexpr int64_t kAutoKeepFree = -1;  // a quarter of the disk, at most 64 MiB
  // Opens or creates the file, also on a full disk when it exists. Errors
  // name it: cannot be created or opened (PermissionDenied), not a database
  // or damaged (DataLoss), in use by another process (Unavailable).
  static absl::StatusOr<std::unique_ptr<SqliteLogDb>> Open(
      const std::string& path, int64_t keep_free = kAutoKeepFree);
  ~SqliteLogDb() override;
  SqliteLogDb(const SqliteLogDb&) = delete;
  SqliteLogDb& operator=(const SqliteLogDb&) = delete;

  absl::Status Write(const Batch& batch) override;
  absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> Load() override;
  absl::StatusOr<Senders> LoadSenders() override;
  absl::StatusOr<std::map<std::string, int64_t>> LoadTrims() override;
  std::string where() const override { return "logs " + path_; }

  const std::string& path() const { return path_; }

  // Caps the file at its current size plus `more_pages` pages (SQLite's
  // max_page_count), so that a write growing it further fails as on a full
  // disk (Unavailable). A large cap lifts it again. For tests.
  absl::Status LimitGrowthForTest(int64_t more_pages);

 private:
  SqliteLogDb(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  absl::Status Exec(const char* sql);
  // `sql` prepared once (the writes run thousands of times a second:
  // preparing costs as much as a small commit).
  absl::StatusOr<sqlite3_stmt*> Statement(const char* sql);
  // Runs `sql`, a statement without result rows, from Statement.
  absl::Status StepOnce(const char* sql);
  absl::Status WriteLocked(const Batch& batch);
  absl::Status Error(int rc, absl::string_view what) const;

  // Unavailable unless the disk has room for `adding` bytes of chunks and
  // keep_free_ bytes besides.
  absl::Status CheckFreeSpace(int64_t adding) const;

  std::string path_;
  sqlite3* db_;  // owned
  int64_t keep_free_ = 0;
  // Prepared statements by their text; finalized before db_ is closed.
  std::map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_LOG_DB_H_
