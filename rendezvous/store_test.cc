#include "rendezvous/store.h"

#include <sqlite3.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  char tmpl[] = "/tmp/elastrun_store_test.XXXXXX";
  return std::string(mkdtemp(tmpl));
}

v1::StoredJob Job(const std::string& id, int64_t seq) {
  v1::StoredJob j;
  j.set_job_id(id);
  j.set_seq(seq);
  j.mutable_spec()->set_name("train");
  j.mutable_spec()->add_argv("prog");
  j.add_placed("a");
  j.mutable_core()->set_run_id(id);
  j.mutable_core()->add_rounds()->set_id(0);
  return j;
}

TEST(StoreTest, RoundTripAndReopen) {
  const std::string path = TempDir() + "/state.db";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::StoredNode n;
    n.set_node_id("a");
    n.set_slots(4);
    n.set_state(v1::NODE_STATE_ALIVE);
    ASSERT_TRUE((*store)->PutNode(n).ok());
    ASSERT_TRUE((*store)->PutJob(Job("train-2", 2)).ok());
    ASSERT_TRUE((*store)->PutJob(Job("train-1", 1)).ok());
    v1::StoredJob changed = Job("train-1", 1);
    changed.mutable_core()->set_restart_count(3);
    ASSERT_TRUE((*store)->PutJob(changed).ok());  // replaces
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Store::Contents> c = (*store)->Load();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->nodes.size(), 1u);
  EXPECT_EQ(c->nodes[0].slots(), 4);
  ASSERT_EQ(c->jobs.size(), 2u);
  EXPECT_EQ(c->jobs[0].job_id(), "train-1");  // by seq
  EXPECT_EQ(c->jobs[0].core().restart_count(), 3);
  EXPECT_EQ(c->jobs[1].job_id(), "train-2");
}

// Job ids restart at 1 with a new state: the cluster id is what tells the
// jobs of two states apart, so it stays with its state and no other has it.
TEST(StoreTest, ClusterIdStaysWithItsStateAndNoOtherHasIt) {
  const std::string path = TempDir() + "/state.db";
  std::string first;
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    first = (*store)->cluster_id();
  }
  EXPECT_THAT(first, ::testing::MatchesRegex("[0-9a-f]{16}"));
  absl::StatusOr<std::unique_ptr<Store>> again = Store::Open(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->cluster_id(), first);
  absl::StatusOr<std::unique_ptr<Store>> other = Store::Open(TempDir() + "/other.db");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->cluster_id(), first);
  absl::StatusOr<std::unique_ptr<Store>> m1 = Store::Open(":memory:");
  absl::StatusOr<std::unique_ptr<Store>> m2 = Store::Open(":memory:");
  ASSERT_TRUE(m1.ok() && m2.ok());
  EXPECT_NE((*m1)->cluster_id(), (*m2)->cluster_id());
  EXPECT_NE((*m1)->cluster_id(), first);
}

TEST(StoreTest, SecondOpenerIsRefused) {
  const std::string path = TempDir() + "/state.db";
  absl::StatusOr<std::unique_ptr<Store>> first = Store::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<Store>> second = Store::Open(path);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(path));
}

TEST(StoreTest, GarbageFileIsAnErrorNamingTheFile) {
  const std::string path = TempDir() + "/state.db";
  std::ofstream(path) << "this is not a database, just some text that is long enough";
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("not a database"));
}

TEST(StoreTest, UnparsableRowIsDataLossNotSkipped) {
  const std::string path = TempDir() + "/state.db";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJob(Job("train-1", 1)).ok());
  }
  // Damage the row's blob with bytes that are not a valid message.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET data=x'ffffffff'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Store::Contents> c = (*store)->Load();
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("train-1"));
}

TEST(StoreTest, ProgressRowsRoundTripAndAFileWithoutThemLoads) {
  const std::string path = TempDir() + "/state.db";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJob(Job("train-1", 1)).ok());
  }
  // A file written before progress had its own table.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE progress", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<Store::Contents> c = (*store)->Load();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->jobs.size(), 1u);
    EXPECT_TRUE(c->progress.empty());
    v1::Progress p;
    p.set_step(7);
    ASSERT_TRUE((*store)->PutProgress("train-1", p).ok());
    p.set_step(8);
    ASSERT_TRUE((*store)->PutProgress("train-1", p).ok());  // replaces
    EXPECT_EQ((*store)->writes().progress, 2);
    EXPECT_EQ((*store)->writes().jobs, 0);
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Store::Contents> c = (*store)->Load();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->progress.count("train-1"), 1u);
  EXPECT_EQ(c->progress.at("train-1").step(), 8);
}

// The size of the database file and its WAL, in bytes.
int64_t FileBytes(const std::string& path) {
  int64_t total = 0;
  for (const std::string& p : {path, path + "-wal"}) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) total += st.st_size;
  }
  return total;
}

int64_t AutoVacuumMode(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA auto_vacuum", -1, &stmt, nullptr);
  int64_t mode = -1;
  if (sqlite3_step(stmt) == SQLITE_ROW) mode = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return mode;
}

TEST(StoreTest, DeletedNodesAreGoneAndTheFileShrinksBack) {
  const std::string dir = TempDir();
  const std::string path = dir + "/state.db";
  constexpr int kNodes = 4000;
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < kNodes; ++i) {
      v1::StoredNode n;
      n.set_node_id("flood-" + std::to_string(i));
      n.set_slots(1);
      (*n.mutable_labels())["junk"] = std::string(1000, 'x');
      ASSERT_TRUE((*store)->PutNode(n).ok());
    }
    ASSERT_TRUE((*store)->PutJob(Job("train-1", 1)).ok());
  }
  const int64_t full = FileBytes(path);
  EXPECT_GT(full, kNodes * 1000);
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    std::vector<std::string> ids;
    for (int i = 0; i < kNodes; ++i) ids.push_back("flood-" + std::to_string(i));
    ids.push_back("never-stored");  // a no-op
    ASSERT_TRUE((*store)->DeleteNodes(ids).ok());
    EXPECT_EQ((*store)->writes().node_deletes, kNodes + 1);
    // Given back at once, while the service runs: not only at its restart.
    EXPECT_LT(FileBytes(path), full / 10) << "full: " << full;
    absl::StatusOr<Store::Contents> c = (*store)->Load();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->nodes.empty());
    EXPECT_EQ(c->jobs.size(), 1u);  // other tables untouched
  }
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, AFileMadeWithoutAutoVacuumIsConvertedOnOpen) {
  const std::string dir = TempDir();
  const std::string path = dir + "/state.db";
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJob(Job("train-1", 1)).ok());
  }
  // As an older elastrun-rendezvous left it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA auto_vacuum=NONE; VACUUM;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  ASSERT_EQ(AutoVacuumMode(path), 0);
  {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<Store::Contents> c = (*store)->Load();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->jobs.size(), 1u);
  }
  EXPECT_EQ(AutoVacuumMode(path), 2);  // INCREMENTAL
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace elastrun::rendezvous
