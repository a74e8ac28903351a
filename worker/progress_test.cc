// AgentBarrier against a stand-in agent: a unix datagram socket this test
// binds and answers from, as elastrund's agent does. The worker's own
// address (autobind, abstract) is listed in /proc/net/unix for any local
// user: only the agent may release it.
#include "worker/progress.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/progress.h"
#include "common/worker_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::worker {
namespace {

using ::testing::HasSubstr;

class AgentBarrierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agent_barrier_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    agent_path_ = dir_ + "/agent.sock";
    agent_ = Bound(agent_path_);
    ASSERT_GE(agent_, 0);
    setenv(env::kAgentSocket, agent_path_.c_str(), 1);
    setenv(env::kAgentSecret, "00ff", 1);
    setenv(env::kRank, "0", 1);
  }
  void TearDown() override {
    if (agent_ >= 0) close(agent_);
    unlink(agent_path_.c_str());
    rmdir(dir_.c_str());
    unsetenv(env::kAgentSocket);
  }

  // A datagram socket bound to `path` ("" : autobind).
  static int Bound(const std::string& path) {
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    socklen_t len = sizeof(sa_family_t);
    if (!path.empty()) {
      path.copy(a.sun_path, sizeof a.sun_path - 1);
      len = sizeof a;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  // Waits for the worker's arrival at the agent; its sender address.
  bool Arrival(sockaddr_un* from, socklen_t* len) {
    char buf[1024];
    *len = sizeof *from;
    const ssize_t n = recvfrom(agent_, buf, sizeof buf, 0,
                               reinterpret_cast<sockaddr*>(from), len);
    return n > 0 && IsBarrierDatagram(absl::string_view(buf, static_cast<size_t>(n)));
  }

  std::string dir_, agent_path_;
  int agent_ = -1;
};

TEST_F(AgentBarrierTest, OnlyTheAgentCanReleaseIt) {
  auto waiting = std::async(std::launch::async,
                            [] { return AgentBarrier("gate", absl::Seconds(60)); });
  sockaddr_un worker{};
  socklen_t len = 0;
  ASSERT_TRUE(Arrival(&worker, &len));
  // A stranger (any local user can read the address) answers first: the
  // kernel refuses it (the worker's socket takes datagrams from the agent
  // only), so it never reaches the worker.
  const int stranger = Bound("");
  ASSERT_GE(stranger, 0);
  const ssize_t sent =
      sendto(stranger, "ok", 2, 0, reinterpret_cast<sockaddr*>(&worker), len);
  const int sent_errno = errno;
  close(stranger);
  EXPECT_EQ(sent, -1) << "a stranger's answer reached the worker";
  EXPECT_EQ(sent_errno, EPERM);
  // The agent's own answer releases it.
  ASSERT_EQ(sendto(agent_, "ok", 2, 0, reinterpret_cast<sockaddr*>(&worker), len), 2);
  EXPECT_TRUE(waiting.get().ok());
}

TEST_F(AgentBarrierTest, TheAgentsErrorIsTheBarriersError) {
  auto waiting = std::async(std::launch::async,
                            [] { return AgentBarrier("gate", absl::Seconds(60)); });
  sockaddr_un worker{};
  socklen_t len = 0;
  ASSERT_TRUE(Arrival(&worker, &len));
  const std::string answer = "error the round ended";
  ASSERT_GT(sendto(agent_, answer.data(), answer.size(), 0,
                   reinterpret_cast<sockaddr*>(&worker), len),
            0);
  const absl::Status st = waiting.get();
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("barrier 'gate': the round ended"));
}

}  // namespace
}  // namespace elastrun::worker
