// The credential socket over a real unix socket: the credential names the
// connecting process's uid, as the kernel reports it.
#include "launcher/daemon/cred_socket.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "cluster-secret";
constexpr absl::Duration kWait = absl::Seconds(30);

class CredSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/elastrun-cred-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    dir_ = templ;
    chmod(dir_.c_str(), 0755);  // another user reaches the socket inside
    path_ = dir_ + "/run/cred.sock";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<CredSocket> Start() {
    CredSocketOptions o;
    o.path = path_;
    o.token = kToken;
    o.clock = &clock_;
    absl::StatusOr<std::unique_ptr<CredSocket>> s = CredSocket::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  FakeClock clock_{absl::FromUnixSeconds(1'800'000'000)};
  std::string dir_, path_;
};

TEST_F(CredSocketTest, AnswersACredentialForTheCallersUid) {
  std::unique_ptr<CredSocket> socket = Start();
  ASSERT_NE(socket, nullptr);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);

  absl::StatusOr<std::string> cred = FetchCredential(path_, kWait);
  ASSERT_TRUE(cred.ok()) << cred.status();
  absl::StatusOr<auth::Identity> who =
      auth::VerifyCredential(kToken, *cred, clock_.Now());
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->uid, geteuid());
  EXPECT_EQ(who->gid, getegid());
  // Valid for the credential life, not longer.
  EXPECT_TRUE(
      auth::VerifyCredential(kToken, *cred, clock_.Now() + auth::kCredentialLife).ok());
  EXPECT_FALSE(auth::VerifyCredential(
                   kToken, *cred, clock_.Now() + auth::kCredentialLife + absl::Seconds(1))
                   .ok());
}

// Out of file descriptors (EMFILE: accept cannot take the waiting caller),
// the socket does not spin on a poll that stays readable: it gives up a
// spare descriptor, answers that caller with an error naming the cause,
// and serves the next one. The accept is injected to fail as a full table
// would (for the first 1000 calls); the real one takes the rest.
TEST_F(CredSocketTest, OutOfDescriptorsTheCallerIsToldAndNothingSpins) {
  std::atomic<int> failing_calls{0};
  CredSocketOptions o;
  o.path = path_;
  o.token = kToken;
  o.clock = &clock_;
  o.accept_for_test = [&](int listen_fd) {
    if (failing_calls.fetch_add(1) < 1000) {
      errno = EMFILE;
      return -1;
    }
    return accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  };
  absl::StatusOr<std::unique_ptr<CredSocket>> socket = CredSocket::Create(o);
  ASSERT_TRUE(socket.ok()) << socket.status();
  absl::StatusOr<std::string> refused = FetchCredential(path_, kWait);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("out of file descriptors"));
  EXPECT_EQ(failing_calls.load(), 1);  // one failed accept, not a spin
  // The table has room again (as far as the socket can tell: the next
  // caller is answered, through the spare descriptor's shedding or not).
  failing_calls = 1000;
  EXPECT_TRUE(FetchCredential(path_, kWait).ok());
}

TEST_F(CredSocketTest, AnotherUserGetsTheirOwnUidOnly) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  std::unique_ptr<CredSocket> socket = Start();
  ASSERT_NE(socket, nullptr);
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(out[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    absl::StatusOr<std::string> cred = FetchCredential(path_, kWait);
    const std::string text = cred.ok() ? *cred : "failed: " + cred.status().ToString();
    (void)!write(out[1], text.data(), text.size());
    _exit(0);
  }
  close(out[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, n);
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  absl::StatusOr<auth::Identity> who = auth::VerifyCredential(kToken, text, clock_.Now());
  ASSERT_TRUE(who.ok()) << who.status() << " for " << text;
  EXPECT_EQ(who->uid, 65534u);
  EXPECT_EQ(who->gid, 65534u);
}

TEST_F(CredSocketTest, SecondDaemonOnTheSamePathIsRefusedAndStaleSocketReplaced) {
  std::unique_ptr<CredSocket> first = Start();
  ASSERT_NE(first, nullptr);
  CredSocketOptions o;
  o.path = path_;
  o.token = kToken;
  absl::StatusOr<std::unique_ptr<CredSocket>> second = CredSocket::Create(o);
  EXPECT_TRUE(absl::IsAlreadyExists(second.status())) << second.status();
  first.reset();
  EXPECT_FALSE(FetchCredential(path_, kWait).ok());

  // A socket file nobody answers on (a daemon that was killed) is replaced.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  std::unique_ptr<CredSocket> again = Start();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(FetchCredential(path_, kWait).ok());
}

// A folder other users may write to (or a link another user owns on the
// way) could have the socket replaced by theirs, answering the CLIs of the
// node: refused, naming it.
TEST_F(CredSocketTest, AFolderOthersCouldReplaceTheSocketInIsRefused) {
  ASSERT_EQ(mkdir((dir_ + "/run").c_str(), 0755), 0);
  ASSERT_EQ(chmod((dir_ + "/run").c_str(), 0777), 0);
  CredSocketOptions o;
  o.path = path_;
  o.token = kToken;
  absl::StatusOr<std::unique_ptr<CredSocket>> s = CredSocket::Create(o);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr(dir_ + "/run, which has mode 0777"));
  ASSERT_EQ(chmod((dir_ + "/run").c_str(), 0755), 0);
  EXPECT_NE(Start(), nullptr);
}

TEST_F(CredSocketTest, NoDaemonIsUnavailableNamingThePath) {
  absl::StatusOr<std::string> cred = FetchCredential(path_, kWait);
  EXPECT_TRUE(absl::IsUnavailable(cred.status()));
  EXPECT_THAT(cred.status().message(), HasSubstr(path_));
}

TEST(DefaultCredSocketTest, RootAndUser) {
  auto env = [](const std::string& name) -> std::optional<std::string> {
    if (name == "XDG_RUNTIME_DIR") return "/run/user/1000";
    return std::nullopt;
  };
  EXPECT_EQ(DefaultCredSocket(env, 0), "/run/elastrund/cred.sock");
  EXPECT_EQ(DefaultCredSocket(env, 1000), "/run/user/1000/elastrund-cred.sock");
  EXPECT_EQ(DefaultCredSocket([](const std::string&) { return std::nullopt; }, 1000), "");
}

}  // namespace
}  // namespace elastrun::launcher
