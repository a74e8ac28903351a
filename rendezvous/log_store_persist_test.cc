// The LogStore kept in a LogDb: what a restarted service reloads (its
// bound, evictions and trims included), the numbering a `logs -f` resumes
// with, that an acknowledged chunk survives a kill, and what an Append
// costs with and without persistence.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
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
  ASSERT_TRUE(before->Append("j", {Chunk(0, "a\n"), Chunk(1, "b\n")}).ok());
  ASSERT_TRUE(before->Append("j", {Chunk(0, "c\n")}).ok());
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
  ASSERT_TRUE(after->Append("j", {Chunk(0, "d\n")}).ok());
  LogStore::ReadResult next = after->Read("j", seen, -1, 1 << 20);
  ASSERT_EQ(next.chunks.size(), 1u);
  EXPECT_EQ(next.chunks[0].data(), "d\n");
  EXPECT_EQ(next.chunks[0].seq(), seen + 1);
  EXPECT_FALSE(next.dropped);
}

TEST_F(LogStorePersistTest, FlushWritesWhileRunningAndTrimsAndEvictionsAreSaved) {
  auto store = Open(1, /*max_bytes=*/10, /*max_jobs=*/2);
  ASSERT_TRUE(store->Append("j", {Chunk(0, "12345\n")}).ok());
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(store->Append("j", {Chunk(0, "abcde\n")}).ok());  // over 10 bytes: "12345" goes
  ASSERT_TRUE(store->Append("k", {Chunk(0, "k\n")}).ok());
  ASSERT_TRUE(store->Append("l", {Chunk(0, "l\n")}).ok());  // a third job evicts j
  ASSERT_TRUE(store->Append("m", {Chunk(0, "m\n")}).ok());  // and k
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
  ASSERT_TRUE(store->Append("j", {Chunk(0, "12345\n")}).ok());
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(store->Append("j", {Chunk(0, "abcde\n")}).ok());
  store.reset();
  auto after = Open(1000, /*max_bytes=*/10);
  LogStore::ReadResult r = after->Read("j", 0, -1, 1 << 20);
  EXPECT_EQ(Data(r), "abcde\n");
  EXPECT_TRUE(r.dropped);
}

// In a death test's child: a store on ELASTRUN_TEST_LOG_DB whose writer is
// woken only by waiting Appends (its timer: an hour), never destroyed (the
// child is killed). Exits 3 when it cannot open.
LogStore* StoreToKill() {
  LogStore::Options o;
  o.flush_interval = absl::Hours(1);
  auto* store = new LogStore(o);
  absl::StatusOr<std::unique_ptr<LogDb>> db = LogDb::Open(getenv("ELASTRUN_TEST_LOG_DB"));
  if (!db.ok() || !store->Persist(*std::move(db)).ok()) _exit(3);
  return store;
}

// A chunk the service acknowledged is on disk: a service killed right after
// (no Close, no destructor) shows it when it starts again. The writer is
// woken by the waiting Append, not by its timer (an hour here).
TEST_F(LogStorePersistTest, AnAcknowledgedChunkSurvivesAKillOfTheService) {
  // The child runs this test again from its start, SetUp included: it
  // keeps the parent's file, which it inherits in the environment.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("ELASTRUN_TEST_LOG_DB", path_.c_str(), /*overwrite=*/0);
  EXPECT_EXIT(
      {
        LogStore* store = StoreToKill();
        if (!store->Append("j", {Chunk(0, "acked 1\n"), Chunk(1, "acked 2\n")}).ok()) {
          _exit(4);
        }
        raise(SIGKILL);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  unsetenv("ELASTRUN_TEST_LOG_DB");
  auto after = Open(1000);
  EXPECT_EQ(Data(after->Read("j", 0, -1, 1 << 20)), "acked 1\nacked 2\n");
}

// The window a daemon's numbers close: the service commits a push and is
// killed before its answer leaves (here: inside `done`, which the writer
// calls right after the commit), so the daemon sends the push again to the
// restarted service. It is stored once; the daemon's next chunks, and a
// restarted daemon's (a new incarnation, numbering from 1), are stored.
TEST_F(LogStorePersistTest, AResendOfACommittedPushAfterAKillIsStoredOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("ELASTRUN_TEST_LOG_DB", path_.c_str(), /*overwrite=*/0);
  const std::vector<v1::LogChunk> push = {Chunk(0, "once 1\n"), Chunk(1, "once 2\n")};
  const LogStore::Origin from{"n1", "inc-a", 1};
  EXPECT_EXIT(
      {
        LogStore* store = StoreToKill();
        store->Append("j", push, from, [](absl::Status st) {
          if (!st.ok()) _exit(4);
          raise(SIGKILL);  // committed, not answered
        });
        for (;;) pause();
      },
      ::testing::KilledBySignal(SIGKILL), "");
  unsetenv("ELASTRUN_TEST_LOG_DB");
  {
    auto after = Open(1000);
    ASSERT_EQ(Data(after->Read("j", 0, -1, 1 << 20)), "once 1\nonce 2\n");
    ASSERT_TRUE(after->Append("j", push, from).ok());  // the daemon's resend
    EXPECT_EQ(Data(after->Read("j", 0, -1, 1 << 20)), "once 1\nonce 2\n");
    ASSERT_TRUE(after->Append("j", {Chunk(0, "next\n")}, {"n1", "inc-a", 3}).ok());
  }
  // The numbers were saved with the chunks: they hold across a reopening.
  auto again = Open(2000);
  ASSERT_TRUE(again->Append("j", push, from).ok());
  ASSERT_TRUE(again->Append("j", {Chunk(0, "next\n")}, {"n1", "inc-a", 3}).ok());
  ASSERT_TRUE(again->Append("j", {Chunk(0, "restarted\n")}, {"n1", "inc-b", 1}).ok());
  EXPECT_EQ(Data(again->Read("j", 0, -1, 1 << 20)), "once 1\nonce 2\nnext\nrestarted\n");
  again.reset();
  // The newer incarnation replaced the older one's row; dropping the job
  // (evicted by newer jobs) takes its rows along.
  absl::StatusOr<std::unique_ptr<LogDb>> db = LogDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status();
  absl::StatusOr<LogDb::Senders> senders = (*db)->LoadSenders();
  ASSERT_TRUE(senders.ok()) << senders.status();
  ASSERT_EQ(senders->size(), 1u);
  ASSERT_EQ(senders->at("j").size(), 1u);
  EXPECT_EQ(senders->at("j").at("n1").incarnation, "inc-b");
  EXPECT_EQ(senders->at("j").at("n1").chunk, 1);
  db->reset();
  auto evicting = Open(3000, 8 << 20, /*max_jobs=*/1);
  ASSERT_TRUE(evicting->Append("k", {Chunk(0, "k\n")}, {"n2", "inc-c", 1}).ok());
  evicting.reset();
  db = LogDb::Open(path_);
  ASSERT_TRUE(db.ok()) << db.status();
  senders = (*db)->LoadSenders();
  ASSERT_TRUE(senders.ok()) << senders.status();
  EXPECT_EQ(senders->count("j"), 0u);
  EXPECT_EQ(senders->count("k"), 1u);
}

// A push whose write failed is answered Unavailable and its numbers are
// not kept: the daemon's resend, with the same numbers, is stored.
TEST_F(LogStorePersistTest, AResendOfAFailedNumberedPushIsStored) {
  auto store = std::make_unique<LogStore>(LogStore::Options{});
  absl::StatusOr<std::unique_ptr<SqliteLogDb>> opened = SqliteLogDb::Open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SqliteLogDb* db = opened->get();
  ASSERT_TRUE(store->Persist(*std::move(opened)).ok());
  const LogStore::Origin from{"n1", "inc-a", 1};
  const std::vector<v1::LogChunk> big = {Chunk(0, std::string(64 << 10, 'x') + "\n")};
  ASSERT_TRUE(db->LimitGrowthForTest(0).ok());
  absl::Status refused = store->Append("j", big, from);
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  ASSERT_TRUE(db->LimitGrowthForTest(1 << 20).ok());
  ASSERT_TRUE(store->Append("j", big, from).ok());
  EXPECT_EQ(Data(store->Read("j", 0, -1, 1 << 30)), big[0].data());
  store.reset();
  auto after = Open(1000);
  ASSERT_TRUE(after->Append("j", big, from).ok());
  EXPECT_EQ(Data(after->Read("j", 0, -1, 1 << 30)), big[0].data());
}

// A write that fails (a full disk) is answered Unavailable, so the daemon
// keeps the chunks and sends them again: they must not have been shown to
// a reader meanwhile, nor be kept, or they would appear twice.
TEST_F(LogStorePersistTest, AFailedWriteIsRefusedNotShownAndAResendIsStoredOnce) {
  LogStore::Options o;
  auto store = std::make_unique<LogStore>(o);
  absl::StatusOr<std::unique_ptr<SqliteLogDb>> opened = SqliteLogDb::Open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SqliteLogDb* db = opened->get();
  ASSERT_TRUE(store->Persist(*std::move(opened)).ok());
  ASSERT_TRUE(store->Append("j", {Chunk(0, "before\n")}).ok());

  // Only the writer thread and Flush touch the db; the writer is idle now.
  ASSERT_TRUE(db->LimitGrowthForTest(0).ok());
  const std::vector<v1::LogChunk> big = {Chunk(0, std::string(64 << 10, 'x') + "\n")};
  absl::Status refused = store->Append("j", big);
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_EQ(Data(store->Read("j", 0, -1, 1 << 30)), "before\n");

  ASSERT_TRUE(db->LimitGrowthForTest(1 << 20).ok());
  ASSERT_TRUE(store->Append("j", big).ok());  // the daemon's resend
  LogStore::ReadResult shown = store->Read("j", 0, -1, 1 << 30);
  EXPECT_EQ(Data(shown), "before\n" + big[0].data());
  store.reset();
  auto after = Open(1000);
  EXPECT_EQ(Data(after->Read("j", 0, -1, 1 << 30)), "before\n" + big[0].data());
}

// What a PushLogs pays to be durable: its Append waits for a commit, shared
// by the Appends that wait at the same time. Prints the figures for 1 and 8
// pushers (a daemon's forwarder is one), in memory and persisted, with
// numbered pushes (as daemons send them: the store keeps their numbers in
// the same transaction) and unnumbered ones (older daemons), taken in turns
// so that both see the same load of the machine.
TEST_F(LogStorePersistTest, PushThroughputInMemoryAndPersisted) {
  const std::vector<v1::LogChunk> push = {Chunk(0, std::string(200, 'x') + "\n"),
                                          Chunk(1, std::string(200, 'y') + "\n")};
  // Microseconds of wall time per Append, `calls` by each of `pushers` threads.
  auto time_appends = [&](LogStore& store, int pushers, int calls, bool numbered) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < pushers; ++t) {
      threads.emplace_back([&, t] {
        const std::string job = "j" + std::to_string(t);
        // As a daemon's forwarder numbers them (one node per pusher).
        LogStore::Origin from{"n" + std::to_string(t), numbered ? "inc" : "", 1};
        for (int i = 0; i < calls; ++i) {
          EXPECT_TRUE(store.Append(job, push, from).ok());
          from.first_chunk += static_cast<int64_t>(push.size());
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() /
           (pushers * calls);
  };
  constexpr int kCalls = 1000;
  constexpr int kTurns = 3;
  for (int pushers : {1, 8}) {
    LogStore memory;
    const double memory_us = time_appends(memory, pushers, kCalls, /*numbered=*/true);
    double persisted_us[2] = {0, 0};  // unnumbered, numbered
    for (int turn = 0; turn < 2 * kTurns; ++turn) {
      const bool numbered = turn % 2 == 1;
      auto persisted = Open(1);
      persisted_us[numbered] +=
          time_appends(*persisted, pushers, kCalls / pushers, numbered) / kTurns;
      persisted.reset();
      auto reopened = Open(1);
      EXPECT_EQ(reopened->Read("j0", 0, -1, 1 << 30).chunks.size(),
                2u * (kCalls / pushers));
      reopened.reset();
      std::remove(path_.c_str());
      std::remove((path_ + "-wal").c_str());
    }
    std::printf(
        "LogStore::Append of 2 chunks of 201 bytes, %d pusher(s): %.2f us in memory, "
        "%.2f us persisted and committed (%.0f calls/s), %.2f us unnumbered\n",
        pushers, memory_us, persisted_us[1], 1e6 / persisted_us[1], persisted_us[0]);
  }
}

}  // namespace
}  // namespace elastrun::rendezvous
