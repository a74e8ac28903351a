#include "rendezvous/store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace elastrun::rendezvous {
namespace {

constexpr int kSchemaVersion = 1;

}  // namespace

absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what_file,
                          absl::string_view what) {
  const std::string msg = absl::StrFormat("%s: %s: %s", what_file, what,
                                          db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(
          absl::StrCat(msg, " (is another elastrun-rendezvous using it?)"));
    case SQLITE_FULL:
      // The disk may get space again: callers retry the write, and an RPC
      // that needed it fails UNAVAILABLE so its caller retries too.
      return absl::UnavailableError(absl::StrFormat(
          "disk full: %s: %s: %s (free space there; the write is retried)", what_file,
          what, db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    case SQLITE_IOERR:
      // A device may come back: retried as a full disk is.
      return absl::UnavailableError(
          absl::StrCat(msg, " (disk failing? the write is retried)"));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status SqliteStore::Error(int rc, absl::string_view what) const {
  return SqliteStatus(db_, rc, absl::StrCat("state database ", path_), what);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store, SqliteStore::Open(path));
  return store;
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, db));
  if (rc != SQLITE_OK) return store->Error(rc, "cannot open");
  sqlite3_busy_timeout(db, 0);
  // Exclusive locking first: taken at the first read below, held until close.
  RETURN_IF_ERROR(store->Exec("PRAGMA locking_mode=EXCLUSIVE"));
  bool vacuum = false;
  if (path != ":memory:") {
    // Before WAL and the first table: only then does a new file take it.
    ASSIGN_OR_RETURN(vacuum, store->EnableAutoVacuum());
    RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
    // The write-ahead log shrinks back to this at each checkpoint instead
    // of keeping its largest size.
    RETURN_IF_ERROR(store->Exec("PRAGMA journal_size_limit=1048576"));
  }
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
      "CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
      "  data BLOB NOT NULL);"
      "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
      "  data BLOB NOT NULL);"
      // Added without a schema bump: an older service ignores the table.
      "CREATE TABLE IF NOT EXISTS progress (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
      "  data BLOB NOT NULL);"));
  // Inserted only where missing: a state that has them opens on a full
  // disk too (read, and written once there is space), which a write
  // would not.
  RETURN_IF_ERROR(store->InsertMissing("schema_version", "1"));
  // A file from a newer elastrun would be misread: refuse it.
  ASSIGN_OR_RETURN(const int64_t version,
                   store->PragmaInt("SELECT value FROM meta WHERE key='schema_version'"));
  if (version != kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state database %s has schema version %d; this elastrun-rendezvous reads "
        "version %d",
        path, version, kSchemaVersion));
  }
  // Drawn once, with the state (a state made before it gets one now).
  RETURN_IF_ERROR(store->InsertMissing("cluster_id", "random()"));
  ASSIGN_OR_RETURN(const int64_t cluster,
                   store->PragmaInt("SELECT value FROM meta WHERE key='cluster_id'"));
  store->cluster_id_ = absl::StrFormat("%016x", static_cast<uint64_t>(cluster));
  // A file made before auto-vacuum (perhaps grown by a flood of node ids):
  // the mode takes effect only through one full rewrite.
  if (vacuum) {
    if (absl::Status st = store->Exec("VACUUM"); !st.ok()) {
      // A full disk has no room for the copy VACUUM makes: the next start
      // tries again.
      if (!absl::IsUnavailable(st)) return st;
      LOG(WARNING) << "not compacted: " << st;
    }
  }
  return store;
}

absl::Status SqliteStore::InsertMissing(const char* key, const char* value_sql) {
  ASSIGN_OR_RETURN(
      const int64_t present,
      PragmaInt(
          absl::StrFormat("SELECT count(*) FROM meta WHERE key='%s'", key).c_str()));
  if (present > 0) return absl::OkStatus();
  return Exec(
      absl::StrFormat("INSERT INTO meta (key, value) VALUES ('%s', %s)", key, value_sql)
          .c_str());
}

absl::StatusOr<int64_t> SqliteStore::PragmaInt(const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, sql);
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) return Error(rc, sql);
  return sqlite3_column_int64(stmt, 0);
}

absl::StatusOr<bool> SqliteStore::EnableAutoVacuum() {
  // Read before setting it: once set, the pragma reports the new mode even
  // where it has not taken effect.
  ASSIGN_OR_RETURN(const int64_t tables, PragmaInt("SELECT count(*) FROM sqlite_master"));
  ASSIGN_OR_RETURN(const int64_t mode, PragmaInt("PRAGMA auto_vacuum"));
  constexpr int64_t kIncremental = 2;
  // Set only where it is not: setting it writes, and a full disk must not
  // keep a state that has it from opening.
  if (mode == kIncremental) return false;
  if (absl::Status st = Exec("PRAGMA auto_vacuum=INCREMENTAL"); !st.ok()) {
    if (!absl::IsUnavailable(st) || tables == 0) return st;
    LOG(WARNING) << "not compacted: " << st;
    return false;
  }
  return tables > 0;
}

SqliteStore::~SqliteStore() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  sqlite3_free(err);  // sqlite3_errmsg(db_) says the same
  if (rc != SQLITE_OK) return Error(rc, absl::StrFormat("executing \"%.40s\"", sql));
  return absl::OkStatus();
}

absl::Status SqliteStore::Put(const char* sql, const std::string& key, int64_t seq,
                              const std::string& blob) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "preparing a write");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  sqlite3_bind_text(stmt, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  sqlite3_bind_int64(stmt, 2, seq);
  sqlite3_bind_blob(stmt, 3, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
  rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrFormat("writing \"%s\"", key));
  return absl::OkStatus();
}

absl::Status Store::PutNodes(const std::vector<const v1::StoredNode*>& nodes) {
  for (const v1::StoredNode* node : nodes) RETURN_IF_ERROR(PutNode(*node));
  return absl::OkStatus();
}

absl::Status SqliteStore::PutNode(const v1::StoredNode& node) {
  ++writes_.nodes;
  return Put("INSERT OR REPLACE INTO nodes (id, seq, data) VALUES (?1, ?2, ?3)",
             node.node_id(), 0, node.SerializeAsString());
}

absl::Status SqliteStore::PutJob(const v1::StoredJob& job) {
  ++writes_.jobs;
  return Put("INSERT OR REPLACE INTO jobs (id, seq, data) VALUES (?1, ?2, ?3)", job.job_id(),
             job.seq(), job.SerializeAsString());
}

absl::Status SqliteStore::PutProgress(const std::string& job_id,
                                      const v1::Progress& progress) {
  ++writes_.progress;
  return Put("INSERT OR REPLACE INTO progress (id, seq, data) VALUES (?1, ?2, ?3)", job_id,
             0, progress.SerializeAsString());
}

absl::Status SqliteStore::DeleteNodes(const std::vector<std::string>& node_ids) {
  if (node_ids.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(Exec("BEGIN"));
  absl::Cleanup rollback = [this] { Exec("ROLLBACK").IgnoreError(); };
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "DELETE FROM nodes WHERE id = ?1", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "preparing a delete");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  for (const std::string& id : node_ids) {
    sqlite3_reset(stmt);
    sqlite3_bind_text(stmt, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrFormat("deleting node \"%s\"", id));
  }
  RETURN_IF_ERROR(Exec("COMMIT"));
  std::move(rollback).Cancel();
  writes_.node_deletes += static_cast<int64_t>(node_ids.size());
  // Free pages go back to the file system; with WAL the main file shrinks
  // at the checkpoint. A failure here leaves the rows deleted, the file
  // merely larger than it needs to be: not worth failing the caller for.
  if (path_ != ":memory:") {
    Exec("PRAGMA incremental_vacuum").IgnoreError();
    Exec("PRAGMA wal_checkpoint(TRUNCATE)").IgnoreError();
  }
  return absl::OkStatus();
}

absl::StatusOr<Store::Contents> SqliteStore::Load() {
  Contents out;
  auto scan = [&](const char* sql, const char* table, auto add) -> absl::Status {
    // `add` gets the row's id (never null) and its blob.
    sqlite3_stmt* stmt = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, absl::StrFormat("reading table %s", table));
    absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const char* id = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      const void* data = sqlite3_column_blob(stmt, 1);
      const int size = sqlite3_column_bytes(stmt, 1);
      if (!add(id != nullptr ? id : "", data, size)) {
        return absl::DataLossError(absl::StrFormat(
            "state database %s: row \"%s\" of table %s does not parse (%d bytes); the "
            "file is damaged: restore it from a backup or move it away to start empty",
            path_, id != nullptr ? id : "?", table, size));
      }
    }
    if (rc != SQLITE_DONE) return Error(rc, absl::StrFormat("reading table %s", table));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(scan("SELECT id, data FROM nodes ORDER BY id", "nodes",
                       [&](const char*, const void* data, int size) {
                         return out.nodes.emplace_back().ParseFromArray(data, size);
                       }));
  RETURN_IF_ERROR(scan("SELECT id, data FROM jobs ORDER BY seq", "jobs",
                       [&](const char*, const void* data, int size) {
                         return out.jobs.emplace_back().ParseFromArray(data, size);
                       }));
  RETURN_IF_ERROR(scan("SELECT id, data FROM progress ORDER BY id", "progress",
                       [&](const char* id, const void* data, int size) {
                         return out.progress[id].ParseFromArray(data, size);
                       }));
  return out;
}

}  // namespace elastrun::rendezvous
