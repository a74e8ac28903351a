#include "common/progress.h"

#include <sys/random.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

bool NameChars(absl::string_view s) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

constexpr char kJobKey[] = "job";
constexpr char kSecretKey[] = "secret";

// "job=J " when the job can travel, else nothing.
std::string JobItem(const std::string& job_id) {
  return ValidJobTag(job_id) ? absl::StrCat(kJobKey, "=", job_id, " ") : std::string();
}

// "secret=X " when the secret can travel, else nothing.
std::string SecretItem(const std::string& secret) {
  return ValidSecret(secret) ? absl::StrCat(kSecretKey, "=", secret, " ") : std::string();
}

}  // namespace

bool ValidSecret(absl::string_view secret) {
  if (secret.empty() || secret.size() > 64) return false;
  for (char c : secret) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string NewAgentSecret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof bytes) {
    // getrandom is missing (old kernel): the same pool through the file.
    FILE* f = fopen("/dev/urandom", "rbe");
    got = f != nullptr ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f != nullptr) fclose(f);
  }
  // A secret guessable by anyone would defeat its purpose: crash loudly.
  if (got < sizeof bytes) abort();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

bool ValidJobTag(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > 256) return false;
  for (char c : job_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' &&
        c != '-' && c != '@') {
      return false;
    }
  }
  return true;
}

std::string EncodeProgress(const ProgressReport& r) {
  std::string out = absl::StrCat(JobItem(r.job_id), SecretItem(r.secret), "rank=", r.rank,
                                 " step=", r.step);
  if (r.beat > 0) absl::StrAppend(&out, " beat=", r.beat);
  size_t n = 0;
  for (const auto& [name, value] : r.metrics) {
    if (n++ == kMaxProgressMetrics || !std::isfinite(value)) continue;
    // Would read back as those.
    if (name == kJobKey || name == kSecretKey || name == "beat") continue;
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
    if (kv[0] == kJobKey) {
      if (!ValidJobTag(kv[1])) return absl::InvalidArgumentError("progress report: bad job");
      r.job_id = std::string(kv[1]);
    } else if (kv[0] == kSecretKey) {
      if (!ValidSecret(kv[1]))
        return absl::InvalidArgumentError("progress report: bad secret");
      r.secret = std::string(kv[1]);
    } else if (kv[0] == "rank") {
      has_rank = absl::SimpleAtoi(kv[1], &r.rank) && r.rank >= 0;
      if (!has_rank) return absl::InvalidArgumentError("progress report: bad rank");
    } else if (kv[0] == "step") {
      has_step = absl::SimpleAtoi(kv[1], &r.step);
      if (!has_step) return absl::InvalidArgumentError("progress report: bad step");
    } else if (kv[0] == "beat") {
      if (!absl::SimpleAtoi(kv[1], &r.beat) || r.beat < 1) {
        return absl::InvalidArgumentError("progress report: bad beat");
      }
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

namespace {
constexpr char kBarrierPrefix[] = "barrier ";
}  // namespace

absl::Status ValidateBarrierName(absl::string_view name) {
  if (name.empty() || name.size() > 256) {
    return absl::InvalidArgumentError("barrier name: 1 to 256 characters");
  }
  if (!NameChars(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier name '", name, "': only letters, digits, '_', '.', '-'"));
  }
  return absl::OkStatus();
}

std::string EncodeBarrier(const BarrierArrival& a) {
  return absl::StrCat(kBarrierPrefix, JobItem(a.job_id), SecretItem(a.secret),
                      "rank=", a.rank, " local_world_size=", a.local_world_size,
                      " name=", a.name);
}

bool IsBarrierDatagram(absl::string_view datagram) {
  return absl::StartsWith(datagram, kBarrierPrefix);
}

absl::StatusOr<BarrierArrival> DecodeBarrier(absl::string_view datagram) {
  if (!IsBarrierDatagram(datagram) || datagram.size() > kMaxProgressBytes) {
    return absl::InvalidArgumentError("not a barrier arrival");
  }
  datagram.remove_prefix(sizeof kBarrierPrefix - 1);
  BarrierArrival a;
  bool rank = false, lws = false, name = false;
  for (absl::string_view item : absl::StrSplit(datagram, ' ', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) return absl::InvalidArgumentError("barrier arrival: bad item");
    if (kv[0] == kJobKey) {
      if (!ValidJobTag(kv[1])) return absl::InvalidArgumentError("barrier arrival: bad job");
      a.job_id = std::string(kv[1]);
    } else if (kv[0] == kSecretKey) {
      if (!ValidSecret(kv[1]))
        return absl::InvalidArgumentError("barrier arrival: bad secret");
      a.secret = std::string(kv[1]);
    } else if (kv[0] == "rank") {
      rank = absl::SimpleAtoi(kv[1], &a.rank) && a.rank >= 0;
    } else if (kv[0] == "local_world_size") {
      lws = absl::SimpleAtoi(kv[1], &a.local_world_size) && a.local_world_size >= 1;
    } else if (kv[0] == "name") {
      a.name = std::string(kv[1]);
      name = ValidateBarrierName(a.name).ok();
    }
  }
  if (!rank || !lws || !name) {
    return absl::InvalidArgumentError("barrier arrival without a valid rank, "
                                      "local_world_size and name");
  }
  return a;
}

}  // namespace elastrun
