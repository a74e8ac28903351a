// The LogStore kept in a LogDb: what a restarted service reloads (its
// bound, evictions and trims included), the numbering a `logs -f` resumes
// with, and what an Append costs with and without persistence.
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/log_store.h"

namespace elastrun::rendezvous {
namespace {

v1::LogChunk Chunk(int rank, const std::string& data) {
  v1::LogChunk c;
  c.set_rank(rank);
  c.set_stream("stdout");
  c.set_data(data);
  return c;
}

std::string Data(const LogStore::ReadResult& r) {
  std::string out;
  for (const v1::LogChunk& c : r.chunks) out += c.data();
  return out;
}

class LogStorePersistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastrun_log_store_test.XXXXXX";
    path_ = std::string(mkdtemp(tmpl)) + "/logs.db";
  }
  // A store on the file, as a service started at `first_seq` makes it.
  std::unique_ptr<LogStore> Open(int64_t first_seq, size_t max_bytes = 8 << 20,
                                 size_t max_jobs = 256) {
    LogStore::Options o;
    o.first_seq = first_seq;
    o.max_bytes_per_job = max_bytes;
    o.max_jobs = max_jobs;
    auto store = std::make_unique<LogStore>(o);
    absl::StatusOr<std::unique_ptr<LogDb>> db = LogDb::Open(path_);
    EXPECT_TRUE(db.ok()) << db.status();
    if (db.ok()) {
      EXPECT_TRUE(store->Persist(*std::move(db)).ok());
    }
    return store;
  }
  std::string path_;
};

TEST_F(LogStorePersistTest, ARestartedServiceShowsTheLogsAndNumbersAboveThem) {
  auto before = Open(/*first_seq=*/100);
  before->Append("j", {Chunk(0, "a\n"), Chunk(1, "b\n")});
  before->Append("j", {Chunk(0, "c\n")});
  const int64_t seen = before->Read("j", 0, -1, 1 << 20).chunks.back().seq();
  EXPECT_EQ(seen, 102);
  before.reset();  // a stop saves what is pending

  // Started "earlier" than the chunks' numbers (a clock step back): the
  // numbering still goes on above them.
  auto after = Open(/*first_seq=*/50);
  LogStore::ReadResult all = after->Read("j", 0, -1, 1 << 20);
  EXPECT_EQ(Data(all), "a\nb\nc\n");
  EXPECT_EQ(all.chunks.back().seq(), seen);
  EXPECT_EQ(Data(after->Read("j", 0, 1, 1 << 20)), "b\n");
  // A follower that saw everything gets exactly the new chunks.
  after->Append("j", {Chunk(0, "d\n")});
  LogStore::ReadResult next = after->Read("j", seen, -1, 1 << 20);
  ASSERT_EQ(next.chunks.size(), 1u);
  EXPECT_EQ(next.chunks[0].data(), "d\n");
  EXPECT_EQ(next.chunks[0].seq(), seen + 1);
  EXPECT_FALSE(next.dropped);
}

TEST_F(LogStorePersistTest, FlushWritesWhileRunningAndTrimsAndEvictionsAreSaved) {
  auto store = Open(1, /*max_bytes=*/10, /*max_jobs=*/2);
  store->Append("j", {Chunk(0, "12345\n")});
  ASSERT_TRUE(store->Flush().ok());
  store->Append("j", {Chunk(0, "abcde\n")});  // over 10 bytes: "12345" goes
  store->Append("k", {Chunk(0, "k\n")});
  store->Append("l", {Chunk(0, "l\n")});  // a third job evicts j
  store->Append("m", {Chunk(0, "m\n")});  // and k
  ASSERT_TRUE(store->Flush().ok());
  store.reset();  // the file is locked while the store has it
  absl::StatusOr<std::unique_ptr<LogDb>> db = LogDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status();
  auto stored = (*db)->Load();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->count("j"), 0u);
  EXPECT_EQ(stored->count("k"), 0u);
  ASSERT_EQ(stored->count("l"), 1u);
  ASSERT_EQ(stored->count("m"), 1u);
  EXPECT_EQ(stored->at("m").front().data(), "m\n");
}

TEST_F(LogStorePersistTest, TrimmedChunksStayGoneAfterARestart) {
  auto store = Open(1, /*max_bytes=*/10);
  store->Append("j", {Chunk(0, "12345\n")});
  ASSERT_TRUE(store->Flush().ok());
  store->Append("j", {Chunk(0, "abcde\n")});
  store.reset();
  auto after = Open(1000, /*max_bytes=*/10);
  LogStore::ReadResult r = after->Read("j", 0, -1, 1 << 20);
  EXPECT_EQ(Data(r), "abcde\n");
  EXPECT_TRUE(r.dropped);
}

// What a PushLogs pays for persistence: Append only copies into the
// pending batch; the writer thread does the SQLite work.
TEST_F(LogStorePersistTest, AppendCostsAboutTheSameWithPersistence) {
  constexpr int kCalls = 2000;
  const std::vector<v1::LogChunk> push = {Chunk(0, std::string(200, 'x') + "\n"),
                                          Chunk(1, std::string(200, 'y') + "\n")};
  auto time_appends = [&](LogStore& store) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) store.Append("j", push);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                     start)
               .count() /
           kCalls;
  };
  LogStore memory;
  const double memory_us = time_appends(memory);
  auto persisted = Open(1);
  const double persisted_us = time_appends(*persisted);
  ASSERT_TRUE(persisted->Flush().ok());
  std::printf(
      "LogStore::Append of 2 chunks of 201 bytes: %.2f us in memory, %.2f us "
      "persisted (%d calls each)\n",
      memory_us, persisted_us, kCalls);
  // Generous: a synchronous SQLite write per call would cost far more than
  // an in-memory copy; what this guards is that none happens on this path.
  EXPECT_LT(persisted_us, memory_us * 5 + 20);
  EXPECT_EQ(persisted->Read("j", 0, -1, 1 << 30).chunks.size(), 2u * kCalls);
}

}  // namespace
}  // namespace elastrun::rendezvous
