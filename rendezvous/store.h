// Durable state of the rendezvous service in one SQLite file: the node
// registry, every job (spec, placement, the core's RendezvousState with its
// round history) and, in a small row of its own, each job's last progress,
// so that a progress report never rewrites the job. Writes go through at once (WAL,
// synchronous=NORMAL: a committed write survives a SIGKILL of the service;
// an OS crash may lose the last few). The file uses incremental
// auto-vacuum, so that forgetting rows (expired nodes) gives the space back
// to the file system instead of leaving it at its high-water mark.
#ifndef ELASTRUN_RENDEZVOUS_STORE_H_
#define ELASTRUN_RENDEZVOUS_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "elastrun/v1/state.pb.h"

struct sqlite3;

namespace elastrun::rendezvous {

// The status for SQLite result `rc` on `db` (may be null): `what_file`
// ("state database PATH") and `what` (the step) named. A full or failing
// disk is Unavailable (callers retry; a full one's message starts "disk
// full"), a corrupt file DataLoss, a file
// that cannot be opened or written PermissionDenied.
absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what_file,
                          absl::string_view what);

}  // namespace elastrun::rendezvous

namespace elastrun::rendezvous {

// Where the service's durable state lives: SQLite on this machine
// (SqliteStore, below) or etcd, shared by replicas (etcd_store.h). Not
// thread-safe: the owner (the Coordinator, under its lock) serializes calls.
// A write that cannot be made now (a full disk, etcd out of reach) fails
// Unavailable and is retried by the caller; one refused because this
// replica no longer leads fails FailedPrecondition.
class Store {
 public:
  // SQLite at `path` (SqliteStore::Open).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  virtual ~Store() = default;

  // Insert or replace by node_id / job_id. Errors name the store.
  virtual absl::Status PutNode(const v1::StoredNode& node) = 0;
  virtual absl::Status PutJob(const v1::StoredJob& job) = 0;
  // The job's last progress, apart from the job (a small record per job).
  virtual absl::Status PutProgress(const std::string& job_id,
                                   const v1::Progress& progress) = 0;
  // Deletes these nodes, all or none. Unknown ids are no-ops.
  virtual absl::Status DeleteNodes(const std::vector<std::string>& node_ids) = 0;
  // Several nodes at once, in order; not all or none (a failure leaves the
  // ones before it written). By default one PutNode each.
  virtual absl::Status PutNodes(const std::vector<const v1::StoredNode*>& nodes);
  // Whether node records are better written in batches, apart from the
  // change that made them (each write is a round trip to other machines):
  // the Coordinator then writes registrations and losses from its timer.
  virtual bool batches_node_writes() const { return false; }

  // Records written since Open, by kind: what callers may check to show a
  // write did or did not happen.
  struct Writes {
    int64_t nodes = 0;
    int64_t jobs = 0;
    int64_t progress = 0;
    int64_t node_deletes = 0;
  };
  const Writes& writes() const { return writes_; }

  struct Contents {
    std::vector<v1::StoredNode> nodes;  // by node_id
    std::vector<v1::StoredJob> jobs;    // by submission seq
    std::map<std::string, v1::Progress> progress;  // by job id
  };
  // Everything stored. DataLoss naming the store and the record for one
  // that does not parse: damage is reported, never skipped.
  virtual absl::StatusOr<Contents> Load() = 0;

  // What and where the store is, for messages ("state database PATH").
  virtual std::string where() const = 0;
  // The cluster this state is: 16 hex digits drawn when the state was made,
  // kept with it ever after.
  const std::string& cluster_id() const { return cluster_id_; }

 protected:
  Writes writes_;
  std::string cluster_id_;
};

// Not thread-safe: the owner serializes calls. The file is locked for this
// process (SQLite exclusive locking mode): a second service on the same file
// gets an error instead of silently sharing it.
class SqliteStore final : public Store {
 public:
  // Opens or creates the database at `path` (":memory:" for a store that
  // lives only as long as the object). A state opens on a full disk too:
  // it is read, and its writes fail Unavailable until there is space
  // again. Errors name the file: it cannot be
  // created or opened, it is not an SQLite database or is corrupt
  // (DataLoss), it is in use by another process (Unavailable).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  absl::Status PutNode(const v1::StoredNode& node) override;
  absl::Status PutJob(const v1::StoredJob& job) override;
  absl::Status PutProgress(const std::string& job_id,
                           const v1::Progress& progress) override;
  // In one transaction, then gives the freed pages back to the file system.
  absl::Status DeleteNodes(const std::vector<std::string>& node_ids) override;
  // DataLoss naming the file and the row for a row that does not parse.
  absl::StatusOr<Contents> Load() override;
  std::string where() const override { return "state database " + path_; }

  const std::string& path() const { return path_; }
  // cluster_id(): for ":memory:", drawn at every Open.

 private:
  SqliteStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}
  // Runs SQL with no result rows.
  absl::Status Exec(const char* sql);
  absl::Status Put(const char* sql, const std::string& key, int64_t seq,
                   const std::string& blob);
  // Asks for incremental auto-vacuum, which a new file takes at its first
  // table. Returns whether the file is older and without it: then it takes
  // effect only through one VACUUM, the caller's to run.
  absl::StatusOr<bool> EnableAutoVacuum();
  // Inserts meta row `key` with the SQL expression `value_sql` unless the
  // row is there.
  absl::Status InsertMissing(const char* key, const char* value_sql);
  // The value of a statement (a PRAGMA) that returns one integer.
  absl::StatusOr<int64_t> PragmaInt(const char* sql);
  // An error for the SQLite result `rc` of `what`, naming the file.
  absl::Status Error(int rc, absl::string_view what) const;

  std::string path_;
  sqlite3* db_;  // owned
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_STORE_H_
