#include "common/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/files_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  std::string dir_;
};

TEST_F(FilesTest, PrivateDirIsMadeWithItsModeWhateverTheUmask) {
  const mode_t old = umask(077);
  const std::string d = dir_ + "/state";
  EXPECT_TRUE(MakePrivateDir(d, 0711, /*must_be_new=*/false).ok());
  umask(old);
  EXPECT_EQ(ModeOf(d), 0711u);
  // Kept when it exists and is safe (mode set again); refused when new.
  ASSERT_EQ(chmod(d.c_str(), 0700), 0);
  EXPECT_TRUE(MakePrivateDir(d, 0711, /*must_be_new=*/false).ok());
  EXPECT_EQ(ModeOf(d), 0711u);
  absl::Status again = MakePrivateDir(d, 0711, /*must_be_new=*/true);
  EXPECT_THAT(again.message(), HasSubstr("folder " + d + " exists already"));
}

TEST_F(FilesTest, UnsafeFoldersAreRefusedAndLinksNeverFollowed) {
  const std::string target = dir_ + "/target";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  absl::Status st = MakePrivateDir(link, 0700, /*must_be_new=*/false);
  EXPECT_THAT(st.message(), HasSubstr("folder " + link + " is a symlink"));
  EXPECT_EQ(ModeOf(target), 0700u);

  const std::string open = dir_ + "/open";
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  st = MakePrivateDir(open, 0700, /*must_be_new=*/false);
  EXPECT_THAT(st.message(), HasSubstr("has mode 0777: others may write to it"));
  EXPECT_THAT(st.message(),
              HasSubstr("(chmod go-w " + open + ", or give another folder)"));
  EXPECT_EQ(ModeOf(open), 0777u);  // left as it was

  if (geteuid() == 0) {
    const std::string theirs = dir_ + "/theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    st = MakePrivateDir(theirs, 0700, /*must_be_new=*/false);
    EXPECT_THAT(st.message(), HasSubstr("folder " + theirs + " belongs to uid 65534"));
  }
}

TEST_F(FilesTest, FoldersOthersCouldReplaceAreRefused) {
  // Under /tmp (sticky) and this test's own folder: safe, and so through a
  // link to it.
  EXPECT_TRUE(CheckParentsSafe(dir_ + "/state").ok());
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(dir_.c_str(), link.c_str()), 0);
  EXPECT_TRUE(CheckParentsSafe(link + "/state").ok()) << CheckParentsSafe(link + "/state");

  // A group-writable folder without the sticky bit two levels up.
  const std::string shared = dir_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(chmod(shared.c_str(), 0775), 0);
  ASSERT_EQ(mkdir((shared + "/deep").c_str(), 0700), 0);
  absl::Status st = CheckParentsSafe(shared + "/deep/state");
  EXPECT_THAT(st.message(), HasSubstr("inside " + shared + ", which has mode 0775"));
  EXPECT_THAT(st.message(), HasSubstr("chmod go-w " + shared));
  // With the sticky bit (as /tmp), others cannot move what is not theirs.
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  EXPECT_TRUE(CheckParentsSafe(shared + "/deep/state").ok());

  if (geteuid() == 0) {
    const std::string theirs = dir_ + "/theirs";
    ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
    ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
    st = CheckParentsSafe(theirs + "/state");
    EXPECT_THAT(st.message(), HasSubstr("inside " + theirs + ", which belongs to uid 65534"));
  }
  EXPECT_THAT(CheckParentsSafe(dir_ + "/missing/state").message(),
              HasSubstr("cannot resolve folder " + dir_ + "/missing"));
}

// A link on the way that another user owns (planted in /tmp, say) could be
// re-pointed while the folder is in use: refused, though where it points
// now is safe.
TEST_F(FilesTest, ALinkAnotherUserOwnsOnTheWayIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to give a link to another user)";
  const std::string planted = dir_ + "/planted";
  ASSERT_EQ(symlink(dir_.c_str(), planted.c_str()), 0);
  ASSERT_EQ(lchown(planted.c_str(), 65534, 65534), 0);
  absl::Status st = CheckParentsSafe(planted + "/state");
  EXPECT_THAT(st.message(), HasSubstr("is reached through the link " + planted +
                                      ", which belongs to uid 65534"));
  st = CheckParentsSafe(planted + "/deeper/state");
  EXPECT_THAT(st.message(), HasSubstr("the link " + planted));
  // One of root's (or this user's) is fine: only its owner may re-point it.
  ASSERT_EQ(lchown(planted.c_str(), 0, 0), 0);
  EXPECT_TRUE(CheckParentsSafe(planted + "/state").ok());
}

TEST_F(FilesTest, NewFileNeverOpensWhatIsThere) {
  const std::string victim = dir_ + "/victim";
  FILE* f = std::fopen(victim.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("precious", f);
  std::fclose(f);
  const std::string link = dir_ + "/stdout.log";
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  absl::StatusOr<int> fd = CreateNewFile(link, 0644);
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(fd.status().message(),
              HasSubstr("cannot create " + link + ": something is there"));
  EXPECT_FALSE(CreateNewFile(victim, 0644).ok());
  struct stat st;
  ASSERT_EQ(stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8);

  absl::StatusOr<int> fresh = CreateNewFile(dir_ + "/new.log", 0640);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  close(*fresh);
  EXPECT_EQ(ModeOf(dir_ + "/new.log") & 0640, 0640u);
}

}  // namespace
}  // namespace elastrun
