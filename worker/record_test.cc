#include "worker/record.h"

#include <stdlib.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/error_file.h"

namespace elastrun::worker {
namespace {

using ::testing::HasSubstr;

struct CustomError {};

TEST(RecordTest, MessageIsTypeAndFirstLine) {
  ErrorRecord r =
      RecordFor(std::make_exception_ptr(std::runtime_error("boom\nmore detail")));
  EXPECT_EQ(r.message, "std::runtime_error: boom");
  EXPECT_EQ(r.traceback, "std::runtime_error: boom\nmore detail\n");
  EXPECT_GT(r.timestamp, 0);
}

TEST(RecordTest, NonStdExceptionKeepsItsType) {
  ErrorRecord r = RecordFor(std::make_exception_ptr(CustomError{}));
  EXPECT_THAT(r.message, HasSubstr("CustomError"));
  r = RecordFor(std::make_exception_ptr(42));
  EXPECT_EQ(r.message, "int");
}

TEST(RecordTest, RunRecordedPassesTheExitCodeThrough) {
  EXPECT_EQ(RunRecorded([] { return 7; }), 7);
}

TEST(RecordTest, RunRecordedWritesTheErrorFileAndReturnsOne) {
  const std::string path =
      ::testing::TempDir() + "record_test." + std::to_string(::getpid()) + ".json";
  ::setenv("TORCHELASTIC_ERROR_FILE", path.c_str(), 1);
  const int rc = RunRecorded([]() -> int { throw std::invalid_argument("bad step"); });
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  EXPECT_EQ(rc, 1);
  absl::StatusOr<ErrorRecord> r = ReadErrorFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, "std::invalid_argument: bad step");
  ::unlink(path.c_str());
}

TEST(RecordTest, RunRecordedWithoutErrorFileStillReturnsOne) {
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  EXPECT_EQ(RunRecorded([]() -> int { throw std::runtime_error("x"); }), 1);
}

}  // namespace
}  // namespace elastrun::worker
