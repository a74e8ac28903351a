#include "rendezvous/log_db.h"

#include <sqlite3.h>
#include <sys/statvfs.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {
namespace {

// The folder of file `path`.
std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::Status SqliteLogDb::Error(int rc, absl::string_view what) const {
  return SqliteStatus(db_, rc, absl::StrCat("log database ", path_), what);
}

absl::Status SqliteLogDb::CheckFreeSpace(int64_t adding) const {
  if (keep_free_ <= 0) return absl::OkStatus();
  struct statvfs fs;
  if (statvfs(Dirname(path_).c_str(), &fs) != 0) return absl::OkStatus();
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * fs.f_frsize;
  if (free_bytes - adding >= keep_free_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "disk full: log database %s: %d KiB free, %d KiB of worker logs to write, %d KiB "
      "kept for the jobs' state; the logs wait on their nodes until there is space",
      path_, free_bytes >> 10, adding >> 10, keep_free_ >> 10));
}

absl::StatusOr<std::unique_ptr<LogDb>> LogDb::Open(const std::string& path,
                                                   int64_t keep_free) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteLogDb> db, SqliteLogDb::Open(path, keep_free));
  return db;
}

absl::StatusOr<std::unique_ptr<SqliteLogDb>> SqliteLogDb::Open(const std::string& path,
                                                               int64_t keep_free) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  std::unique_ptr<SqliteLogDb> out(new SqliteLogDb(path, db));
  if (rc != SQLITE_OK) return out->Error(rc, "cannot open");
  if (path != ":memory:") {
    out->keep_free_ = keep_free;
    struct statvfs fs;
    if (keep_free == kAutoKeepFree) {
      out->keep_free_ = 0;
      if (statvfs(Dirname(path).c_str(), &fs) == 0) {
        const int64_t size = static_cast<int64_t>(fs.f_blocks) * fs.f_frsize;
        out->keep_free_ = std::min<int64_t>(size / 4, int64_t{64} << 20);
      }
    }
  }
  sqlite3_busy_timeout(db, 0);
  RETURN_IF_ERROR(out->Exec("PRAGMA locking_mode=EXCLUSIVE"));
  if (path != ":memory:") {
    RETURN_IF_ERROR(out->Exec("PRAGMA journal_mode=WAL"));
    // The write-ahead log shrinks back to this at each checkpoint instead
    // of keeping its largest size.
    RETURN_IF_ERROR(out->Exec("PRAGMA journal_size_limit=1048576"));
  }
  // Logs are a convenience copy (the nodes keep the files): no fsync per
  // batch; a committed batch survives a crash of the service, not of the OS.
  RETURN_IF_ERROR(out->Exec("PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(out->Exec(
      "CREATE TABLE IF NOT EXISTS chunks (job TEXT NOT NULL, seq INTEGER NOT NULL, "
      "  data BLOB NOT NULL, PRIMARY KEY (job, seq)) WITHOUT ROWID"));
  // Written in the same transaction as the chunks it counts, so it survives
  // exactly what they survive. One row per job and node: small.
  RETURN_IF_ERROR(out->Exec(
      "CREATE TABLE IF NOT EXISTS senders (job TEXT NOT NULL, node TEXT NOT NULL, "
      "  incarnation TEXT NOT NULL, chunk INTEGER NOT NULL, PRIMARY KEY (job, node)) "
      "  WITHOUT ROWID"));
  RETURN_IF_ERROR(out->Exec(
      "CREATE TABLE IF NOT EXISTS trims (job TEXT PRIMARY KEY, below INTEGER NOT NULL) "
      "  WITHOUT ROWID"));
  return out;
}

SqliteLogDb::~SqliteLogDb() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::StatusOr<sqlite3_stmt*> SqliteLogDb::Statement(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrFormat("preparing \"%.40s\"", sql));
  statements_.emplace(sql, stmt);
  return stmt;
}

absl::Status SqliteLogDb::StepOnce(const char* sql) {
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Statement(sql));
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrFormat("executing \"%.40s\"", sql));
  return absl::OkStatus();
}

absl::Status SqliteLogDb::Exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrFormat("executing \"%.40s\"", sql));
  return absl::OkStatus();
}

absl::Status SqliteLogDb::Write(const Batch& batch) {
  if (batch.empty()) return absl::OkStatus();
  if (!batch.chunks.empty()) {
    int64_t adding = 0;
    for (const auto& [job, chunk] : batch.chunks) adding += chunk.ByteSizeLong();
    RETURN_IF_ERROR(CheckFreeSpace(adding));
  }
  RETURN_IF_ERROR(StepOnce("BEGIN"));
  absl::Status st = WriteLocked(batch);
  if (st.ok()) st = StepOnce("COMMIT");
  // After a failed COMMIT too: SQLite may have rolled back already, and a
  // second ROLLBACK's error says nothing new.
  if (!st.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return st;
}

absl::Status SqliteLogDb::WriteLocked(const Batch& batch) {
  // One statement per kind, prepared once and bound again per row; none
  // run for an empty kind (most batches only add chunks and a sender).
  auto run = [this](const char* sql, const auto& bind) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Statement(sql));
    return bind(stmt);
  };
  auto step = [this](sqlite3_stmt* stmt, const std::string& job) -> absl::Status {
    const int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    if (rc != SQLITE_DONE)
      return Error(rc, absl::StrFormat("writing logs of \"%s\"", job));
    return absl::OkStatus();
  };
  auto drop = [&](const char* sql) {
    return run(sql, [&](sqlite3_stmt* stmt) {
      for (const std::string& job : batch.dropped_jobs) {
        sqlite3_bind_text(stmt, 1, job.data(), static_cast<int>(job.size()),
                          SQLITE_STATIC);
        RETURN_IF_ERROR(step(stmt, job));
      }
      return absl::OkStatus();
    });
  };
  if (!batch.dropped_jobs.empty()) {
    RETURN_IF_ERROR(drop("DELETE FROM chunks WHERE job = ?1"));
    RETURN_IF_ERROR(drop("DELETE FROM senders WHERE job = ?1"));
    RETURN_IF_ERROR(drop("DELETE FROM trims WHERE job = ?1"));
  }
  RETURN_IF_ERROR(
      run("INSERT OR REPLACE INTO chunks (job, seq, data) VALUES (?1, ?2, ?3)",
          [&](sqlite3_stmt* stmt) {
            std::string blob;
            for (const auto& [job, chunk] : batch.chunks) {
              chunk.SerializeToString(&blob);
              sqlite3_bind_text(stmt, 1, job.data(), static_cast<int>(job.size()),
                                SQLITE_STATIC);
              sqlite3_bind_int64(stmt, 2, chunk.seq());
              sqlite3_bind_blob(stmt, 3, blob.data(), static_cast<int>(blob.size()),
                                SQLITE_TRANSIENT);
              RETURN_IF_ERROR(step(stmt, job));
            }
            return absl::OkStatus();
          }));
  if (!batch.senders.empty()) {
    RETURN_IF_ERROR(run(
        "INSERT INTO senders (job, node, incarnation, chunk) VALUES (?1, ?2, ?3, ?4) "
        "ON CONFLICT (job, node) DO UPDATE SET incarnation = ?3, chunk = ?4",
        [&](sqlite3_stmt* stmt) {
          for (const auto& [job, nodes] : batch.senders) {
            for (const auto& [node, sender] : nodes) {
              sqlite3_bind_text(stmt, 1, job.data(), static_cast<int>(job.size()),
                                SQLITE_STATIC);
              sqlite3_bind_text(stmt, 2, node.data(), static_cast<int>(node.size()),
                                SQLITE_STATIC);
              sqlite3_bind_text(stmt, 3, sender.incarnation.data(),
                                static_cast<int>(sender.incarnation.size()), SQLITE_STATIC);
              sqlite3_bind_int64(stmt, 4, sender.chunk);
              RETURN_IF_ERROR(step(stmt, job));
            }
          }
          return absl::OkStatus();
        }));
  }
  if (batch.trim_below.empty()) return absl::OkStatus();
  auto trim = [&](const char* sql) {
    return run(sql, [&](sqlite3_stmt* stmt) {
      for (const auto& [job, below] : batch.trim_below) {
        sqlite3_bind_text(stmt, 1, job.data(), static_cast<int>(job.size()),
                          SQLITE_STATIC);
        sqlite3_bind_int64(stmt, 2, below);
        RETURN_IF_ERROR(step(stmt, job));
      }
      return absl::OkStatus();
    });
  };
  RETURN_IF_ERROR(trim("DELETE FROM chunks WHERE job = ?1 AND seq < ?2"));
  return trim(
      "INSERT INTO trims (job, below) VALUES (?1, ?2) "
      "ON CONFLICT (job) DO UPDATE SET below = max(below, ?2)");
}

absl::StatusOr<std::map<std::string, int64_t>> SqliteLogDb::LoadTrims() {
  std::map<std::string, int64_t> out;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "SELECT job, below FROM trims", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "reading the log trims");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const char* job = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    out[job != nullptr ? job : ""] = sqlite3_column_int64(stmt, 1);
  }
  if (rc != SQLITE_DONE) return Error(rc, "reading the log trims");
  return out;
}

absl::Status SqliteLogDb::LimitGrowthForTest(int64_t more_pages) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA page_count", -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "reading the page count");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  if ((rc = sqlite3_step(stmt)) != SQLITE_ROW) return Error(rc, "reading the page count");
  const int64_t pages = sqlite3_column_int64(stmt, 0);
  return Exec(absl::StrCat("PRAGMA max_page_count=", pages + more_pages).c_str());
}

absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> SqliteLogDb::Load() {
  std::map<std::string, std::vector<v1::LogChunk>> out;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "SELECT job, data FROM chunks ORDER BY job, seq", -1,
                              &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "reading the logs");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const char* job = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    const std::string id = job != nullptr ? job : "";
    if (!out[id].emplace_back().ParseFromArray(sqlite3_column_blob(stmt, 1),
                                               sqlite3_column_bytes(stmt, 1))) {
      return absl::DataLossError(absl::StrFormat(
          "log database %s: a chunk of job \"%s\" does not parse; the file is damaged: "
          "move it away (the nodes keep the log files)",
          path_, id));
    }
  }
  if (rc != SQLITE_DONE) return Error(rc, "reading the logs");
  return out;
}

absl::StatusOr<LogDb::Senders> SqliteLogDb::LoadSenders() {
  Senders out;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, "SELECT job, node, incarnation, chunk FROM senders", -1,
                              &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "reading the log senders");
  absl::Cleanup finalize = [stmt] { sqlite3_finalize(stmt); };
  auto text = [stmt](int column) {
    const char* s = reinterpret_cast<const char*>(sqlite3_column_text(stmt, column));
    return std::string(s != nullptr ? s : "");
  };
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    out[text(0)][text(1)] = Sender{text(2), sqlite3_column_int64(stmt, 3)};
  }
  if (rc != SQLITE_DONE) return Error(rc, "reading the log senders");
  return out;
}

}  // namespace elastrun::rendezvous
