#include "worker/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <errno.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "common/worker_env.h"

namespace elastrun::worker {

namespace {

// The agent's socket and who this worker is, read once from the
// environment (a standby worker reads it after its activation, which comes
// before any report).
struct AgentChannel {
  int fd = -1;
  sockaddr_un addr{};
  int rank = 0;
  std::string job;     // routes the report when the daemon runs several jobs
  std::string secret;  // proves to the agent that a worker sends it
  std::atomic<int64_t> last_step{-1};
  std::atomic<int64_t> beats{0};
  std::atomic<int64_t> last_send_ns{0};

  static AgentChannel& Get() {
    static AgentChannel* channel = [] {
      auto* c = new AgentChannel;
      const char* path = getenv(env::kAgentSocket);
      if (path == nullptr || *path == '\0' || strlen(path) >= sizeof c->addr.sun_path) {
        return c;
      }
      if (const char* r = getenv(env::kRank)) c->rank = atoi(r);
      if (const char* j = getenv(env::kRunId)) c->job = j;
      if (const char* s = getenv(env::kAgentSecret)) c->secret = s;
      c->addr.sun_family = AF_UNIX;
      strncpy(c->addr.sun_path, path, sizeof c->addr.sun_path - 1);
      c->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      return c;
    }();
    return *channel;
  }

  void Send(ProgressReport report) {
    report.job_id = job;
    report.secret = secret;
    report.rank = rank;
    const std::string datagram = EncodeProgress(report);
    (void)sendto(fd, datagram.data(), datagram.size(), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    last_send_ns.store(NowNs(), std::memory_order_relaxed);
  }

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Beats closer together than this add nothing: the agent samples far less
// often.
constexpr int64_t kBeatIntervalNs = 250'000'000;

}  // namespace

void ReportProgress(int64_t step, const std::map<std::string, double>& metrics) {
  AgentChannel& c = AgentChannel::Get();
  if (c.fd < 0) return;
  c.last_step.store(step, std::memory_order_relaxed);
  ProgressReport report;
  report.step = step;
  report.metrics = metrics;
  c.Send(std::move(report));
}

void ReportBusy() {
  AgentChannel& c = AgentChannel::Get();
  if (c.fd < 0) return;
  if (AgentChannel::NowNs() - c.last_send_ns.load(std::memory_order_relaxed) <
      kBeatIntervalNs) {
    return;
  }
  ProgressReport report;
  report.step = c.last_step.load(std::memory_order_relaxed);
  report.beat = c.beats.fetch_add(1, std::memory_order_relaxed) + 1;
  c.Send(std::move(report));
}

absl::Status AgentBarrier(const std::string& name, absl::Duration timeout) {
  RETURN_IF_ERROR(ValidateBarrierName(name));
  const char* path = getenv(env::kAgentSocket);
  sockaddr_un agent{};
  if (path == nullptr || *path == '\0' || strlen(path) >= sizeof agent.sun_path) {
    return absl::FailedPreconditionError(absl::StrCat(
        "barrier '", name, "': no node daemon to meet at (", env::kAgentSocket,
        " is not set; barriers need a job submitted through elastrund)"));
  }
  agent.sun_family = AF_UNIX;
  strncpy(agent.sun_path, path, sizeof agent.sun_path - 1);
  BarrierArrival arrival;
  if (const char* j = getenv(env::kRunId)) arrival.job_id = j;
  if (const char* s = getenv(env::kAgentSecret)) arrival.secret = s;
  if (const char* r = getenv(env::kRank)) arrival.rank = atoi(r);
  if (const char* l = getenv(env::kLocalWorldSize)) arrival.local_world_size = atoi(l);
  arrival.name = name;
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("barrier: socket() failed");
  // An address of our own (autobind) for the answer, connected to the
  // agent's: the kernel then refuses datagrams from any other socket
  // (EPERM to the sender), and the address, which any local user can read
  // in /proc/net/unix, releases this barrier for no one but the agent.
  sockaddr_un self{};
  self.sun_family = AF_UNIX;
  const std::string wire = EncodeBarrier(arrival);
  absl::Status result;
  if (bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(sa_family_t)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&agent), sizeof agent) != 0 ||
      send(fd, wire.data(), wire.size(), 0) < 0) {
    result = absl::UnavailableError(absl::StrCat("barrier '", name, "': cannot reach the ",
                                                 "node daemon at ", path, ": ",
                                                 strerror(errno)));
  } else {
    const absl::Time deadline = absl::Now() + timeout;
    char buf[1024];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      const int n = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30))));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        result = absl::DeadlineExceededError(absl::StrCat(
            "barrier '", name, "': not every worker arrived within ",
            absl::FormatDuration(timeout)));
        break;
      }
      const ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got < 0 && errno == EINTR) continue;
      const absl::string_view answer(buf, got > 0 ? static_cast<size_t>(got) : 0);
      if (answer == "ok") break;
      result = absl::AbortedError(absl::StrCat(
          "barrier '", name, "': ",
          absl::StartsWith(answer, "error ") ? answer.substr(6) : answer));
      break;
    }
  }
  close(fd);
  return result;
}

}  // namespace elastrun::worker
