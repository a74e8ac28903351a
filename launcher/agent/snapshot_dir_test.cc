// The snapshot folder on a real file system, under the test's own temporary
// base (never the real /dev/shm): modes, refusals of planted symlinks and
// foreign folders, removal without following links, holding, and the
// removal of folders nobody holds (their holders died, here as forked
// children killed with SIGKILL).
#include "launcher/agent/snapshot_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr auto kAll = [](absl::string_view) { return true; };

std::string TempDir() {
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/snapshot_dir_test-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
  return templ;
}

void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

int Mode(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return -1;
  return st.st_mode & 07777;
}

bool IsEmptyDir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return false;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    n += name != "." && name != "..";
  }
  closedir(d);
  return n == 0;
}

// Makes the folder as a launcher does and lets it go, as a launcher that
// died would: its path.
absl::StatusOr<std::string> MakeFolder(const std::string& base, const std::string& name,
                                       uid_t uid, gid_t gid) {
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> held =
      HeldSnapshotDir::Create(base, name, uid, gid);
  if (!held.ok()) return held.status();
  return (*held)->path();
}
absl::StatusOr<std::string> MakeFolder(const std::string& base, const std::string& name) {
  return MakeFolder(base, name, geteuid(), getegid());
}

// The paths of what a removal removed.
std::vector<std::string> Paths(const std::vector<RemovedSnapshotDir>& removed) {
  std::vector<std::string> paths;
  for (const RemovedSnapshotDir& dir : removed) paths.push_back(dir.path);
  return paths;
}

// Holds the folder `name` under `base` in a forked child until the child is
// killed: a launcher on the same machine.
class OtherHolder {
 public:
  OtherHolder(const std::string& base, const std::string& name) {
    int ready[2];
    if (pipe(ready) != 0) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> held =
          HeldSnapshotDir::Create(base, name);
      const char c = held.ok() ? 'y' : 'n';
      if (write(ready[1], &c, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(ready[1]);
    char c = 'n';
    held_ = read(ready[0], &c, 1) == 1 && c == 'y';
    close(ready[0]);
  }
  ~OtherHolder() { Kill(); }
  bool held() const { return held_; }
  // SIGKILLs and reaps it: its lock is gone.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool held_ = false;
};

class SnapshotDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TempDir();
    root_ = SnapshotUserRoot(base_);
  }
  // The names in the user's root.
  std::vector<std::string> RootNames() const {
    std::vector<std::string> names;
    if (DIR* d = opendir(root_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      closedir(d);
    }
    return names;
  }
  std::string base_, root_;
};

TEST(SnapshotBaseTest, OverrideThenShmThenRuntimeDirThenTemp) {
  std::map<std::string, std::string> vars;
  bool shm_ok = true;
  auto base = [&] {
    return SnapshotBase(
        [&](const std::string& n) -> std::optional<std::string> {
          auto it = vars.find(n);
          if (it == vars.end()) return std::nullopt;
          return it->second;
        },
        [&](const std::string& dir) { return dir == "/dev/shm" && shm_ok; });
  };
  EXPECT_EQ(base(), "/dev/shm");
  vars["ELASTRUN_SNAPSHOT_BASE"] = "/t/base";
  EXPECT_EQ(base(), "/t/base");
  vars["ELASTRUN_SNAPSHOT_BASE"] = "";  // set but empty: as unset
  vars["XDG_RUNTIME_DIR"] = "/run/user/7";
  vars["TMPDIR"] = "/var/tmp";
  EXPECT_EQ(base(), "/dev/shm");
  shm_ok = false;
  EXPECT_EQ(base(), "/run/user/7");
  vars.erase("XDG_RUNTIME_DIR");
  EXPECT_EQ(base(), "/var/tmp");
  vars.erase("TMPDIR");
  EXPECT_EQ(base(), "/tmp");
}

TEST(SnapshotFolderNameTest, SanitizedAndDistinct) {
  EXPECT_EQ(SnapshotFolderName("job-7.a_b"), "job-7.a_b");  // unchanged: no hash
  for (const char* id : {"..", ".", "", "a/b", "../../etc", "a b", "x@y"}) {
    const std::string name = SnapshotFolderName(id);
    EXPECT_FALSE(name.empty()) << id;
    EXPECT_NE(name, ".") << id;
    EXPECT_NE(name, "..") << id;
    EXPECT_FALSE(absl::StrContains(name, "/")) << id;
    EXPECT_FALSE(absl::StrContains(name, "@")) << id;
  }
  // Hidden names are elastrun's own (the trash): no id makes one.
  for (const char* id : {".dead-12", ".x", "..", "."}) {
    EXPECT_FALSE(absl::StartsWith(SnapshotFolderName(id), ".")) << id;
  }
  EXPECT_EQ(SnapshotFolderName("a.b"), "a.b");
  EXPECT_TRUE(absl::StartsWith(SnapshotFolderName("a/b"), "a_b-"));
  EXPECT_NE(SnapshotFolderName("a/b"), SnapshotFolderName("a_b"));
  EXPECT_NE(SnapshotFolderName("a/b"), SnapshotFolderName("a:b"));
  const std::string long_id(300, 'x');
  EXPECT_LT(SnapshotFolderName(long_id).size(), 120u);
  EXPECT_NE(SnapshotFolderName(long_id), SnapshotFolderName(long_id + "y"));
}

TEST_F(SnapshotDirTest, CreatesBothLevelsOwnerOnlyWhateverTheUmask) {
  const mode_t old = umask(0);
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job-1");
  umask(0277);  // would leave the owner without write access
  absl::StatusOr<std::string> other = MakeFolder(base_, "job-2");
  umask(old);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*dir, root_ + "/job-1");
  EXPECT_EQ(Mode(root_), 0700);
  EXPECT_EQ(Mode(*dir), 0700);
  EXPECT_EQ(Mode(*other), 0700);
  WriteFile(*other + "/rank0.slot0", "x");  // the owner can write in it
  EXPECT_TRUE(Exists(*other + "/rank0.slot0"));
}

TEST_F(SnapshotDirTest, ExistingFolderOfOursIsAdoptedWithItsFiles) {
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_TRUE(dir.ok()) << dir.status();
  WriteFile(*dir + "/rank0.slot0", "snapshot");
  absl::StatusOr<std::string> again = MakeFolder(base_, "job");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *dir);
  EXPECT_TRUE(Exists(*dir + "/rank0.slot0"));
}

TEST_F(SnapshotDirTest, BadNamesAndMissingBaseAreRefused) {
  for (const char* name : {"", ".", "..", "a/b", "../x"}) {
    absl::StatusOr<std::string> dir = MakeFolder(base_, name);
    EXPECT_TRUE(absl::IsInvalidArgument(dir.status())) << name << ": " << dir.status();
  }
  absl::StatusOr<std::string> dir = MakeFolder(base_ + "/missing", "job");
  EXPECT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(base_ + "/missing"));
}

TEST_F(SnapshotDirTest, PlantedSymlinkAtJobPathIsRefusedAndNothingIsWrittenThroughIt) {
  ASSERT_TRUE(MakeFolder(base_, "other").ok());
  const std::string target = TempDir();
  ASSERT_EQ(symlink(target.c_str(), (root_ + "/job").c_str()), 0);
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(dir.status())) << dir.status();
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + "/job is a symlink"));
  EXPECT_TRUE(IsEmptyDir(target));
  EXPECT_EQ(Mode(target), 0700);  // mkdtemp's; not chmod-ed through the link

  // Removing refuses the link too, and leaves the target alone.
  WriteFile(target + "/keep", "x");
  EXPECT_TRUE(absl::IsFailedPrecondition(RemoveSnapshotDir(root_ + "/job")));
  EXPECT_TRUE(Exists(target + "/keep"));
  EXPECT_TRUE(Exists(root_ + "/job"));
}

TEST_F(SnapshotDirTest, PlantedSymlinkOrFileAtUserRootIsRefused) {
  const std::string target = TempDir();
  ASSERT_EQ(symlink(target.c_str(), root_.c_str()), 0);
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + " is a symlink"));
  EXPECT_TRUE(IsEmptyDir(target));

  ASSERT_EQ(unlink(root_.c_str()), 0);
  WriteFile(root_, "not a folder");
  dir = MakeFolder(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + " exists and is not a folder"));
}

TEST_F(SnapshotDirTest, FolderOthersMayWriteToIsRefused) {
  ASSERT_EQ(mkdir(root_.c_str(), 0700), 0);
  ASSERT_EQ(chmod(root_.c_str(), 0777), 0);
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + " has mode 0777"));
  EXPECT_FALSE(Exists(root_ + "/job"));
}

TEST_F(SnapshotDirTest, FolderOfAnotherUserIsRefused) {
  ASSERT_EQ(mkdir(root_.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root_ + "/job").c_str(), 0700), 0);
  if (chown((root_ + "/job").c_str(), 4242, 4242) != 0) {
    GTEST_SKIP() << "cannot chown (not root): another user's folder cannot be planted";
  }
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + "/job belongs to uid 4242"));
  // Leftover removal leaves it alone too.
  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed =
      RemoveLeftoverSnapshotDirs(base_, kAll);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, IsEmpty());
  EXPECT_TRUE(Exists(root_ + "/job"));
}

TEST_F(SnapshotDirTest, RootMakesTheFolderOfTheJobsOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "only root makes folders for another user";
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job", 4242, 4243);
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string theirs = SnapshotUserRoot(base_, 4242);
  EXPECT_EQ(*dir, theirs + "/job");
  for (const std::string& level : {theirs, *dir}) {
    struct stat st;
    ASSERT_EQ(lstat(level.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4242u) << level;
    EXPECT_EQ(st.st_gid, 4243u) << level;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << level;
  }
  // Adopted again (the next round), and never handed to another user.
  EXPECT_TRUE(MakeFolder(base_, "job", 4242, 4243).ok());
  ASSERT_EQ(rename(theirs.c_str(), SnapshotUserRoot(base_, 4244).c_str()), 0);
  absl::StatusOr<std::string> other = MakeFolder(base_, "job", 4244, 4244);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(),
              HasSubstr("belongs to uid 4242, not to uid 4244"));
}

TEST_F(SnapshotDirTest, RemoveDeletesFilesAndFoldersButNotLinkTargets) {
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string outside = TempDir();
  WriteFile(outside + "/precious", "x");
  WriteFile(*dir + "/rank0.slot0", "a");
  WriteFile(*dir + "/rank0.slot1", "b");
  ASSERT_EQ(mkdir((*dir + "/sub").c_str(), 0700), 0);
  WriteFile(*dir + "/sub/f", "c");
  ASSERT_EQ(symlink(outside.c_str(), (*dir + "/link").c_str()), 0);
  ASSERT_EQ(symlink((outside + "/precious").c_str(), (*dir + "/sub/flink").c_str()), 0);

  ASSERT_TRUE(RemoveSnapshotDir(*dir).ok());
  EXPECT_FALSE(Exists(*dir));
  EXPECT_TRUE(Exists(outside + "/precious"));
  EXPECT_TRUE(Exists(root_));  // only the job's folder goes
  EXPECT_TRUE(RemoveSnapshotDir(*dir).ok());  // already gone: fine
}

// The user's folder (elastrun-<uid>, theirs) swapped for a link to another
// folder holding a folder of the job's name: a root daemon removing the
// job's folder must not remove that one.
TEST_F(SnapshotDirTest, RemoveDoesNotFollowAUserFolderSwappedForALink) {
  absl::StatusOr<std::string> dir = MakeFolder(base_, "job");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string elsewhere = TempDir();
  ASSERT_EQ(mkdir((elsewhere + "/job").c_str(), 0700), 0);
  WriteFile(elsewhere + "/job/precious", "x");
  ASSERT_EQ(rename(root_.c_str(), (root_ + ".moved").c_str()), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), root_.c_str()), 0);
  absl::Status st = RemoveSnapshotDir(*dir);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr(root_));
  EXPECT_TRUE(Exists(elsewhere + "/job/precious"));
}

TEST_F(SnapshotDirTest, OneHolderAtATimeAndAFreedFolderIsAdoptedWithItsFiles) {
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> first =
      HeldSnapshotDir::Create(base_, "job");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->path(), root_ + "/job");
  EXPECT_EQ(Mode(root_ + "/job"), 0700);
  WriteFile(root_ + "/job/rank0.slot0", "snapshot");
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> second =
      HeldSnapshotDir::Create(base_, "job");
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_THAT(second.status().message(),
              HasSubstr(root_ + "/job is in use by another launcher"));
  {
    OtherHolder other(base_, "job");  // another process is kept out too
    EXPECT_FALSE(other.held());
  }
  first->reset();  // released; the folder stays for a restart to adopt
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> again =
      HeldSnapshotDir::Create(base_, "job");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Exists(root_ + "/job/rank0.slot0"));

  ASSERT_TRUE((*again)->Remove().ok());
  EXPECT_FALSE(Exists(root_ + "/job"));
  EXPECT_TRUE((*again)->Remove().ok());  // a second time: nothing to do
  EXPECT_TRUE(absl::IsInvalidArgument(HeldSnapshotDir::Create(base_, "../x").status()));
}

TEST_F(SnapshotDirTest, AHeldFolderStaysAndOneNobodyHoldsGoes) {
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> live =
      HeldSnapshotDir::Create(base_, "live");
  ASSERT_TRUE(live.ok()) << live.status();
  WriteFile(root_ + "/live/rank0.slot0", "x");
  OtherHolder other(base_, "other-live");  // held by another process
  ASSERT_TRUE(other.held());
  ASSERT_TRUE(MakeFolder(base_, "dead").ok());
  WriteFile(root_ + "/dead/rank0.slot0", std::string(100000, 'x'));

  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed =
      RemoveLeftoverSnapshotDirs(base_, kAll);
  ASSERT_TRUE(removed.ok()) << removed.status();
  ASSERT_THAT(Paths(*removed), ElementsAre(root_ + "/dead"));
  EXPECT_GE((*removed)[0].bytes, 100000u);
  EXPECT_THAT(RootNames(), UnorderedElementsAre("live", "other-live"));  // no trash left
  EXPECT_TRUE(Exists(root_ + "/live/rank0.slot0"));

  // Its holder is SIGKILLed: nothing holds its folder any more.
  other.Kill();
  removed = RemoveLeftoverSnapshotDirs(base_, kAll);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(Paths(*removed), ElementsAre(root_ + "/other-live"));
  EXPECT_THAT(RootNames(), ElementsAre("live"));
}

TEST_F(SnapshotDirTest, FilesSymlinksAndOtherUsersFoldersAreLeftAlone) {
  ASSERT_TRUE(MakeFolder(base_, "dead").ok());
  WriteFile(root_ + "/file", "a file, not a folder");
  const std::string outside = TempDir();
  WriteFile(outside + "/precious", "x");
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link").c_str()), 0);
  ASSERT_EQ(mkdir((root_ + "/theirs").c_str(), 0700), 0);
  const bool chowned = chown((root_ + "/theirs").c_str(), 4242, 4242) == 0;

  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed =
      RemoveLeftoverSnapshotDirs(base_, kAll);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(Paths(*removed), ElementsAre(root_ + "/dead"));
  EXPECT_TRUE(Exists(root_ + "/file"));
  EXPECT_TRUE(Exists(root_ + "/link"));
  EXPECT_TRUE(Exists(outside + "/precious"));
  if (chowned) {
    EXPECT_TRUE(Exists(root_ + "/theirs"));
  }
}

TEST_F(SnapshotDirTest, TrashOfAKilledCleanerGoesUnlessHeld) {
  ASSERT_TRUE(MakeFolder(base_, "keep").ok());  // makes the root
  for (const char* trash : {".dead-1", ".dead-2"}) {
    ASSERT_EQ(mkdir((root_ + "/" + trash).c_str(), 0700), 0);
    WriteFile(root_ + "/" + trash + "/rank0.slot0", "x");
  }
  // A cleaner still removing .dead-2 holds it.
  const int busy = open((root_ + "/.dead-2").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(busy, 0);
  ASSERT_EQ(flock(busy, LOCK_EX | LOCK_NB), 0);
  // Trash goes whatever the caller accepts.
  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed =
      RemoveLeftoverSnapshotDirs(base_, [](absl::string_view) { return false; });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(Paths(*removed), ElementsAre(root_ + "/.dead-1"));
  EXPECT_THAT(RootNames(), UnorderedElementsAre("keep", ".dead-2"));
  close(busy);
}

TEST_F(SnapshotDirTest, ALockOnAFolderMovedAwayIsNotAHold) {
  ASSERT_TRUE(MakeFolder(base_, "job").ok());
  const int root_fd = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(root_fd, 0);
  auto open_job = [&] {
    return openat(root_fd, "job", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  };
  const std::string path = root_ + "/job";

  // Still there and free: held.
  int fd = open_job();
  absl::StatusOr<bool> locked = LockSnapshotDirAt(root_fd, "job", path, fd);
  ASSERT_TRUE(locked.ok()) << locked.status();
  EXPECT_TRUE(*locked);
  // Held by that descriptor: in use, for another one.
  const int other_fd = open_job();
  locked = LockSnapshotDirAt(root_fd, "job", path, other_fd);
  EXPECT_TRUE(absl::IsFailedPrecondition(locked.status())) << locked.status();
  close(fd);

  // A cleaner moved it to the trash after this opened it: the lock, free or
  // not, is on a folder no launcher finds by its name.
  ASSERT_EQ(renameat(root_fd, "job", root_fd, ".dead-9"), 0);
  locked = LockSnapshotDirAt(root_fd, "job", path, other_fd);
  ASSERT_TRUE(locked.ok()) << locked.status();
  EXPECT_FALSE(*locked);
  // ... and a new folder took the name: still not the one locked.
  ASSERT_TRUE(MakeFolder(base_, "job").ok());
  const int trash_fd = open((root_ + "/.dead-9").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(trash_fd, 0);
  locked = LockSnapshotDirAt(root_fd, "job", path, trash_fd);  // other_fd holds it
  ASSERT_TRUE(locked.ok()) << locked.status();
  EXPECT_FALSE(*locked);
  close(other_fd);
  locked = LockSnapshotDirAt(root_fd, "job", path, trash_fd);  // free now
  ASSERT_TRUE(locked.ok()) << locked.status();
  EXPECT_FALSE(*locked);
  close(trash_fd);

  // HeldSnapshotDir takes the folder at the name, not the trash.
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> held =
      HeldSnapshotDir::Create(base_, "job");
  ASSERT_TRUE(held.ok()) << held.status();
  struct stat named, trash;
  ASSERT_EQ(lstat(path.c_str(), &named), 0);
  ASSERT_EQ(lstat((root_ + "/.dead-9").c_str(), &trash), 0);
  EXPECT_NE(named.st_ino, trash.st_ino);
  close(root_fd);
}

TEST_F(SnapshotDirTest, LeftoversAreOnlyOurMatchingFolders) {
  for (const char* name : {"j1@n1", "j2@n1", "j1@n2", "run-x"}) {
    absl::StatusOr<std::string> dir = MakeFolder(base_, name);
    ASSERT_TRUE(dir.ok()) << dir.status();
    WriteFile(*dir + "/rank0.slot0", "x");
  }
  WriteFile(root_ + "/file@n1", "a file, not a folder");
  const std::string outside = TempDir();
  WriteFile(outside + "/precious", "x");
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link@n1").c_str()), 0);

  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed = RemoveLeftoverSnapshotDirs(
      base_, [](absl::string_view name) { return absl::EndsWith(name, "@n1"); });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(Paths(*removed), UnorderedElementsAre(root_ + "/j1@n1", root_ + "/j2@n1"));
  EXPECT_FALSE(Exists(root_ + "/j1@n1"));
  EXPECT_TRUE(Exists(root_ + "/j1@n2/rank0.slot0"));
  EXPECT_TRUE(Exists(root_ + "/run-x/rank0.slot0"));
  EXPECT_TRUE(Exists(root_ + "/file@n1"));
  EXPECT_TRUE(Exists(root_ + "/link@n1"));
  EXPECT_TRUE(Exists(outside + "/precious"));

  // No root yet: nothing to do.
  removed = RemoveLeftoverSnapshotDirs(base_ + "/none", kAll);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, IsEmpty());
}

}  // namespace
}  // namespace elastrun::launcher
