#include "launcher/agent/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::ElementsAre;

TEST(OutputPumpTest, PumpsLinesAsTheyComeAndTheRestAtTheEnd) {
  auto poller = Poller::Create();
  ASSERT_TRUE(poller.ok());
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  std::vector<std::string> lines;
  {
    OutputPump pump(poller->get());
    pump.Add(p[0], std::make_unique<OutputStream>(
                       -1, -1, "", [&](absl::string_view l) { lines.emplace_back(l); }));
    EXPECT_EQ(pump.open_pipes(), 1u);
    ASSERT_TRUE(WriteAll(p[1], "one\ntw"));
    ASSERT_EQ(*(*poller)->Wait(absl::Seconds(10)), 1);
    EXPECT_THAT(lines, ElementsAre("one"));
    // The writer still holds its end (a leftover process): Finish must not wait.
    ASSERT_TRUE(WriteAll(p[1], "o"));
    pump.Finish();
    EXPECT_THAT(lines, ElementsAre("one", "two"));
    EXPECT_EQ(pump.open_pipes(), 0u);
    EXPECT_EQ((*poller)->watched(), 0u);
  }
  close(p[1]);
}

TEST(OutputPumpTest, EndOfFileClosesThePipe) {
  auto poller = Poller::Create();
  ASSERT_TRUE(poller.ok());
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  std::vector<std::string> lines;
  OutputPump pump(poller->get());
  pump.Add(p[0], std::make_unique<OutputStream>(
                     -1, -1, "", [&](absl::string_view l) { lines.emplace_back(l); }));
  ASSERT_TRUE(WriteAll(p[1], "last"));
  close(p[1]);
  ASSERT_EQ(*(*poller)->Wait(absl::Seconds(10)), 1);
  EXPECT_EQ(pump.open_pipes(), 0u);
  EXPECT_THAT(lines, ElementsAre("last"));
}

}  // namespace
}  // namespace elastrun::launcher
