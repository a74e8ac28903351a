#include "common/rpc.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace elastrun::rpc {
namespace {

TEST(RpcTest, StatusesKeepCodeAndMessageBothWays) {
  const absl::Status full = absl::UnavailableError("disk full: state database x");
  const grpc::Status g = ToGrpcStatus(full);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(g.error_message(), "disk full: state database x");
  EXPECT_EQ(FromGrpcStatus(g), full);
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(absl::NotFoundError("job"))).code(),
            absl::StatusCode::kNotFound);
}

// Only a failure to reach the service is probed; a port where nothing
// listens is not a TLS mismatch.
TEST(RpcTest, TlsFailureOnlyForAnUnreachableServiceThatSpeaksTls) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string target = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  close(fd);  // nothing listens there now
  EXPECT_FALSE(TlsFailure(absl::NotFoundError("job"), target, {}).has_value());
  EXPECT_FALSE(TlsFailure(absl::UnavailableError("refused"), target, {}).has_value());
}

}  // namespace
}  // namespace elastrun::rpc
