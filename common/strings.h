// Parsing of the small textual values that flags, environment variables and
// job specs carry. Every error names `what` (a flag, variable or field) and
// says what a valid value looks like.
#ifndef ELASTRUN_COMMON_STRINGS_H_
#define ELASTRUN_COMMON_STRINGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace elastrun {

// A whole decimal integer in [min, max]; surrounding spaces are allowed.
absl::StatusOr<int64_t> ParseInt(absl::string_view text, absl::string_view what,
                                 int64_t min = INT64_MIN, int64_t max = INT64_MAX);

// true/false, 1/0, yes/no, on/off (any case).
absl::StatusOr<bool> ParseBool(absl::string_view text, absl::string_view what);

// Seconds as a plain number ("30", "0.5") or with a unit ("30s", "250ms",
// "2m"); never negative.
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text,
                                             absl::string_view what);

// An inclusive range "MIN:MAX" or a single "N" (meaning N:N), as torchrun's
// --nnodes; 1 <= MIN <= MAX.
struct IntRange {
  int min = 1;
  int max = 1;
};
absl::StatusOr<IntRange> ParseRange(absl::string_view text, absl::string_view what);

// Whether the rendezvous service takes `text` as a name (a job's name, a
// request id, a pool): at most 64 characters of [A-Za-z0-9._-]; "" is one.
bool IsServiceName(absl::string_view text);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(absl::string_view host);

// Splits "HOST:PORT" / "[v6]:PORT". InvalidArgument naming `what` otherwise.
absl::Status SplitHostPort(absl::string_view text, absl::string_view what,
                           std::string* host, int* port);

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_STRINGS_H_
