#include "rendezvous/log_store.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

v1::LogChunk Chunk(int rank, const std::string& data) {
  v1::LogChunk c;
  c.set_rank(rank);
  c.set_stream("stdout");
  c.set_data(data);
  return c;
}

// A restarted service starts its numbering at its start time: a follower
// that saw chunk N of the service before reads the new chunks after N.
TEST(LogStoreTest, NumberingStartsAtFirstSeqSoARestartedServiceNumbersAbove) {
  LogStore before(LogStore::Options{});
  ASSERT_TRUE(before.Append("j", {Chunk(0, "old\n"), Chunk(0, "old2\n")}).ok());
  const int64_t seen = before.Read("j", 0, -1, 1 << 20).chunks.back().seq();
  LogStore::Options later;
  later.first_seq = 1000;
  LogStore after(later);
  ASSERT_TRUE(after.Append("j", {Chunk(0, "new\n")}).ok());
  auto read = after.Read("j", seen, -1, 1 << 20);
  ASSERT_EQ(read.chunks.size(), 1u);
  EXPECT_EQ(read.chunks[0].seq(), 1000);
  EXPECT_EQ(read.chunks[0].data(), "new\n");
}

TEST(LogStoreTest, ReadsInOrderAfterACursorAndByRank) {
  LogStore store;
  ASSERT_TRUE(store.Append("j", {Chunk(0, "a\n"), Chunk(1, "b\n")}).ok());
  ASSERT_TRUE(store.Append("j", {Chunk(0, "c\n")}).ok());
  auto all = store.Read("j", 0, -1, 1 << 20);
  ASSERT_EQ(all.chunks.size(), 3u);
  EXPECT_EQ(all.chunks[0].seq(), 1);
  EXPECT_EQ(all.chunks[2].data(), "c\n");
  EXPECT_FALSE(all.dropped);
  auto after = store.Read("j", 2, -1, 1 << 20);
  ASSERT_EQ(after.chunks.size(), 1u);
  EXPECT_EQ(after.chunks[0].data(), "c\n");
  auto rank0 = store.Read("j", 0, 0, 1 << 20);
  ASSERT_EQ(rank0.chunks.size(), 2u);
  EXPECT_EQ(rank0.chunks[1].data(), "c\n");
  EXPECT_TRUE(store.Read("other", 0, -1, 1 << 20).chunks.empty());
}

TEST(LogStoreTest, BoundedPerJobOldestDroppedAndReported) {
  LogStore store(LogStore::Options{/*max_bytes_per_job=*/10, /*max_jobs=*/2});
  ASSERT_TRUE(store.Append("j", {Chunk(0, "12345\n"), Chunk(0, "abcde\n")}).ok());
  auto r = store.Read("j", 0, -1, 1 << 20);
  ASSERT_EQ(r.chunks.size(), 1u);  // 12 bytes > 10: the first chunk went
  EXPECT_EQ(r.chunks[0].data(), "abcde\n");
  EXPECT_TRUE(r.dropped);
  // A third job evicts the oldest job.
  ASSERT_TRUE(store.Append("k", {Chunk(0, "x\n")}).ok());
  ASSERT_TRUE(store.Append("l", {Chunk(0, "y\n")}).ok());
  EXPECT_TRUE(store.Read("j", 0, -1, 1 << 20).chunks.empty());
  EXPECT_EQ(store.Read("l", 0, -1, 1 << 20).chunks.size(), 1u);
}

// A gap is what a reader missed: chunks dropped after its position, not
// the numbering's start (a service numbers from its start time).
TEST(LogStoreTest, DroppedMeansChunksAfterTheReadersPositionWereLost) {
  LogStore::Options o;
  o.max_bytes_per_job = 9;
  o.first_seq = 1000;
  LogStore store(o);
  ASSERT_TRUE(store.Append("j", {Chunk(0, "1234\n")}).ok());  // seq 1000
  EXPECT_FALSE(store.Read("j", 0, -1, 1 << 20).dropped);
  const int64_t seen = store.Read("j", 0, -1, 1 << 20).chunks.back().seq();
  ASSERT_TRUE(store.Append("j", {Chunk(0, "abcd\n"), Chunk(0, "wxyz\n")}).ok());
  // 1000 and 1001 went; the reader had seen 1000 only: 1001 is its gap.
  auto r = store.Read("j", seen, -1, 1 << 20);
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0].data(), "wxyz\n");
  EXPECT_TRUE(r.dropped);
  EXPECT_FALSE(store.Read("j", seen + 1, -1, 1 << 20).dropped);
}

// The jobs bound evicts finished jobs' logs, oldest first, never a live
// job's (its follower would skip lines, and its first lines would be gone);
// a read of an evicted log says so.
TEST(LogStoreTest, ALiveJobsLogIsNeverEvictedAndAnEvictedOneSaysSo) {
  LogStore::Options o;
  o.max_jobs = 2;
  o.keep = [](const std::string& job) { return job == "live"; };
  LogStore store(o);
  for (const char* job : {"live", "a", "b", "c"}) {
    ASSERT_TRUE(store.Append(job, {Chunk(0, std::string(job) + "\n")}).ok()) << job;
  }
  EXPECT_EQ(store.Read("live", 0, -1, 1 << 20).chunks.size(), 1u);
  EXPECT_FALSE(store.Read("live", 0, -1, 1 << 20).evicted);
  EXPECT_TRUE(store.Read("a", 0, -1, 1 << 20).evicted);
  EXPECT_TRUE(store.Read("a", 0, -1, 1 << 20).chunks.empty());
  EXPECT_EQ(store.Read("c", 0, -1, 1 << 20).chunks.size(), 1u);
  EXPECT_FALSE(store.Read("never-printed", 0, -1, 1 << 20).evicted);
  // Every log live: the bound gives way rather than a live job's log.
  o.keep = [](const std::string&) { return true; };
  LogStore all_live(o);
  for (const char* job : {"x", "y", "z"}) {
    ASSERT_TRUE(all_live.Append(job, {Chunk(0, "l\n")}).ok());
  }
  for (const char* job : {"x", "y", "z"}) {
    EXPECT_EQ(all_live.Read(job, 0, -1, 1 << 20).chunks.size(), 1u) << job;
  }
}

TEST(LogStoreTest, ReadHonoursByteBudgetButReturnsAtLeastOneChunk) {
  LogStore store;
  ASSERT_TRUE(store.Append("j", {Chunk(0, std::string(100, 'x')), Chunk(0, "y\n")}).ok());
  auto r = store.Read("j", 0, -1, 10);
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0].data().size(), 100u);
}

// A daemon sends a push again when it got no answer: chunks at or below
// the number stored of its incarnation are skipped; a new incarnation (a
// restarted daemon) and unnumbered pushes are stored as new.
TEST(LogStoreTest, AResendOfNumberedChunksIsStoredOnce) {
  LogStore store;
  const LogStore::Origin first{"n1", "inc-a", 1};
  ASSERT_TRUE(store.Append("j", {Chunk(0, "a\n"), Chunk(1, "b\n")}, first).ok());
  ASSERT_TRUE(store.Append("j", {Chunk(0, "a\n"), Chunk(1, "b\n")}, first).ok());
  // Overlapping: chunk 2 again, chunk 3 new.
  ASSERT_TRUE(
      store.Append("j", {Chunk(1, "b\n"), Chunk(0, "c\n")}, {"n1", "inc-a", 2}).ok());
  // Another node's chunk 1, and a restarted daemon's chunk 1.
  ASSERT_TRUE(store.Append("j", {Chunk(2, "d\n")}, {"n2", "inc-b", 1}).ok());
  ASSERT_TRUE(store.Append("j", {Chunk(0, "e\n")}, {"n1", "inc-c", 1}).ok());
  // Unnumbered pushes (an older daemon) are all kept.
  ASSERT_TRUE(store.Append("j", {Chunk(0, "f\n")}).ok());
  ASSERT_TRUE(store.Append("j", {Chunk(0, "f\n")}).ok());
  std::string all;
  for (const v1::LogChunk& c : store.Read("j", 0, -1, 1 << 20).chunks) all += c.data();
  EXPECT_EQ(all, "a\nb\nc\nd\ne\nf\nf\n");
  // The numbers are per job: the same numbers in another job are new.
  ASSERT_TRUE(store.Append("k", {Chunk(0, "k\n")}, first).ok());
  EXPECT_EQ(store.Read("k", 0, -1, 1 << 20).chunks.size(), 1u);
}

}  // namespace
}  // namespace elastrun::rendezvous
