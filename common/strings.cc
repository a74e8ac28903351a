#include "common/strings.h"

#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace elastrun {

absl::StatusOr<int64_t> ParseInt(absl::string_view text, absl::string_view what,
                                 int64_t min, int64_t max) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", text, "' is not a whole number"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", value, " is out of range; expected ",
        min == INT64_MIN ? std::string("any value") : absl::StrCat(min), " to ",
        max == INT64_MAX ? std::string("any value") : absl::StrCat(max)));
  }
  return value;
}

absl::StatusOr<bool> ParseBool(absl::string_view text, absl::string_view what) {
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": '", text, "' is not a boolean; use true/false, 1/0, yes/no"));
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text,
                                             absl::string_view what) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  double seconds = 0;
  if (absl::SimpleAtod(t, &seconds)) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": '", text, "' must be a finite, non-negative number of seconds"));
    }
    return absl::Seconds(seconds);
  }
  absl::Duration d;
  if (absl::ParseDuration(t, &d) && d >= absl::ZeroDuration() &&
      d != absl::InfiniteDuration()) {
    return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": '", text, "' is not a duration; use seconds (30, 0.5) or 250ms, 30s, 2m"));
}

absl::StatusOr<IntRange> ParseRange(absl::string_view text, absl::string_view what) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", text, "' is not N or MIN:MAX"));
  }
  IntRange r;
  auto min = ParseInt(parts[0], what, 1, 1 << 20);
  if (!min.ok()) return min.status();
  r.min = r.max = static_cast<int>(*min);
  if (parts.size() == 2) {
    auto max = ParseInt(parts[1], what, 1, 1 << 20);
    if (!max.ok()) return max.status();
    r.max = static_cast<int>(*max);
  }
  if (r.min > r.max) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": MIN ", r.min, " is greater than MAX ", r.max, " in '", text, "'"));
  }
  return r;
}

bool IsServiceName(absl::string_view text) {
  if (text.size() > 64) return false;
  for (char c : text) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      return false;
  }
  return true;
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  return absl::StartsWith(host, "127.");
}

absl::Status SplitHostPort(absl::string_view text, absl::string_view what,
                           std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: \"%s\" is not HOST:PORT (e.g. 127.0.0.1:29400, [::1]:29400, 0.0.0.0:0)",
        what, text));
  };
  if (colon == absl::string_view::npos || colon == 0) return bad();
  absl::string_view h = text.substr(0, colon);
  if (h.find(':') != absl::string_view::npos &&
      !(absl::StartsWith(h, "[") && absl::EndsWith(h, "]"))) {
    return bad();  // IPv6 needs brackets
  }
  int p = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &p) || p < 0 || p > 65535) return bad();
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

}  // namespace elastrun
