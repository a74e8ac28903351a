// The exit reports of a node's attempts, apart from the Daemon's job state:
// queued in the order the attempts ended, sent in that order on their own
// lane (lanes.h), and kept while the service cannot take them, to be sent
// again after the next registration. A report the service refuses for good
// (a stale round, a finished job) is dropped.
//
// Thread-safety: thread-safe. Its lock is taken under the Daemon's, never
// the other way round; no RPC runs while it is held.
#ifndef ELASTRUN_LAUNCHER_DAEMON_EXIT_REPORTS_H_
#define ELASTRUN_LAUNCHER_DAEMON_EXIT_REPORTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/lanes.h"

namespace elastrun::launcher {

class ExitReports {
 public:
  // `client` and `lanes` are not owned; the lanes must be drained (or
  // destroyed) before this is. `before_send` (may be empty) runs on the
  // lane before reports go out, e.g. to flush the workers' output first.
  ExitReports(RendezvousClient* client, Lanes* lanes, std::function<void()> before_send);

  // Queues a report; Send sends it.
  void Add(v1::ReportExitRequest report);

  // Sends the queued reports, in order, on the reports lane; returns at
  // once. One that fails with UNAVAILABLE or a deadline stays first in the
  // queue for the next call.
  void Send();

  // The (job, round) of every queued report, oldest first.
  std::vector<std::pair<std::string, int64_t>> Rounds() const;
  size_t size() const;

 private:
  void SendNow();

  RendezvousClient* const client_;
  Lanes* const lanes_;
  const std::function<void()> before_send_;
  mutable absl::Mutex mu_;
  std::deque<v1::ReportExitRequest> queue_ ABSL_GUARDED_BY(mu_);
  // A SendNow is queued on the lane and has not begun: one is enough, it
  // takes every report queued by then.
  bool send_queued_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_EXIT_REPORTS_H_
