// The snapshot folder on a real file system, under the test's own temporary
// base (never the real /dev/shm): modes, refusals of planted symlinks and
// foreign folders, removal without following links, leftovers.
#include "launcher/agent/snapshot_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

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

class SnapshotDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = TempDir();
    root_ = SnapshotUserRoot(base_);
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
  EXPECT_TRUE(absl::StartsWith(SnapshotFolderName("a/b"), "a_b-"));
  EXPECT_NE(SnapshotFolderName("a/b"), SnapshotFolderName("a_b"));
  EXPECT_NE(SnapshotFolderName("a/b"), SnapshotFolderName("a:b"));
  const std::string long_id(300, 'x');
  EXPECT_LT(SnapshotFolderName(long_id).size(), 120u);
  EXPECT_NE(SnapshotFolderName(long_id), SnapshotFolderName(long_id + "y"));
}

TEST_F(SnapshotDirTest, CreatesBothLevelsOwnerOnlyWhateverTheUmask) {
  const mode_t old = umask(0);
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job-1");
  umask(0277);  // would leave the owner without write access
  absl::StatusOr<std::string> other = CreateSnapshotDir(base_, "job-2");
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
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
  ASSERT_TRUE(dir.ok()) << dir.status();
  WriteFile(*dir + "/rank0.slot0", "snapshot");
  absl::StatusOr<std::string> again = CreateSnapshotDir(base_, "job");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *dir);
  EXPECT_TRUE(Exists(*dir + "/rank0.slot0"));
}

TEST_F(SnapshotDirTest, BadNamesAndMissingBaseAreRefused) {
  for (const char* name : {"", ".", "..", "a/b", "../x"}) {
    absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, name);
    EXPECT_TRUE(absl::IsInvalidArgument(dir.status())) << name << ": " << dir.status();
  }
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_ + "/missing", "job");
  EXPECT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(base_ + "/missing"));
}

TEST_F(SnapshotDirTest, PlantedSymlinkAtJobPathIsRefusedAndNothingIsWrittenThroughIt) {
  ASSERT_TRUE(CreateSnapshotDir(base_, "other").ok());
  const std::string target = TempDir();
  ASSERT_EQ(symlink(target.c_str(), (root_ + "/job").c_str()), 0);
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
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
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + " is a symlink"));
  EXPECT_TRUE(IsEmptyDir(target));

  ASSERT_EQ(unlink(root_.c_str()), 0);
  WriteFile(root_, "not a folder");
  dir = CreateSnapshotDir(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + " exists and is not a folder"));
}

TEST_F(SnapshotDirTest, FolderOthersMayWriteToIsRefused) {
  ASSERT_EQ(mkdir(root_.c_str(), 0700), 0);
  ASSERT_EQ(chmod(root_.c_str(), 0777), 0);
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
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
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr(root_ + "/job belongs to uid 4242"));
  // Leftover removal leaves it alone too.
  absl::StatusOr<std::vector<std::string>> removed =
      RemoveLeftoverSnapshotDirs(base_, [](absl::string_view) { return true; });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(Exists(root_ + "/job"));
}

TEST_F(SnapshotDirTest, RootMakesTheFolderOfTheJobsOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "only root makes folders for another user";
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job", 4242, 4243);
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
  EXPECT_TRUE(CreateSnapshotDir(base_, "job", 4242, 4243).ok());
  ASSERT_EQ(rename(theirs.c_str(), SnapshotUserRoot(base_, 4244).c_str()), 0);
  absl::StatusOr<std::string> other = CreateSnapshotDir(base_, "job", 4244, 4244);
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.status().message(),
              HasSubstr("belongs to uid 4242, not to uid 4244"));
}

TEST_F(SnapshotDirTest, RemoveDeletesFilesAndFoldersButNotLinkTargets) {
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
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

TEST_F(SnapshotDirTest, OneLockHolderAtATime) {
  absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, "job");
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<int> first = LockSnapshotDir(*dir);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<int> second = LockSnapshotDir(*dir);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr(*dir + " is in use by another launcher"));
  close(*first);
  absl::StatusOr<int> again = LockSnapshotDir(*dir);
  ASSERT_TRUE(again.ok()) << again.status();
  close(*again);
  EXPECT_FALSE(LockSnapshotDir(root_ + "/missing").ok());
}

TEST_F(SnapshotDirTest, LeftoversAreOnlyOurMatchingFolders) {
  for (const char* name : {"j1@n1", "j2@n1", "j1@n2", "run-x"}) {
    absl::StatusOr<std::string> dir = CreateSnapshotDir(base_, name);
    ASSERT_TRUE(dir.ok()) << dir.status();
    WriteFile(*dir + "/rank0.slot0", "x");
  }
  WriteFile(root_ + "/file@n1", "a file, not a folder");
  const std::string outside = TempDir();
  WriteFile(outside + "/precious", "x");
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/link@n1").c_str()), 0);

  absl::StatusOr<std::vector<std::string>> removed = RemoveLeftoverSnapshotDirs(
      base_, [](absl::string_view name) { return absl::EndsWith(name, "@n1"); });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, UnorderedElementsAre(root_ + "/j1@n1", root_ + "/j2@n1"));
  EXPECT_FALSE(Exists(root_ + "/j1@n1"));
  EXPECT_TRUE(Exists(root_ + "/j1@n2/rank0.slot0"));
  EXPECT_TRUE(Exists(root_ + "/run-x/rank0.slot0"));
  EXPECT_TRUE(Exists(root_ + "/file@n1"));
  EXPECT_TRUE(Exists(root_ + "/link@n1"));
  EXPECT_TRUE(Exists(outside + "/precious"));

  // No root yet: nothing to do.
  removed = RemoveLeftoverSnapshotDirs(base_ + "/none", [](absl::string_view) { return true; });
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
}

}  // namespace
}  // namespace elastrun::launcher
