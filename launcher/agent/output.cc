#include "launcher/agent/output.h"

#include <errno.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace elastrun::launcher {

absl::StatusOr<StdSetting> StdSetting::Parse(absl::string_view text,
                                              absl::string_view flag) {
  StdSetting s;
  auto parse_std = [&](absl::string_view v) -> absl::StatusOr<int> {
    auto n = ParseInt(v, flag, 0, 3);
    if (!n.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": '", v, "' is not a stream selector; use 0 (none), 1 (stdout), ",
          "2 (stderr), 3 (both), or per local rank like 0:3,1:2"));
    }
    return static_cast<int>(*n);
  };
  if (text.find(':') == absl::string_view::npos) {
    auto v = parse_std(text);
    if (!v.ok()) return v.status();
    s.all_ = *v;
    return s;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": '", item, "' is not LOCAL_RANK:STREAMS (for example 0:3,1:2)"));
    }
    auto rank = ParseInt(kv[0], flag, 0, 1 << 16);
    if (!rank.ok()) return rank.status();
    auto v = parse_std(kv[1]);
    if (!v.ok()) return v.status();
    s.per_rank_[static_cast<int>(*rank)] = *v;
  }
  return s;
}

int StdSetting::For(int local_rank) const {
  auto it = per_rank_.find(local_rank);
  return it == per_rank_.end() ? all_ : it->second;
}

bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

OutputStream::OutputStream(int log_fd, int console_fd, std::string prefix,
                           std::function<void(absl::string_view)> line_sink)
    : log_fd_(log_fd),
      console_fd_(console_fd),
      prefix_(std::move(prefix)),
      line_sink_(std::move(line_sink)) {}

OutputStream::~OutputStream() {
  Close();
  if (log_fd_ >= 0) close(log_fd_);
}

void OutputStream::Write(absl::string_view data) {
  if (log_fd_ >= 0) WriteAll(log_fd_, data);
  if (console_fd_ < 0 && !line_sink_) return;
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != absl::string_view::npos;
       nl = data.find('\n', start)) {
    absl::string_view piece = data.substr(start, nl - start);
    if (partial_.empty()) {
      EmitLine(piece);
    } else {
      partial_.append(piece.data(), piece.size());
      EmitLine(partial_);
      partial_.clear();
    }
    start = nl + 1;
  }
  partial_.append(data.data() + start, data.size() - start);
  // A worker printing without newlines (a progress bar with \r) must not
  // grow our memory without bound: flush long partial lines as they are.
  if (partial_.size() > 64 * 1024) {
    EmitLine(partial_);
    partial_.clear();
  }
}

void OutputStream::Close() {
  if (!partial_.empty()) {
    EmitLine(partial_);
    partial_.clear();
  }
}

void OutputStream::EmitLine(absl::string_view line) {
  // One write per line, so lines of different workers never interleave.
  if (console_fd_ >= 0) WriteAll(console_fd_, absl::StrCat(prefix_, line, "\n"));
  if (line_sink_) line_sink_(line);
}

}  // namespace elastrun::launcher
