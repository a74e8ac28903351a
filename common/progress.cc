#include "common/progress.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace elastrun {
namespace {

std::string CleanName(const std::string& name) {
  std::string out = name.substr(0, 64);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return out.empty() ? "_" : out;
}

}  // namespace

std::string EncodeProgress(const ProgressReport& r) {
  std::string out = absl::StrCat("rank=", r.rank, " step=", r.step);
  size_t n = 0;
  for (const auto& [name, value] : r.metrics) {
    if (n++ == kMaxProgressMetrics || !std::isfinite(value)) continue;
    std::string item = absl::StrCat(" ", CleanName(name), "=", value);
    if (out.size() + item.size() > kMaxProgressBytes) break;
    out += item;
  }
  return out;
}

absl::StatusOr<ProgressReport> DecodeProgress(absl::string_view datagram) {
  if (datagram.size() > kMaxProgressBytes) {
    return absl::InvalidArgumentError("progress report too long");
  }
  ProgressReport r;
  bool has_rank = false, has_step = false;
  for (absl::string_view item : absl::StrSplit(datagram, ' ', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("progress report: '", item,
                                                     "' is not name=value"));
    }
    if (kv[0] == "rank") {
      has_rank = absl::SimpleAtoi(kv[1], &r.rank) && r.rank >= 0;
      if (!has_rank) return absl::InvalidArgumentError("progress report: bad rank");
    } else if (kv[0] == "step") {
      has_step = absl::SimpleAtoi(kv[1], &r.step);
      if (!has_step) return absl::InvalidArgumentError("progress report: bad step");
    } else {
      double v = 0;
      if (!absl::SimpleAtod(kv[1], &v) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("progress report: metric '", kv[0], "' is not a number"));
      }
      if (r.metrics.size() < kMaxProgressMetrics) r.metrics[std::string(kv[0])] = v;
    }
  }
  if (!has_rank || !has_step) {
    return absl::InvalidArgumentError("progress report without rank= and step=");
  }
  return r;
}

}  // namespace elastrun
