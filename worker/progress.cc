#include "worker/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <mutex>

#include "common/progress.h"
#include "common/worker_env.h"

namespace elastrun::worker {

void ReportProgress(int64_t step, const std::map<std::string, double>& metrics) {
  // The socket is opened once; the environment is read then too (a standby
  // worker reads it after its activation, which comes before any step).
  static std::once_flag once;
  static int fd = -1;
  static sockaddr_un addr{};
  static int rank = 0;
  std::call_once(once, [] {
    const char* path = getenv(env::kAgentSocket);
    if (path == nullptr || *path == '\0' || strlen(path) >= sizeof addr.sun_path) return;
    if (const char* r = getenv(env::kRank)) rank = atoi(r);
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  });
  if (fd < 0) return;
  ProgressReport report;
  report.rank = rank;
  report.step = step;
  report.metrics = metrics;
  const std::string datagram = EncodeProgress(report);
  (void)sendto(fd, datagram.data(), datagram.size(), MSG_DONTWAIT,
               reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
}

}  // namespace elastrun::worker
