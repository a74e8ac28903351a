// CheckpointPersister against a real SnapshotArea (process memory) and real
// files: what it writes is the snapshot that was newest when asked, whole
// and verified, while the writer goes on snapshotting; a failed write is
// reported and never taken for done.
#include "trainer/persister.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint_file.h"

namespace elastrun::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = std::string(ELASTRUN_TRAINER_TEST_DIR) + "/" +
                          info->test_suite_name() + "/" + info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes `bytes` as the area's next snapshot with `key`.
void Snapshot(worker::SnapshotArea& area, int64_t key, const std::string& bytes) {
  absl::StatusOr<char*> dst = area.BeginWrite(bytes.size());
  ASSERT_TRUE(dst.ok()) << dst.status();
  std::memcpy(*dst, bytes.data(), bytes.size());
  area.Commit(key, "meta");
}

RunIdentity TheRun() { return RunIdentity{"job-1", "digest"}; }

TEST(PersisterTest, WritesTheSnapshotNewestWhenAskedWhileTheWriterGoesOn) {
  const std::string dir = TestDir() + "/checkpoints";
  auto area = worker::SnapshotArea::Open("", "rank0");
  ASSERT_TRUE(area.ok()) << area.status();
  CheckpointPersister persister(area->get(), dir, TheRun());
  const std::string first(1 << 20, 'a');
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 7, first));
  ASSERT_TRUE(persister.Persist(/*best=*/true).ok());
  // The writer snapshots on at once, into the other slot and back.
  for (int64_t key = 8; key < 12; ++key) {
    persister.WaitUnpinned();
    ASSERT_NO_FATAL_FAILURE(Snapshot(**area, key, std::string(1 << 20, 'b')));
  }
  ASSERT_TRUE(persister.Flush().ok());
  EXPECT_EQ(persister.written(), 1);
  for (const std::string& name :
       {NumberedCheckpointPath(dir, 7, TheRun().Tag()), dir + "/last.ckpt", dir + "/best.ckpt"}) {
    absl::StatusOr<CheckpointBlob> blob = ReadCheckpointFile(name);
    ASSERT_TRUE(blob.ok()) << blob.status();
    EXPECT_EQ(blob->key, 7) << name;
    EXPECT_EQ(blob->run, TheRun()) << name;
    EXPECT_TRUE(blob->payload == first) << name << ": not the snapshot of key 7";
  }
}

// A slow disk: a checkpoint's write and fsync may take many steps. The
// training thread must snapshot every step meanwhile (a failure then loses
// nothing since the last snapshot), with a second checkpoint asked for
// while the first is written. The slow write is SaveCheckpoint held on a
// notification: a disk cannot be made slow on demand here.
TEST(PersisterTest, EveryStepIsSnapshottedWhileACheckpointIsWritten) {
  const std::string dir = TestDir() + "/checkpoints";
  auto area = worker::SnapshotArea::Open("", "rank0");
  ASSERT_TRUE(area.ok()) << area.status();
  absl::Notification writing, release;
  CheckpointPersister persister(
      area->get(), dir, TheRun(), 2,
      [&](const std::string& d, const CheckpointBlob& blob, bool best, int keep) {
        if (!writing.HasBeenNotified()) writing.Notify();
        release.WaitForNotification();
        return SaveCheckpoint(d, blob, best, keep);
      });
  // Let go before the persister's destructor joins its thread, however
  // the test ends.
  auto let_go = absl::MakeCleanup([&] {
    if (!release.HasBeenNotified()) release.Notify();
  });
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 10, "state 10"));
  ASSERT_TRUE(persister.Persist(false).ok());
  writing.WaitForNotification();  // The first file is being written.
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 11, "state 11"));
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 12, "state 12"));
  ASSERT_TRUE(persister.Persist(false).ok());
  // Copied out at once, not after the file in progress.
  ASSERT_TRUE(persister.WaitUnpinned(absl::Seconds(30)))
      << "the second checkpoint's copy waited for the first file";
  for (int64_t key = 13; key < 20; ++key) {
    ASSERT_NO_FATAL_FAILURE(Snapshot(**area, key, "state " + std::to_string(key)))
        << "no snapshot of step " << key << " while a checkpoint is written";
  }
  EXPECT_EQ((*area)->Valid().front().key, 19);
  std::move(let_go).Invoke();
  ASSERT_TRUE(persister.Flush().ok());
  EXPECT_EQ(persister.written(), 2);
  for (int64_t key : {10, 12}) {
    absl::StatusOr<CheckpointBlob> blob =
        ReadCheckpointFile(NumberedCheckpointPath(dir, key, TheRun().Tag()));
    ASSERT_TRUE(blob.ok()) << blob.status();
    EXPECT_EQ(blob->payload, "state " + std::to_string(key));
  }
}

TEST(PersisterTest, KeepsTheNewestTwoAndLastFollows) {
  const std::string dir = TestDir() + "/checkpoints";
  auto area = worker::SnapshotArea::Open("", "rank0");
  ASSERT_TRUE(area.ok()) << area.status();
  CheckpointPersister persister(area->get(), dir, TheRun());
  for (int64_t key = 1; key <= 4; ++key) {
    persister.WaitUnpinned();
    ASSERT_NO_FATAL_FAILURE(Snapshot(**area, key, "state " + std::to_string(key)));
    ASSERT_TRUE(persister.Persist(false).ok());
  }
  ASSERT_TRUE(persister.Flush().ok());
  EXPECT_EQ(persister.written(), 4);
  EXPECT_THAT(ListCheckpoints(dir),
              ::testing::ElementsAre(NumberedCheckpointPath(dir, 4, TheRun().Tag()),
                                     NumberedCheckpointPath(dir, 3, TheRun().Tag())));
  absl::StatusOr<CheckpointBlob> last = ReadCheckpointFile(dir + "/last.ckpt");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->payload, "state 4");
  EXPECT_FALSE(fs::exists(dir + "/best.ckpt"));
}

TEST(PersisterTest, AFailedWriteIsReportedAndEarlierFilesStay) {
  const std::string root = TestDir();
  const std::string dir = root + "/checkpoints";
  auto area = worker::SnapshotArea::Open("", "rank0");
  ASSERT_TRUE(area.ok()) << area.status();
  CheckpointPersister persister(area->get(), dir, TheRun());
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 1, "one"));
  ASSERT_TRUE(persister.Persist(false).ok());
  ASSERT_TRUE(persister.Flush().ok());
  // The folder replaced by a file: the next write cannot be made.
  fs::rename(dir, root + "/kept");
  std::ofstream(dir) << "not a folder";
  persister.WaitUnpinned();
  ASSERT_NO_FATAL_FAILURE(Snapshot(**area, 2, "two"));
  ASSERT_TRUE(persister.Persist(false).ok());
  absl::Status s = persister.Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(dir));
  EXPECT_EQ(persister.written(), 1);
  EXPECT_TRUE(persister.PollError().ok()) << "an error is reported once";
  absl::StatusOr<CheckpointBlob> kept = ReadCheckpointFile(root + "/kept/last.ckpt");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->payload, "one");
}

TEST(PersisterTest, NothingToPersistIsAnError) {
  auto area = worker::SnapshotArea::Open("", "rank0");
  ASSERT_TRUE(area.ok()) << area.status();
  CheckpointPersister persister(area->get(), TestDir(), TheRun());
  absl::Status s = persister.Persist(false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(persister.Flush().ok());
}

}  // namespace
}  // namespace elastrun::trainer
