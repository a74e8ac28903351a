#include "launcher/cli/identity.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

auth::EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/elastrun-identity-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    file_ = dir_ + "/token";
    std::ofstream(file_) << "t0k\n";
    chmod(file_.c_str(), 0600);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_, file_;
};

TEST_F(IdentityTest, NamedTokensInOrder) {
  ServiceOptions s;
  ASSERT_TRUE(
      ResolveIdentity(Env({{"ELASTRUN_TOKEN", "env"}}), file_, "flag", 1000, s).ok());
  EXPECT_EQ(s.token, "flag");  // --token first, as the service and the daemon take it
  s = {};
  ASSERT_TRUE(ResolveIdentity(Env({{"ELASTRUN_TOKEN", "env"}}), file_, "", 1000, s).ok());
  EXPECT_EQ(s.token, "t0k");
  s = {};
  ASSERT_TRUE(
      ResolveIdentity(Env({{"ELASTRUN_TOKEN", "env"}}), "", "flag", 1000, s).ok());
  EXPECT_EQ(s.token, "flag");
  s = {};
  ASSERT_TRUE(
      ResolveIdentity(Env({{"ELASTRUN_TOKEN", "env"}, {"ELASTRUN_TOKEN_FILE", file_}}),
                      "", "", 1000, s)
          .ok());
  EXPECT_EQ(s.token, "env");
  s = {};
  ASSERT_TRUE(
      ResolveIdentity(Env({{"ELASTRUN_TOKEN_FILE", file_}}), "", "", 1000, s).ok());
  EXPECT_EQ(s.token, "t0k");
}

TEST_F(IdentityTest, NamedTokenFileOpenToOthersIsRefused) {
  chmod(file_.c_str(), 0644);
  ServiceOptions s;
  absl::Status st =
      ResolveIdentity(Env({{"ELASTRUN_TOKEN_FILE", file_}}), "", "", 1000, s);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), HasSubstr("$ELASTRUN_TOKEN_FILE: token file " + file_));
  EXPECT_THAT(st.message(), HasSubstr("chmod 600 " + file_));
}

TEST_F(IdentityTest, NoNamedTokenLeavesTheDefaultFileAndTheDaemonsSocket) {
  ServiceOptions s;
  ASSERT_TRUE(ResolveIdentity(
                  Env({{"HOME", "/home/u"}, {"ELASTRUN_CRED_SOCKET", "/x/cred.sock"}}),
                  "", "", 1000, s)
                  .ok());
  EXPECT_EQ(s.token, "");
  EXPECT_EQ(s.token_file, "/home/u/.local/state/elastrun/token");
  EXPECT_EQ(s.cred_socket, "/x/cred.sock");
  s = {};
  ASSERT_TRUE(ResolveIdentity(Env({{"HOME", "/root"}}), "", "", 0, s).ok());
  EXPECT_EQ(s.token_file, "/var/lib/elastrun/token");
  EXPECT_EQ(s.cred_socket, "/run/elastrund/cred.sock");
}

}  // namespace
}  // namespace elastrun::launcher
