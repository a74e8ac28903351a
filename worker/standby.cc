#include "worker/standby.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/standby.h"
#include "common/worker_env.h"

namespace elastrun::worker {

absl::Status AwaitStandbyActivation() {
  const char* fd_text = std::getenv(env::kStandbyFd);
  if (fd_text == nullptr) return absl::OkStatus();
  int fd = -1;
  if (!absl::SimpleAtoi(fd_text, &fd) || fd < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        env::kStandbyFd, "='", fd_text, "' is not a descriptor number (>= 3); it is set by ",
        "`elastrun run --standby` and should not be set by hand"));
  }
  const char ready = kStandbyReady;
  while (write(fd, &ready, 1) < 0 && errno == EINTR) {
  }
  ActivationDecoder decoder;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the launcher no longer needs this standby
    auto done = decoder.Feed(buf, static_cast<size_t>(n));
    if (!done.ok()) return done.status();
    if (*done) break;
  }
  for (const std::string& entry : decoder.entries()) {
    const size_t eq = entry.find('=');
    setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
  }
  unsetenv(env::kStandbyFd);
  unsetenv(env::kStandbyLocalRank);  // LOCAL_RANK says it now
  close(fd);
  return absl::OkStatus();
}

}  // namespace elastrun::worker
