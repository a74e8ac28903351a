#include "worker/snapshot_area.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kMiB = 1 << 20;
constexpr long kTmpfsMagic = 0x01021994;

// Bytes that differ with `seed` and along the buffer (a 4099-byte block
// repeated, so no two pages are alike).
std::string Pattern(size_t size, int seed) {
  std::string block(4099, '\0');
  for (size_t i = 0; i < block.size(); ++i)
    block[i] = static_cast<char>(i * 131 + seed * 7);
  std::string out;
  while (out.size() < size) out += block;
  out.resize(size);
  return out;
}

absl::Status Write(SnapshotArea& area, int64_t key, const std::string& meta,
                   const std::string& payload) {
  absl::StatusOr<char*> dst = area.BeginWrite(payload.size());
  if (!dst.ok()) return dst.status();
  std::memcpy(*dst, payload.data(), payload.size());
  area.Commit(key, meta);
  return absl::OkStatus();
}

// The keys of the valid slots, newest first.
std::vector<int64_t> Keys(const SnapshotArea& area) {
  std::vector<int64_t> keys;
  for (const SnapshotSlot& slot : area.Valid()) keys.push_back(slot.key);
  return keys;
}

// Whether the page at `p` is mapped in this process (mincore fails with
// ENOMEM on an unmapped one).
bool PageMapped(const char* p) {
  unsigned char in_core;
  return mincore(const_cast<char*>(p), 1, &in_core) == 0 || errno != ENOMEM;
}

// A fresh folder per test, on /dev/shm (a tmpfs, where the launcher puts
// snapshots) when it is usable, else in the test's temp folder.
class SnapshotAreaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ =
        access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : ::testing::TempDir();
    templ += "snapshot_area_test.XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::system(absl::StrCat("rm -rf '", dir_, "'").c_str()); }

  std::unique_ptr<SnapshotArea> OpenArea(const std::string& dir) {
    absl::StatusOr<std::unique_ptr<SnapshotArea>> area = SnapshotArea::Open(dir, "rank0");
    EXPECT_TRUE(area.ok()) << area.status();
    return area.ok() ? std::move(*area) : nullptr;
  }
  std::unique_ptr<SnapshotArea> OpenArea() { return OpenArea(dir_); }

  // Runs `body` in a child that exits with its result; returns the wait status.
  template <typename Body>
  static int RunChild(Body body) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    int status = -1;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    return status;
  }

  std::string dir_;
};

TEST_F(SnapshotAreaTest, CommittedSnapshotSurvivesReopen) {
  const std::string payload = Pattern(10000, 1);
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(Write(*area, 7, "run=a digest=ff world=2", payload).ok());
  const uint64_t first_sequence = area->Valid().at(0).sequence;
  area.reset();

  area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_THAT(Keys(*area), ElementsAre(7));
  const SnapshotSlot slot = area->Valid()[0];
  EXPECT_EQ(slot.meta, "run=a digest=ff world=2");
  EXPECT_EQ(slot.bytes, payload);
  struct stat st;
  ASSERT_EQ(stat(absl::StrCat(dir_, "/rank0.slot", slot.index).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // The sequence continues across processes; the newest comes first.
  ASSERT_TRUE(Write(*area, 8, "", Pattern(100, 2)).ok());
  ASSERT_THAT(Keys(*area), ElementsAre(8, 7));
  EXPECT_GT(area->Valid()[0].sequence, first_sequence);
  EXPECT_EQ(area->Valid()[1].bytes, payload);
}

TEST_F(SnapshotAreaTest, AbortAndClearLeaveNoSnapshot) {
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(Write(*area, 1, "one", Pattern(5000, 1)).ok());
  ASSERT_TRUE(area->BeginWrite(5000).ok());
  EXPECT_EQ(area->BeginWrite(5000).status().code(),
            absl::StatusCode::kFailedPrecondition);
  area->Abort();
  EXPECT_THAT(Keys(*area), ElementsAre(1));

  area->Clear();
  EXPECT_TRUE(area->Valid().empty());
  EXPECT_FALSE(area->PinNewest().has_value());
  area = OpenArea();
  ASSERT_NE(area, nullptr);
  EXPECT_TRUE(area->Valid().empty());
}

TEST_F(SnapshotAreaTest, ProcessKilledMidWriteLeavesPreviousSnapshotValid) {
  const std::string first = Pattern(4 * kMiB, 1);
  const std::string second = Pattern(4 * kMiB, 2);
  {
    auto area = OpenArea();
    ASSERT_NE(area, nullptr);
    // Both slots valid: the child overwrites the older one.
    ASSERT_TRUE(Write(*area, 0, "zeroth", Pattern(kMiB, 0)).ok());
    ASSERT_TRUE(Write(*area, 1, "first", first).ok());
  }
  int mid_write[2];
  ASSERT_EQ(pipe(mid_write), 0);
  const int status = RunChild([&] {
    auto area = SnapshotArea::Open(dir_, "rank0");
    if (!area.ok()) return 2;
    absl::StatusOr<char*> dst = (*area)->BeginWrite(second.size());
    if (!dst.ok()) return 3;
    std::memcpy(*dst, second.data(), second.size() / 2);
    // Tell the parent it got here, then die as a SIGKILL from outside would.
    if (write(mid_write[1], "x", 1) != 1) return 4;
    raise(SIGKILL);
    return 5;
  });
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  close(mid_write[1]);
  char byte = 0;
  EXPECT_EQ(read(mid_write[0], &byte, 1), 1) << "the child was not killed mid-write";
  close(mid_write[0]);

  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_THAT(Keys(*area), ElementsAre(1));
  const SnapshotSlot slot = area->Valid()[0];
  EXPECT_EQ(slot.meta, "first");
  EXPECT_TRUE(slot.bytes == first);
  // The torn half really is in the other slot's file, which reads as invalid.
  std::ifstream in(absl::StrCat(dir_, "/rank0.slot", 1 - slot.index), std::ios::binary);
  const std::string torn((std::istreambuf_iterator<char>(in)), {});
  const size_t half = second.size() / 2;
  EXPECT_TRUE(torn.compare(SnapshotArea::kHeaderBytes, half, second, 0, half) == 0);

  // The next write reuses the torn slot, not the valid one.
  ASSERT_TRUE(Write(*area, 2, "second", second).ok());
  ASSERT_THAT(Keys(*area), ElementsAre(2, 1));
  EXPECT_TRUE(area->Valid()[1].bytes == first);
}

TEST_F(SnapshotAreaTest, PinnedSlotIsNotRewritten) {
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(Write(*area, 1, "", Pattern(3000, 1)).ok());
  ASSERT_TRUE(Write(*area, 2, "", Pattern(3000, 2)).ok());
  std::optional<SnapshotSlot> pinned = area->PinNewest();
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->key, 2);
  EXPECT_FALSE(area->PinNewest().has_value()) << "at most one pin";

  // The writer writes the other slot once, then has nowhere to write.
  ASSERT_TRUE(Write(*area, 3, "", Pattern(3000, 3)).ok());
  absl::StatusOr<char*> blocked = area->BeginWrite(3000);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kUnavailable) << blocked.status();
  EXPECT_EQ(pinned->bytes, Pattern(3000, 2));
  EXPECT_THAT(Keys(*area), ElementsAre(3, 2));

  area->Unpin();
  ASSERT_TRUE(Write(*area, 4, "", Pattern(3000, 4)).ok());
  EXPECT_THAT(Keys(*area), ElementsAre(4, 3));
  EXPECT_EQ(area->Valid()[0].index, pinned->index);
}

TEST_F(SnapshotAreaTest, GrowingOneSlotKeepsThePinnedSlotReadable) {
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  const std::string small = Pattern(100, 1);
  ASSERT_TRUE(Write(*area, 1, "", small).ok());
  std::optional<SnapshotSlot> pinned = area->PinNewest();
  ASSERT_TRUE(pinned.has_value());

  const std::string big = Pattern(8 * kMiB, 2);
  ASSERT_TRUE(Write(*area, 2, "", big).ok());
  EXPECT_EQ(pinned->bytes, small);  // still mapped where it was
  area->Unpin();

  const std::string bigger = Pattern(16 * kMiB, 3);
  ASSERT_TRUE(Write(*area, 3, "", bigger).ok());  // grows the pinned-before slot
  area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_THAT(Keys(*area), ElementsAre(3, 2));
  EXPECT_TRUE(area->Valid()[0].bytes == bigger);
  EXPECT_TRUE(area->Valid()[1].bytes == big);
}

TEST_F(SnapshotAreaTest, RefusesASymlinkedSlotFile) {
  const std::string target = dir_ + "/elsewhere";
  const std::string link = dir_ + "/rank0.slot0";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const absl::Status status = SnapshotArea::Open(dir_, "rank0").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr(link + " is a symbolic link"));
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "the link was followed";
}

TEST_F(SnapshotAreaTest, RefusesAnotherUsersSlotFile) {
  if (geteuid() != 0) GTEST_SKIP() << "making a file owned by another uid needs root";
  const std::string path = dir_ + "/rank0.slot1";
  std::ofstream(path) << "";
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  const absl::Status status = SnapshotArea::Open(dir_, "rank0").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr(path + ": it is owned by uid 65534"));
}

// Runs in a child whose `dir` has under 4 MiB to give: a 4 MiB snapshot is
// refused with ResourceExhausted naming the folder (not left to SIGBUS in the
// memcpy) and the snapshot already taken stays valid. Exits 0 if so.
int CheckExhaustion(const std::string& dir) {
  auto area = SnapshotArea::Open(dir, "rank0");
  if (!area.ok() || !Write(**area, 1, "small", Pattern(8000, 1)).ok()) return 10;
  absl::StatusOr<char*> big = (*area)->BeginWrite(4 * kMiB);
  if (big.ok()) return 1;
  std::fprintf(stderr, "BeginWrite: %s\n", big.status().ToString().c_str());
  if (big.status().code() != absl::StatusCode::kResourceExhausted) return 11;
  if (big.status().message().find(dir) == absl::string_view::npos) return 12;
  return Keys(**area) == std::vector<int64_t>{1} ? 0 : 13;
}

TEST_F(SnapshotAreaTest, FullTmpfsIsResourceExhausted) {
  // A 1 MiB tmpfs in a private mount namespace: posix_fallocate fails ENOSPC.
  const std::string small = dir_ + "/small";
  ASSERT_EQ(mkdir(small.c_str(), 0700), 0);
  const int status = RunChild([&small] {
    const bool mounted =
        testing::EnterPrivateMountNamespace() &&
        mount("none", small.c_str(), "tmpfs", 0, "size=1m,mode=0700") == 0;
    return mounted ? CheckExhaustion(small) : 20;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 20)
    GTEST_SKIP() << "cannot mount a tmpfs here (no root, no userns)";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(SnapshotAreaTest, FileSizeLimitIsResourceExhausted) {
  // A file size limit fails posix_fallocate with EFBIG, on any file system.
  const int status = RunChild([this] {
    signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{kMiB, kMiB};
    return setrlimit(RLIMIT_FSIZE, &limit) == 0 ? CheckExhaustion(dir_) : 20;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(SnapshotAreaTest, AnonymousAreaLivesOnlyInItsObject) {
  auto area = OpenArea("");
  ASSERT_NE(area, nullptr);
  const std::string payload = Pattern(2 * kMiB, 1);
  ASSERT_TRUE(Write(*area, 5, "m", payload).ok());
  std::optional<SnapshotSlot> pinned = area->PinNewest();
  ASSERT_TRUE(pinned.has_value());
  ASSERT_TRUE(Write(*area, 6, "m", Pattern(kMiB, 2)).ok());
  EXPECT_EQ(pinned->bytes, payload);
  area->Unpin();

  auto again = OpenArea("");
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->Valid().empty());
  EXPECT_THAT(Keys(*area), ElementsAre(6, 5));
}

TEST_F(SnapshotAreaTest, ForkedChildInheritsNoSlotMemory) {
  for (const std::string& dir : {dir_, std::string()}) {
    SCOPED_TRACE(dir.empty() ? "anonymous memory" : "slot files");
    auto area = OpenArea(dir);
    ASSERT_NE(area, nullptr);
    // Each slot grows from its header, then the first one grows again (a
    // remap of a mapping already kept from children).
    for (size_t size : {kMiB, kMiB, 3 * kMiB}) {
      SCOPED_TRACE(size);
      ASSERT_TRUE(Write(*area, static_cast<int64_t>(size), "m", Pattern(size, 1)).ok());
      const std::vector<SnapshotSlot> slots = area->Valid();
      ASSERT_FALSE(slots.empty());
      for (const SnapshotSlot& slot : slots) {
        ASSERT_TRUE(PageMapped(slot.bytes.data())) << "slot " << slot.index;
      }
      // The child looks for the slots' files and memfds among its mappings
      // by name, not at their addresses: a runtime that maps memory in the
      // child (ThreadSanitizer's does) may be given the freed range.
      const int status = RunChild([] {
        // Neither a slot file nor its memfd ("memfd:elastrun-snapshot-rank0.slotN").
        std::ifstream maps("/proc/self/maps");
        const std::string text(std::istreambuf_iterator<char>(maps), {});
        if (text.empty()) return 2;
        return text.find("rank0.slot") == std::string::npos ? 0 : 3;
      });
      ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
      EXPECT_EQ(WEXITSTATUS(status), 0)
          << "2: no /proc/self/maps; 3: the child's maps show a slot";
    }
  }
}

TEST_F(SnapshotAreaTest, WriterAndPersisterThreads) {
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  constexpr int kWrites = 200;
  constexpr size_t kSize = 64 * 1024;
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  // Every payload byte is its key's low byte: a persister that saw a slot
  // being rewritten under its pin would find a mix.
  auto check = [&](const SnapshotSlot& slot) {
    if (slot.bytes != std::string(kSize, static_cast<char>(slot.key))) torn.fetch_add(1);
  };
  std::thread persister([&] {
    while (!done.load()) {
      if (std::optional<SnapshotSlot> slot = area->PinNewest()) {
        check(*slot);
        area->Unpin();
      }
    }
  });
  for (int key = 0; key < kWrites; ++key) {
    absl::StatusOr<char*> dst = area->BeginWrite(kSize);
    if (dst.ok()) {
      std::memset(*dst, static_cast<char>(key), kSize);
      area->Commit(key, "");
    } else {
      EXPECT_EQ(dst.status().code(), absl::StatusCode::kUnavailable) << dst.status();
    }
  }
  done.store(true);
  persister.join();
  check(area->PinNewest().value_or(SnapshotSlot{}));  // an empty slot counts as torn
  EXPECT_EQ(torn.load(), 0);
}

// A write into a slot that already has the room is one memcpy: BeginWrite
// neither zeroes the slot (its old bytes are still there) nor maps it afresh
// (the memcpy takes almost no page faults). Fresh memory is only taken, with
// fallocate, when a slot grows.
TEST_F(SnapshotAreaTest, HundredMegabyteWriteIsOnePassOverTheMemory) {
  struct statfs fs;
  ASSERT_EQ(statfs(dir_.c_str(), &fs), 0);
  if (static_cast<long>(fs.f_type) != kTmpfsMagic) {
    GTEST_SKIP() << dir_ << " is not a tmpfs (on disk, writeback faults too)";
  }
  constexpr size_t kSize = 100 * kMiB;
  const std::string data = Pattern(kSize, 1);
  auto area = OpenArea();
  ASSERT_NE(area, nullptr);
  ASSERT_TRUE(Write(*area, 1, "", data).ok());  // grows one slot
  ASSERT_TRUE(Write(*area, 2, "", data).ok());  // and the other

  // The best of three writes into grown slots: the kernel's own sampling
  // (NUMA balancing) may unmap pages now and then, a fresh mapping every time.
  constexpr long kFewFaults = kSize / 4096 / 100;
  long faults = kFewFaults;
  for (int key = 3; key < 6 && faults >= kFewFaults; ++key) {
    rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    absl::StatusOr<char*> dst = area->BeginWrite(kSize);
    ASSERT_TRUE(dst.ok()) << dst.status();
    std::memcpy(*dst, data.data(), kSize);
    area->Commit(key, "");
    getrusage(RUSAGE_THREAD, &after);
    faults = after.ru_minflt - before.ru_minflt + after.ru_majflt - before.ru_majflt;
  }
  EXPECT_LT(faults, kFewFaults) << "the slot was mapped afresh";

  // Once more, checking what BeginWrite handed out: the slot's old bytes.
  absl::StatusOr<char*> dst = area->BeginWrite(kSize);
  ASSERT_TRUE(dst.ok()) << dst.status();
  EXPECT_EQ(std::memcmp(*dst, data.data(), kSize), 0) << "BeginWrite zeroed the slot";
  area->Abort();
}

}  // namespace
}  // namespace elastrun::worker
