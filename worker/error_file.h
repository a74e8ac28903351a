// The worker error file (TORCHELASTIC_ERROR_FILE): a small JSON record a
// failing worker leaves for its launcher, which reports the earliest one as
// the job's root cause. The format is torch.distributed.elastic's, so files
// written by Python's `@record` and by C++ workers read the same:
//
//   {"message": {"message": "ValueError: boom",
//                "extraInfo": {"py_callstack": "Traceback ...",
//                              "timestamp": "1700000000"}}}
//
// (on one line). torchelastic also accepts {"message": "...", "timestamp": N},
// and its agent may add "errorCode" next to "extraInfo"; both are read here.
// Torch-free: the launcher links this.
#ifndef ELASTRUN_WORKER_ERROR_FILE_H_
#define ELASTRUN_WORKER_ERROR_FILE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::worker {

// One failure, as recorded in an error file.
struct ErrorRecord {
  // One-line summary, "<ExceptionType>: <what>" as Python's record writes.
  std::string message;
  // Longer context (Python: the formatted traceback); may be empty.
  std::string traceback;
  // When the failure happened, seconds since the Unix epoch; 0 if unknown.
  int64_t timestamp = 0;
  // Exit code the launcher stamped in ("errorCode"), if any.
  std::optional<int> error_code;
};

// Largest error file ReadErrorFile() accepts; a bigger one is not ours.
inline constexpr int64_t kMaxErrorFileBytes = 16 << 20;

// The record in torchelastic's format, byte-for-byte what Python's
// `json.dump` writes for the same values (", " and ": " separators, keys in
// torchelastic's order, non-ASCII escaped as \uXXXX). `error_code` is not
// written (a worker cannot know its exit code; the agent adds it).
// Invalid UTF-8 in the strings becomes U+FFFD.
std::string FormatErrorFile(const ErrorRecord& record);

// Writes FormatErrorFile(record) to `path` atomically: a temporary file in
// the same folder, fsync, then rename over `path`, so a reader never sees a
// partial record. Errors: the folder is missing or not writable, disk full.
absl::Status WriteErrorFile(const std::string& path, const ErrorRecord& record);

// Parses an error file's contents. Accepts both formats described above;
// "timestamp" may be a number or a numeric string, as Python's int() takes.
// Never throws: anything else (not JSON, no "message", wrong types) is an
// InvalidArgument error that says what was expected.
absl::StatusOr<ErrorRecord> ParseErrorFile(absl::string_view contents);

// Reads and parses the file at `path`. Errors: NotFound if it does not
// exist (the worker died without writing one, e.g. on a signal); other
// read errors; files over kMaxErrorFileBytes; ParseErrorFile()'s errors,
// prefixed with the path.
absl::StatusOr<ErrorRecord> ReadErrorFile(const std::string& path);

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_ERROR_FILE_H_
