#include "worker/error_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A fresh folder per test, removed at the end.
class ErrorFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = ::testing::TempDir() + "error_file_test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::system(absl::StrCat("rm -rf '", dir_, "'").c_str());
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void Write(const std::string& path, const std::string& contents) {
    std::ofstream(path, std::ios::binary) << contents;
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
};

TEST_F(ErrorFileTest, FormatIsTorchelastics) {
  ErrorRecord record{"RuntimeError: boom", "Traceback\n  here\n", 1700000000, 3};
  EXPECT_EQ(FormatErrorFile(record),
            "{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": "
            "{\"py_callstack\": \"Traceback\\n  here\\n\", \"timestamp\": "
            "\"1700000000\"}}}");
}

TEST_F(ErrorFileTest, EscapesLikePythonEnsureAscii) {
  // \x01 and DEL as \u00XX, é as \u00e9, U+1F600 as a surrogate pair, quote,
  // backslash, tab; '/' is left alone.
  ErrorRecord record{"a\x01\x7f\"\\\t/\xc3\xa9\xf0\x9f\x98\x80", "", 0, {}};
  EXPECT_THAT(FormatErrorFile(record),
              HasSubstr(R"("a\u0001\u007f\"\\\t/\u00e9\ud83d\ude00")"));
}

TEST_F(ErrorFileTest, InvalidUtf8BecomesReplacementCharacter) {
  ErrorRecord record{"bad \xff byte", "", 0, {}};
  EXPECT_THAT(FormatErrorFile(record), HasSubstr(R"("bad \ufffd byte")"));
}

TEST_F(ErrorFileTest, RoundTrip) {
  ErrorRecord record{"std::runtime_error: x \xc3\xa9", "line1\nline2\n", 42, {}};
  const std::string path = Path("error.json");
  ASSERT_TRUE(WriteErrorFile(path, record).ok());
  absl::StatusOr<ErrorRecord> back = ReadErrorFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->message, record.message);
  EXPECT_EQ(back->traceback, record.traceback);
  EXPECT_EQ(back->timestamp, 42);
  EXPECT_FALSE(back->error_code.has_value());
  // No temporary file is left behind.
  EXPECT_EQ(::access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), -1);
}

TEST_F(ErrorFileTest, WriteReplacesAnOldFile) {
  const std::string path = Path("error.json");
  Write(path, "old garbage that is much longer than the new record ............");
  ASSERT_TRUE(WriteErrorFile(path, {"new", "", 1, {}}).ok());
  EXPECT_EQ(Slurp(path), FormatErrorFile({"new", "", 1, {}}));
}

TEST_F(ErrorFileTest, WriteIntoMissingFolderFails) {
  absl::Status status = WriteErrorFile(Path("no/such/dir/error.json"), {"m", "", 0, {}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("no/such/dir/error.json"));
}

TEST_F(ErrorFileTest, ParsesThePlainFormat) {
  absl::StatusOr<ErrorRecord> r =
      ParseErrorFile(R"({"message": "killed by SIGSEGV", "timestamp": 17})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, "killed by SIGSEGV");
  EXPECT_EQ(r->timestamp, 17);
  r = ParseErrorFile(R"({"message": "m", "timestamp": "18"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp, 18);
  r = ParseErrorFile(R"({"message": "no time"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp, 0);
}

TEST_F(ErrorFileTest, ParsesTheAgentsErrorCode) {
  absl::StatusOr<ErrorRecord> r = ParseErrorFile(
      R"({"message": {"message": "E: x", "extraInfo": {"py_callstack": "tb",)"
      R"( "timestamp": "5"}, "errorCode": -11}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message, "E: x");
  EXPECT_EQ(r->traceback, "tb");
  EXPECT_EQ(r->timestamp, 5);
  EXPECT_EQ(r->error_code, -11);
}

TEST_F(ErrorFileTest, RejectsGarbage) {
  const char* garbage[] = {
      "",
      "not json",
      "{\"message\": {\"message\": \"trunc",
      "[1, 2]",
      "\"message\"",
      "{}",
      "{\"msg\": \"x\"}",
      "{\"message\": 42}",
      "{\"message\": null}",
      "{\"message\": {\"message\": 1}}",
      "{\"message\": {\"message\": \"m\", \"extraInfo\": []}}",
      "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"py_callstack\": 3}}}",
      "{\"message\": {\"message\": \"m\", \"extraInfo\": {\"timestamp\": \"soon\"}}}",
      "{\"message\": \"m\", \"timestamp\": [1]}",
      "{\"message\": \"m\", \"timestamp\": 1e300}",
      "\xff\xfe\x00\x01",
  };
  for (const char* g : garbage) {
    absl::StatusOr<ErrorRecord> r = ParseErrorFile(g);
    ASSERT_FALSE(r.ok()) << g;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << g;
    EXPECT_THAT(std::string(r.status().message()),
                StartsWith("not a torchelastic error file"))
        << g;
  }
  // Deep nesting neither crashes nor is accepted.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(ParseErrorFile(deep).ok());
}

TEST_F(ErrorFileTest, ReadErrors) {
  absl::StatusOr<ErrorRecord> r = ReadErrorFile(Path("missing.json"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing.json"));

  const std::string bad = Path("bad.json");
  Write(bad, "{\"message\": ");
  r = ReadErrorFile(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), StartsWith(bad + ": not a torchelastic"));

  const std::string big = Path("big.json");
  Write(big, std::string(kMaxErrorFileBytes + 1, ' '));
  r = ReadErrorFile(big);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("larger than"));

  EXPECT_FALSE(ReadErrorFile(dir_).ok());  // A folder.
}

// The real thing: Python's @record writes a file; we must read it, and our
// writer must produce the very same bytes for the same values.
TEST_F(ErrorFileTest, ByteCompatibleWithPythonRecord) {
  constexpr char kPython[] = "/usr/bin/python3";
  if (std::system(absl::StrCat(kPython,
                               " -c 'import torch.distributed.elastic.multiprocessing.errors'"
                               " >/dev/null 2>&1")
                      .c_str()) != 0) {
    GTEST_SKIP() << kPython << " cannot import torch.distributed.elastic "
                 << "(install python3-torch); skipping the compatibility check";
  }
  const std::string script = Path("record.py");
  const std::string path = Path("py_error.json");
  Write(script,
        "import sys\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "@record\n"
        "def main():\n"
        "    raise ValueError('boom \\u00e9 \"q\" \\\\ \\U0001F600\\tx\\nsecond line')\n"
        "main()\n");
  const std::string cmd = absl::StrCat("TORCHELASTIC_ERROR_FILE='", path, "' ", kPython,
                                       " '", script, "' >/dev/null 2>&1");
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << "python exit status " << rc;

  absl::StatusOr<ErrorRecord> r = ReadErrorFile(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->message,
            "ValueError: boom \xc3\xa9 \"q\" \\ \xf0\x9f\x98\x80\tx\nsecond line");
  EXPECT_THAT(r->traceback, StartsWith("Traceback (most recent call last):\n"));
  EXPECT_THAT(r->traceback, HasSubstr("second line"));
  EXPECT_GT(r->timestamp, 1600000000);
  EXPECT_EQ(FormatErrorFile(*r), Slurp(path));
}

}  // namespace
}  // namespace elastrun::worker
