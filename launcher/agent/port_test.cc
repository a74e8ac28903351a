#include "launcher/agent/port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

// A socket bound to a port PickFreePort chose; listening only when asked.
TEST(PortTest, IsListeningSeesAListenerAndNothingElse) {
  auto port = PickFreePort({});
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_FALSE(IsListening(*port));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(*port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_FALSE(IsListening(*port)) << "bound, not listening";
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_TRUE(IsListening(*port));
  close(fd);
  EXPECT_FALSE(IsListening(*port));
}

}  // namespace
}  // namespace elastrun::launcher
