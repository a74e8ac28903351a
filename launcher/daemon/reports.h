// The exit reports a node daemon sends the service (ReportExit), shared by
// the two halves of the Daemon (daemon.cc: commands and attempts;
// daemon_reports.cc: reports and what workers send).
#ifndef ELASTRUN_LAUNCHER_DAEMON_REPORTS_H_
#define ELASTRUN_LAUNCHER_DAEMON_REPORTS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/codec.h"

namespace elastrun::launcher::internal {

// Whether a call may succeed later: the service is away or slow.
inline bool Retriable(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ||
         absl::IsCancelled(st) || absl::IsUnknown(st);
}

// Node `node`'s report that round `round` of `job` failed with `f`.
inline v1::ReportExitRequest FailureReport(const std::string& node, const std::string& job,
                                           int64_t round, const rendezvous::Failure& f) {
  v1::ReportExitRequest r;
  r.set_job_id(job);
  r.set_round(round);
  r.set_node_id(node);
  *r.mutable_failure() = rendezvous::ToProto(f);
  return r;
}

}  // namespace elastrun::launcher::internal

#endif  // ELASTRUN_LAUNCHER_DAEMON_REPORTS_H_
