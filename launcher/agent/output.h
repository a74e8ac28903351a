// Worker output: every byte a worker writes goes to its log file as is, and
// complete lines go to the launcher's console with a "[rankN]:" prefix
// (torchrun's tee format), unless the user redirected that stream.
#ifndef ELASTRUN_LAUNCHER_AGENT_OUTPUT_H_
#define ELASTRUN_LAUNCHER_AGENT_OUTPUT_H_

#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::launcher {

// torchrun's Std: which of a worker's streams a setting applies to.
enum StdMask : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// A --redirects/--tee value: "3" for every local rank, or "0:1,1:2" per
// local rank (ranks not listed get kStdNone), as torchrun accepts.
class StdSetting {
 public:
  static absl::StatusOr<StdSetting> Parse(absl::string_view text, absl::string_view flag);
  int For(int local_rank) const;

 private:
  int all_ = kStdNone;
  std::map<int, int> per_rank_;
};

// One stream of one worker. Not thread-safe; owned by the agent's loop.
class OutputStream {
 public:
  // `log_fd` (owned; -1 for none) receives every byte; `console_fd` (not
  // owned; -1 for none) receives complete lines, each behind `prefix`;
  // `line_sink` (may be empty) is called with every complete line, without
  // its newline.
  OutputStream(int log_fd, int console_fd, std::string prefix,
               std::function<void(absl::string_view)> line_sink = nullptr);
  ~OutputStream();
  OutputStream(const OutputStream&) = delete;
  OutputStream& operator=(const OutputStream&) = delete;

  void Write(absl::string_view data);
  // The stream ended: a last partial line goes out with a newline added.
  void Close();

 private:
  void EmitLine(absl::string_view line);

  int log_fd_;
  int console_fd_;
  std::string prefix_;
  std::function<void(absl::string_view)> line_sink_;
  std::string partial_;
};

// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool WriteAll(int fd, absl::string_view data);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_OUTPUT_H_
