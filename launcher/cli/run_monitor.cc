#include "launcher/cli/run_monitor.h"

#include <string.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/files.h"
#include "common/status_macros.h"
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
  // A running service (the elastrun backend) keeps the run while it fails
  // over or restarts: its silence is waited out, the workers going on.
  const bool external = o_.external_rendezvous();
  const absl::Duration give_up = external ? o_.rdzv_conf.join_timeout : host_timeout;
  absl::Time last_answer = absl::Now();
  const absl::Time join_deadline = last_answer + o_.rdzv_conf.join_timeout;
  bool said_silent = false;
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
      const absl::Duration silent = absl::Now() - last_answer;
      if (external && !said_silent && silent >= host_timeout) {
        Say(absl::StrCat("the rendezvous service at ", o_.rdzv_endpoint,
                         " does not answer (", s.status().message(),
                         "); the workers go on; waiting up to join_timeout ",
                         absl::FormatDuration(give_up), " for it"));
        said_silent = true;
      }
      if (silent < give_up) continue;
      LOG(ERROR) << "the rendezvous is unreachable: " << s.status();
      Say(absl::StrCat(
          external ? "lost the rendezvous service " : "lost the rendezvous host ",
          o_.rdzv_endpoint, " (no answer for ",
          absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(100))),
          "): the run cannot go on without it; this node's workers are ",
          "stopped. Start the run again on the nodes left"));
      return 1;
    }
    last_answer = absl::Now();
    if (said_silent) {
      Say(absl::StrCat("the rendezvous service at ", o_.rdzv_endpoint, " answers again"));
      said_silent = false;
    }
    if (s->state() == v1::JOB_STATE_SUCCEEDED || s->state() == v1::JOB_STATE_FAILED ||
        s->state() == v1::JOB_STATE_CANCELLED) {
      *finished = true;
      return FinishedExitCode(o_, *s, run_dir_);
    }
    // Queued (placed nowhere yet: round 0 never opened); once placed, the
    // round's own join_timeout applies. With a running service every node
    // may end it: the first whose deadline passes.
    if ((hosting_ || external) && s->state() == v1::JOB_STATE_PENDING &&
        !s->pending_reason().empty() && absl::Now() >= join_deadline) {
      EndWaitForNodes(o_, jobs_, *s);
    }
  }
}

absl::Status CheckRunJob(const RunOptions& o, int nproc, const v1::JobStatus& job) {
  const v1::JobSpec& spec = job.spec();
  const v1::JobSpec mine = MultinodeJobSpec(o, nproc, {});
  if (spec.name() != mine.name() || spec.run_id() != o.run_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rendezvous at ", o.rdzv_endpoint, " hosts run ", spec.run_id(),
                     ", not ", o.run_id, ": is another run using this endpoint?"));
  }
  if (spec.nproc_per_node() != nproc || spec.min_nodes() != mine.min_nodes() ||
      spec.max_nodes() != mine.max_nodes()) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", o.run_id, " has --nnodes ", spec.min_nodes(), ":",
                     spec.max_nodes(), " --nproc-per-node ", spec.nproc_per_node(),
                     o.external_rendezvous() ? " at the service" : " at its host",
                     ", this node ", mine.min_nodes(), ":", mine.max_nodes(), " and ",
                     nproc, ": every node must give the same"));
  }
  return absl::OkStatus();
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
  RETURN_IF_ERROR(CheckRunJob(o, nproc, list->jobs(0)));
  return list->jobs(0).job_id();
}

namespace {

// A call that may succeed when sent again: the service unreachable, failing
// over, or shutting down.
bool Transient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

}  // namespace

absl::StatusOr<std::string> SubmitRunJob(const RunOptions& o, int nproc,
                                         const std::vector<std::string>& argv,
                                         JobsClient* jobs, StopRequest* stop) {
  const v1::JobSpec spec = MultinodeJobSpec(o, nproc, argv);
  const absl::Time deadline = absl::Now() + o.rdzv_conf.join_timeout;
  absl::StatusOr<std::string> id = jobs->Submit(spec, RunPool(o.run_id));
  absl::StatusOr<v1::JobStatus> job = absl::UnavailableError("not asked yet");
  for (;;) {
    if (id.ok()) job = jobs->Get(*id);
    const absl::Status& last = id.ok() ? job.status() : id.status();
    if (last.ok() || !Transient(last) || absl::Now() >= deadline ||
        stop->WaitFor(absl::Milliseconds(100)) != 0) {
      break;
    }
    // The same request id: a Submit whose answer was lost is not a second job.
    if (!id.ok()) id = jobs->Submit(spec, RunPool(o.run_id));
  }
  if (!id.ok() || !job.ok()) {
    const absl::Status& st = id.ok() ? job.status() : id.status();
    return absl::Status(st.code(),
                        absl::StrCat("the rendezvous service at ", o.rdzv_endpoint,
                                     " refused run ", o.run_id, ": ", st.message()));
  }
  RETURN_IF_ERROR(CheckRunJob(o, nproc, *job));
  if (job->state() == v1::JOB_STATE_SUCCEEDED || job->state() == v1::JOB_STATE_FAILED ||
      job->state() == v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", o.run_id, " already ended at the rendezvous service (",
                     absl::AsciiStrToLower(JobStateName(job->state())), ", job ",
                     job->job_id(), "): give each run its own --rdzv-id"));
  }
  return job->job_id();
}

}  // namespace elastrun::launcher
