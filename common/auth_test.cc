#include "common/auth.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::auth {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

Identity Nobody() { return Identity{65534, 65534, "nobody"}; }

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/elastrun-auth-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }

  std::string dir_;
};

TEST(CredentialTest, SignedCredentialVerifiesToItsIdentity) {
  absl::StatusOr<std::string> cred =
      SignCredential("secret", Nobody(), kNow + kCredentialLife);
  ASSERT_TRUE(cred.ok()) << cred.status();
  EXPECT_TRUE(absl::StartsWith(*cred, "v1:65534:65534:nobody:"));
  absl::StatusOr<Identity> who = VerifyCredential("secret", *cred, kNow);
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->uid, 65534u);
  EXPECT_EQ(who->gid, 65534u);
  EXPECT_EQ(who->name, "nobody");
}

TEST(CredentialTest, ExpiredIsRefused) {
  absl::StatusOr<std::string> cred = SignCredential("secret", Nobody(), kNow);
  ASSERT_TRUE(cred.ok());
  EXPECT_TRUE(VerifyCredential("secret", *cred, kNow).ok());
  absl::StatusOr<Identity> late =
      VerifyCredential("secret", *cred, kNow + absl::Seconds(1));
  EXPECT_TRUE(absl::IsUnauthenticated(late.status()));
  EXPECT_THAT(late.status().message(), HasSubstr("expired"));
}

TEST(CredentialTest, OtherTokenIsRefused) {
  absl::StatusOr<std::string> cred =
      SignCredential("other", Nobody(), kNow + absl::Minutes(1));
  ASSERT_TRUE(cred.ok());
  absl::StatusOr<Identity> who = VerifyCredential("secret", *cred, kNow);
  EXPECT_TRUE(absl::IsUnauthenticated(who.status()));
  EXPECT_THAT(who.status().message(), HasSubstr("bad signature"));
}

TEST(CredentialTest, ForgedUidOrExpiryIsRefused) {
  absl::StatusOr<std::string> cred =
      SignCredential("secret", Nobody(), kNow + absl::Minutes(1));
  ASSERT_TRUE(cred.ok());
  // Claim root with nobody's signature.
  std::string as_root = *cred;
  as_root.replace(0, std::string("v1:65534:65534").size(), "v1:0:0");
  EXPECT_TRUE(
      absl::IsUnauthenticated(VerifyCredential("secret", as_root, kNow).status()));
  // Push the expiry out.
  std::string later = *cred;
  const size_t mac = later.rfind(':');
  const size_t exp = later.rfind(':', mac - 1);
  later.replace(exp + 1, mac - exp - 1, "9999999999");
  EXPECT_TRUE(absl::IsUnauthenticated(VerifyCredential("secret", later, kNow).status()));
  for (const char* junk :
       {"", "v1", "v2:0:0:root:1:ab", "Bearer secret", "v1:0:0:root:x"}) {
    EXPECT_TRUE(absl::IsUnauthenticated(VerifyCredential("secret", junk, kNow).status()))
        << junk;
  }
}

TEST(CredentialTest, NameWithColonCannotBeSigned) {
  EXPECT_FALSE(SignCredential("secret", Identity{1, 1, "a:b"}, kNow).ok());
  EXPECT_FALSE(SignCredential("", Nobody(), kNow).ok());
}

TEST_F(TokenFileTest, OwnerOnlyFileIsRead) {
  const std::string path = Write("token", "  s3cret \n", 0600);
  absl::StatusOr<std::string> t = ReadTokenFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "s3cret");
}

TEST_F(TokenFileTest, WorldReadableIsRefusedWithTheFix) {
  const std::string path = Write("token", "s3cret", 0644);
  absl::StatusOr<std::string> t = ReadTokenFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(path));
  EXPECT_THAT(t.status().message(), HasSubstr("chmod 600 " + path));
  EXPECT_THAT(t.status().message(), HasSubstr("0644"));
  chmod(path.c_str(), 0620);  // group-writable
  EXPECT_FALSE(ReadTokenFile(path).ok());
}

TEST_F(TokenFileTest, SymlinkIsRefused) {
  const std::string real = Write("real", "s3cret", 0600);
  const std::string link = dir_ + "/token";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  absl::StatusOr<std::string> t = ReadTokenFile(link);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("symbolic link"));
}

TEST_F(TokenFileTest, FileOfAnotherOwnerIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const std::string path = Write("token", "s3cret", 0600);
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  absl::StatusOr<std::string> t = ReadTokenFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("belongs to uid 65534"));
}

TEST_F(TokenFileTest, MissingAndEmpty) {
  EXPECT_TRUE(absl::IsNotFound(ReadTokenFile(dir_ + "/none").status()));
  EXPECT_FALSE(ReadTokenFile(Write("empty", " \n", 0600)).ok());
}

TEST_F(TokenFileTest, CreatedOnceOwnerOnlyThenReused) {
  const std::string path = dir_ + "/state/elastrun/token";
  bool created = false;
  absl::StatusOr<std::string> first = LoadOrCreateTokenFile(path, &created);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(created);
  EXPECT_EQ(first->size(), 64u);  // 32 bytes, hex
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir_ + "/state/elastrun").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  absl::StatusOr<std::string> again = LoadOrCreateTokenFile(path, &created);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(created);
  EXPECT_EQ(*again, *first);

  chmod(path.c_str(), 0644);  // an existing file is checked, not replaced
  EXPECT_FALSE(LoadOrCreateTokenFile(path, &created).ok());
}

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// One rule for the daemon, the CLI and `elastrun run`: the first given of
// --token, --token-file, $ELASTRUN_TOKEN, $ELASTRUN_TOKEN_FILE (the daemon
// and the CLI took the file flag over --token, `elastrun run` the file
// variable over the token one).
TEST(NamedTokenTest, TheFirstGivenOfFlagsThenVariables) {
  char tmpl[] = "/tmp/elastrun-named-token-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), 0600);
    return path;
  };
  const std::string flag_file = write("flag", "from-flag-file\n");
  const std::string env_file = write("env", " from-env-file ");
  const EnvLookup all =
      Env({{"ELASTRUN_TOKEN", "from-env\n"}, {"ELASTRUN_TOKEN_FILE", env_file}});
  EXPECT_EQ(*NamedToken(all, "from-flag", flag_file), "from-flag");
  EXPECT_EQ(*NamedToken(all, "", flag_file), "from-flag-file");
  EXPECT_EQ(*NamedToken(all, "", ""), "from-env");
  EXPECT_EQ(*NamedToken(Env({{"ELASTRUN_TOKEN_FILE", env_file}}), "", ""),
            "from-env-file");
  EXPECT_EQ(*NamedToken(Env({}), "", ""), "");
  EXPECT_EQ(*NamedToken(nullptr, "", ""), "");
  // A file that cannot be used is named by where it came from.
  absl::StatusOr<std::string> bad =
      NamedToken(all, "", dir + "/missing", "--rdzv-conf token_file");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "--rdzv-conf token_file: "))
      << bad.status();
  chmod(env_file.c_str(), 0644);
  bad = NamedToken(Env({{"ELASTRUN_TOKEN_FILE", env_file}}), "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), "$ELASTRUN_TOKEN_FILE: "))
      << bad.status();
  unlink(flag_file.c_str());
  unlink(env_file.c_str());
  rmdir(dir.c_str());
}

TEST(DefaultTokenFileTest, RootUserAndFallbacks) {
  auto env = Env;
  EXPECT_EQ(DefaultTokenFile(env({{"HOME", "/root"}}), 0), "/var/lib/elastrun/token");
  EXPECT_EQ(DefaultTokenFile(env({{"HOME", "/h"}, {"XDG_STATE_HOME", "/s"}}), 1000),
            "/s/elastrun/token");
  EXPECT_EQ(DefaultTokenFile(env({{"HOME", "/h"}}), 1000),
            "/h/.local/state/elastrun/token");
  EXPECT_EQ(DefaultTokenFile(env({}), 1000), "");
}

}  // namespace
}  // namespace elastrun::auth
