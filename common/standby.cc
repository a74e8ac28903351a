#include "common/standby.h"

#include "absl/strings/str_cat.h"

namespace elastrun {

std::string EncodeActivation(const std::vector<std::string>& env) {
  std::string out;
  for (const std::string& e : env) {
    out.append(e);
    out.push_back('\0');
  }
  out.push_back('\0');
  return out;
}

absl::StatusOr<bool> ActivationDecoder::Feed(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (done_) {
      return absl::InvalidArgumentError("standby activation: bytes after its end");
    }
    if (++total_ > kMaxActivationBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("standby activation over ", kMaxActivationBytes, " bytes"));
    }
    if (data[i] != '\0') {
      current_.push_back(data[i]);
      continue;
    }
    if (current_.empty()) {
      done_ = true;
      continue;
    }
    if (current_.find('=') == std::string::npos || current_[0] == '=') {
      return absl::InvalidArgumentError(
          absl::StrCat("standby activation: '", current_, "' is not NAME=value"));
    }
    entries_.push_back(std::move(current_));
    current_.clear();
  }
  return done_;
}

}  // namespace elastrun
