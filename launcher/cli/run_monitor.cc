#include "launcher/cli/run_monitor.h"

#include <string.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "glog/logging.h"
#include "launcher/cli/format.h"
#include "launcher/cli/run.h"
#include "launcher/cli/run_host.h"

namespace elastrun::launcher {

int FinishedExitCode(const RunOptions& o, const v1::JobStatus& s, const std::string& run_dir) {
  const std::string after =
      s.restarts() > 0 ? absl::StrCat(" after ", s.restarts(), " restart(s)") : "";
  if (s.state() == v1::JOB_STATE_SUCCEEDED) {
    Say(absl::StrCat("run ", o.run_id, " succeeded", after));
    return 0;
  }
  Say(absl::StrCat("run ", o.run_id, " ", absl::AsciiStrToLower(JobStateName(s.state())),
                   after, ": ", s.finish_reason()));
  if (!s.has_root_cause()) return 1;
  const v1::WorkerFailure& f = s.root_cause();
  // The block of `elastrun run` on one node: log scrapers read one layout.
  WriteAll(STDERR_FILENO,
           FormatRootCauseBlock(f, absl::StrCat(run_dir, "/", s.job_id(), "/attempt_", f.round())));
  if (f.signal() > 0) return 128 + f.signal();
  if (f.cannot_start()) return 127;
  return f.exit_code() > 0 && f.exit_code() < 256 ? f.exit_code() : 1;
}

namespace {

// The host's end of a run still waiting for nodes after join_timeout: the
// job is cancelled with torchrun's reason, and every node says it.
void EndWaitForNodes(const RunOptions& o, JobsClient* jobs, const v1::JobStatus& s) {
  int alive = 0;
  if (absl::StatusOr<v1::ListNodesResponse> nodes = jobs->ListNodes({}); nodes.ok()) {
    for (const v1::NodeInfo& n : nodes->nodes()) alive += n.state() == v1::NODE_STATE_ALIVE;
  }
  const std::string why = absl::StrCat(
      "rendezvous timed out: only ", alive, " of min_nodes=", s.spec().min_nodes(),
      " nodes joined within join_timeout=", absl::FormatDuration(o.rdzv_conf.join_timeout),
      " (--nnodes ", s.spec().min_nodes(), ":", s.spec().max_nodes(), ")");
  absl::StatusOr<v1::JobStatus> cancelled = jobs->Cancel(s.job_id(), why);
  if (!cancelled.ok()) LOG(ERROR) << "cannot end the run: " << cancelled.status();
}

}  // namespace

int RunMonitor::Run(bool* finished) {
  const absl::Duration host_timeout =
      o_.rdzv_conf.keep_alive_interval * o_.rdzv_conf.keep_alive_max_attempt;
  absl::Time last_answer = absl::Now();
  const absl::Time join_deadline = last_answer + o_.rdzv_conf.join_timeout;
  *finished = false;
  for (;;) {
    if (int sig = stop_->WaitFor(absl::Milliseconds(200)); sig != 0) {
      if (sig < 0) return -1;
      Say(absl::StrCat("stopped by SIG", sigabbrev_np(sig),
                       "; stopping this node's workers"));
      return 128 + sig;
    }
    absl::StatusOr<v1::JobStatus> s = jobs_->Get(job_id_);
    if (!s.ok()) {
      if (absl::IsUnauthenticated(s.status()) || absl::IsPermissionDenied(s.status())) {
        Say(absl::StrCat("the rendezvous at ", o_.rdzv_endpoint,
                         " refused this node: ", s.status().message()));
        return 1;
      }
      if (absl::Now() - last_answer < host_timeout) continue;
      LOG(ERROR) << "the rendezvous host is unreachable: " << s.status();
      Say(absl::StrCat("lost the rendezvous host ", o_.rdzv_endpoint, " (no answer for ",
                       absl::FormatDuration(absl::Trunc(absl::Now() - last_answer,
                                                        absl::Milliseconds(100))),
                       "): the run cannot go on without it; this node's workers are ",
                       "stopped. Start the run again on the nodes left"));
      return 1;
    }
    last_answer = absl::Now();
    if (s->state() == v1::JOB_STATE_SUCCEEDED || s->state() == v1::JOB_STATE_FAILED ||
        s->state() == v1::JOB_STATE_CANCELLED) {
      *finished = true;
      return FinishedExitCode(o_, *s, run_dir_);
    }
    // Queued (placed nowhere yet: round 0 never opened); once placed, the
    // round's own join_timeout applies.
    if (hosting_ && s->state() == v1::JOB_STATE_PENDING && !s->pending_reason().empty() &&
        absl::Now() >= join_deadline) {
      EndWaitForNodes(o_, jobs_, *s);
    }
  }
}

absl::StatusOr<std::string> FindRunJob(const RunOptions& o, int nproc, JobsClient* jobs,
                                       StopRequest* stop) {
  const absl::Time deadline =
      absl::Now() + o.rdzv_conf.keep_alive_interval * o.rdzv_conf.keep_alive_max_attempt;
  absl::StatusOr<v1::ListJobsResponse> list = jobs->List({});
  while ((!list.ok() || list->jobs_size() == 0) && absl::Now() < deadline &&
         stop->WaitFor(absl::Milliseconds(20)) == 0) {
    list = jobs->List({});
  }
  if (!list.ok() || list->jobs_size() == 0) {
    return absl::UnavailableError(
        absl::StrCat("the rendezvous at ", o.rdzv_endpoint, " holds no run",
                     list.ok() ? "" : absl::StrCat(" (", list.status().message(), ")")));
  }
  const v1::JobStatus& job = list->jobs(0);
  const v1::JobSpec& spec = job.spec();
  const v1::JobSpec mine = MultinodeJobSpec(o, nproc, {});
  if (spec.name() != mine.name()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rendezvous at ", o.rdzv_endpoint, " hosts run ", spec.name(),
                     ", not ", o.run_id, ": is another run using this endpoint?"));
  }
  if (spec.nproc_per_node() != nproc || spec.min_nodes() != mine.min_nodes() ||
      spec.max_nodes() != mine.max_nodes()) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", o.run_id, " has --nnodes ", spec.min_nodes(), ":",
                     spec.max_nodes(), " --nproc-per-node ", spec.nproc_per_node(),
                     " at its host, this node ", mine.min_nodes(), ":", mine.max_nodes(),
                     " and ", nproc, ": every node must give the same"));
  }
  return job.job_id();
}

}  // namespace elastrun::launcher
