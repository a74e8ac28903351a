#include "launcher/agent/poller.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

TEST(PollerTest, RunsTheCallbackOfAReadyDescriptorOnly) {
  auto poller = Poller::Create();
  ASSERT_TRUE(poller.ok());
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  int ran_a = 0, ran_b = 0;
  ASSERT_TRUE((*poller)->Watch(a[0], [&] { ++ran_a; }).ok());
  ASSERT_TRUE((*poller)->Watch(b[0], [&] { ++ran_b; }).ok());
  EXPECT_FALSE((*poller)->Watch(a[0], [] {}).ok()) << "watched twice";
  EXPECT_EQ(*(*poller)->Wait(absl::ZeroDuration()), 0);
  ASSERT_EQ(write(b[1], "x", 1), 1);
  EXPECT_EQ(*(*poller)->Wait(absl::Seconds(10)), 1);
  EXPECT_EQ(ran_a, 0);
  EXPECT_EQ(ran_b, 1);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST(PollerTest, CallbackMayUnwatchAnotherReadyDescriptor) {
  auto poller = Poller::Create();
  ASSERT_TRUE(poller.ok());
  int a[2], b[2];
  ASSERT_EQ(pipe(a), 0);
  ASSERT_EQ(pipe(b), 0);
  int ran = 0;
  // Whichever runs first unwatches the other: only one runs.
  ASSERT_TRUE((*poller)->Watch(a[0], [&] { ++ran; (*poller)->Unwatch(b[0]); }).ok());
  ASSERT_TRUE((*poller)->Watch(b[0], [&] { ++ran; (*poller)->Unwatch(a[0]); }).ok());
  ASSERT_EQ(write(a[1], "x", 1), 1);
  ASSERT_EQ(write(b[1], "x", 1), 1);
  EXPECT_EQ(*(*poller)->Wait(absl::Seconds(10)), 1);
  EXPECT_EQ(ran, 1);
  EXPECT_EQ((*poller)->watched(), 1u);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

}  // namespace
}  // namespace elastrun::launcher
