// The standby protocol between a launcher and a worker built on
// libelastrun_worker. With `elastrun run --standby` the launcher starts the
// next attempt's workers ahead of time; each pays its start-up (loading
// LibTorch: ~0.35 s here) and then waits, so a restart only activates them.
//
// Over the socket named by ELASTRUN_STANDBY_FD:
//   worker -> launcher: one byte kStandbyReady once start-up is done and the
//                       worker waits for its activation;
//   launcher -> worker: the activation: environment entries "NAME=value",
//                       each followed by '\0', then one more '\0'.
// The worker sets each entry in its environment and goes on as if started
// with it. End of stream before the final '\0' means "not needed": the worker
// exits 0 without doing anything. Workers started directly also get the
// socket and an empty activation, so every worker reports its start-up.
#ifndef ELASTRUN_COMMON_STANDBY_H_
#define ELASTRUN_COMMON_STANDBY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun {

inline constexpr char kStandbyReady = 'R';
// Largest activation accepted (environment sizes are bounded by the kernel
// at a few MB; anything bigger is not an activation).
inline constexpr size_t kMaxActivationBytes = 8 << 20;

// Encodes an activation.
std::string EncodeActivation(const std::vector<std::string>& env);

// Collects an activation from bytes as they arrive.
class ActivationDecoder {
 public:
  // Feeds bytes. Returns true once the activation is complete (bytes after
  // it are an error). InvalidArgument for an entry without '=' or an
  // activation over kMaxActivationBytes.
  absl::StatusOr<bool> Feed(const char* data, size_t size);
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  std::string current_;
  std::vector<std::string> entries_;
  size_t total_ = 0;
  bool done_ = false;
};

}  // namespace elastrun

#endif  // ELASTRUN_COMMON_STANDBY_H_
