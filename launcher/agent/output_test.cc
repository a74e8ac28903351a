#include "launcher/agent/output.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

TEST(OutputStreamTest, PrefixesWholeLinesAndLogsRawBytes) {
  int console[2], log[2];
  ASSERT_EQ(pipe(console), 0);
  ASSERT_EQ(pipe(log), 0);
  {
    OutputStream s(log[1], console[1], "[rank3]:");
    s.Write("hel");
    s.Write("lo\nwor");
    s.Write("ld\n\nlast");
  }  // destruction closes: the partial last line is flushed
  close(console[1]);
  EXPECT_EQ(ReadAll(console[0]), "[rank3]:hello\n[rank3]:world\n[rank3]:\n[rank3]:last\n");
  EXPECT_EQ(ReadAll(log[0]), "hello\nworld\n\nlast");
  close(console[0]);
  close(log[0]);
}

TEST(OutputStreamTest, NoConsoleMeansLogOnly) {
  int log[2];
  ASSERT_EQ(pipe(log), 0);
  {
    OutputStream s(log[1], -1, "[rank0]:");
    s.Write("x\n");
  }
  EXPECT_EQ(ReadAll(log[0]), "x\n");
  close(log[0]);
}

TEST(OutputStreamTest, LineSinkSeesEveryWholeLineEvenWithoutConsole) {
  std::vector<std::string> lines;
  {
    OutputStream s(-1, -1, "[rank0]:",
                   [&](absl::string_view l) { lines.emplace_back(l); });
    s.Write("one\ntw");
    s.Write("o\nthree");
  }
  EXPECT_THAT(lines, ::testing::ElementsAre("one", "two", "three"));
}

TEST(StdSettingTest, AllAndPerRank) {
  auto all = StdSetting::Parse("3", "--tee");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->For(0), kStdAll);
  EXPECT_EQ(all->For(7), kStdAll);
  auto per = StdSetting::Parse("0:1,2:3", "--redirects");
  ASSERT_TRUE(per.ok());
  EXPECT_EQ(per->For(0), kStdOut);
  EXPECT_EQ(per->For(1), kStdNone);
  EXPECT_EQ(per->For(2), kStdAll);
  auto bad = StdSetting::Parse("4", "--tee");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("--tee"));
  EXPECT_FALSE(StdSetting::Parse("0:1:2", "--tee").ok());
}

}  // namespace
}  // namespace elastrun::launcher
