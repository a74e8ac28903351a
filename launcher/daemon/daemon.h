// The node daemon's logic (elastrund): turns the rendezvous service's Watch
// commands into attempts of worker groups on this node and reports how they
// end. Free of gRPC and of processes: RPCs go through RendezvousClient
// (client.h) and attempts through AttemptRunner (runner.h), so
// tests drive it with fakes. The connection (register, heartbeat, Watch,
// reconnect) lives in DaemonSession (session.h).
//
// Several jobs at once, one attempt per job, within the node's slots: the
// nproc of the attempts that run here never adds up to more than
// DaemonOptions::slots. Commands are idempotent and keyed by (job, round),
// and a command for one job never touches another job's attempt:
//   JoinRound{job, g}   reserve a MASTER_PORT and the job's slots, call
//                       JoinRound (stopping an older attempt of the job
//                       still running, if any). Refused (not joined, so the
//                       service's round does not wait on this node) when the
//                       slots that other jobs hold leave too few.
//   StartAttempt{job,a} run attempt (job, a.round) unless it runs or ran
//                       already; if an older attempt of the job still runs,
//                       it is stopped and this one starts when it has ended,
//                       as it does when other jobs' attempts that are being
//                       stopped still hold the slots it needs. One that does
//                       not fit beside the other jobs' live attempts is
//                       refused and reported as a failure of its round.
//   StopAttempt{job, g} stop attempt (job, g) if it runs: SIGTERM, grace,
//                       SIGKILL (the agent's job); its end is not reported.
//   EndJob{job}         stop anything of the job and drop its unsent
//                       reports (a later JoinRound may bring the node back).
// Each job has one snapshot folder on this node (job_snapshots.h), made
// when its first attempt here starts and given to every attempt after it;
// it goes once the job ended here (EndJob, or Shutdown) and no attempt of
// it runs any more.
// When an attempt ends on its own it is reported once: the first worker
// failure (exit code or signal, plus the worker's error file), or success
// when every worker exited 0. Reports the service could not take (it is
// away) are kept and re-sent by SendReports after the next registration
// (ExitReports, exit_reports.h: its own queue and lock).
//
// Service calls never run on the caller's thread: JoinRound goes on its
// job's lane (lanes.h), ReportExit on the reports lane, so that a slow or
// unreachable service holds up neither the Watch stream's commands of other
// jobs nor the ends of other attempts.
//
// Thread-safety: every public method is thread-safe. No RPC, runner call or
// callback runs while mu_ is held.
#ifndef ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_
#define ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_

#include <csignal>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/progress.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "launcher/agent/agent.h"
#include "launcher/daemon/attempt_start.h"
#include "launcher/daemon/client.h"
#include "launcher/daemon/exit_reports.h"
#include "launcher/daemon/job_snapshots.h"
#include "launcher/daemon/lanes.h"
#include "launcher/daemon/metrics.h"

namespace elastrun::launcher {

// Runs attempts asynchronously, several at once, each in its own process
// groups. Implementations are thread-safe.
class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // Starts attempt `id` (> 0, never reused) running `spec`, beside any
  // other active attempts. `done` runs exactly once, on a runner thread,
  // when the attempt ended.
  virtual void Start(uint64_t id, AttemptSpec spec,
                     std::function<void(const AttemptOutcome&)> done) = 0;
  // Asks attempt `id` to stop with `sig` (the agent then waits its grace
  // and SIGKILLs); other attempts go on. No-op unless `id` is active.
  virtual void Stop(uint64_t id, int sig) = 0;
};

struct DaemonOptions {
  // This node's id, as registered.
  std::string node_id;
  // Logs go to <log_dir>/<job>/attempt_<round>/<local_rank>/.
  std::string log_dir = "/tmp/elastrund";
  // The environment workers start from ("NAME=value"), usually the daemon's.
  std::vector<std::string> base_env;
  // Working directory of workers when the job gives none; empty: the
  // daemon's own.
  std::string working_dir;
  // The agent's progress socket, exported to workers as
  // ELASTRUN_AGENT_SOCKET; empty: none.
  std::string agent_socket;
  // Where the jobs' snapshot folders go (SnapshotBase()); empty: none, and
  // workers get no ELASTRUN_SNAPSHOT.
  std::string snapshot_base;
  // Worker slots this node offers (--slots, as registered): the nproc of
  // the attempts running at once never adds up to more.
  int slots = 1;
  // How many jobs the record of attempts that ran remembers (the newest
  // round of each; the oldest job is forgotten first): bounded memory on a
  // node that runs jobs for months. A job that runs is never forgotten in
  // effect: its own state refuses older rounds.
  size_t ran_jobs_kept = 4096;
  // The group rank this node asks for in every round it joins (`elastrun
  // run --rdzv-backend static --node-rank`); -1: any.
  int group_rank = -1;
  // Called (outside any lock) just before an attempt is handed to the
  // runner, e.g. to abort barriers of the job's older rounds. May be empty.
  std::function<void(const std::string& job_id, int64_t round)> on_attempt_start;
  // Called once a job ended here and its last attempt ended, its output
  // delivered to on_output_line. May be empty.
  std::function<void(const std::string& job_id)> on_job_done;
  // Called on the agent's thread with every output line of an attempt,
  // tagged with the attempt's job and round (e.g. to forward it); must not
  // block for long. May be empty.
  std::function<void(const std::string& job_id, int64_t round, const OutputLine& line)>
      on_output_line;
  // Called by OnProgress (outside any lock) with a report routed to the
  // attempt it belongs to. May be empty.
  std::function<void(const std::string& job_id, int64_t round, const ProgressReport& report)>
      on_progress;
  // Called by OnBarrier (outside any lock) with an arrival routed to the
  // attempt it belongs to; `reply` answers the worker. Empty: every barrier
  // fails.
  std::function<void(const std::string& job_id, int64_t round, const BarrierArrival& arrival,
                     std::function<void(const absl::Status&)> reply)>
      on_barrier;
  // Called (outside any lock) before exit reports are sent, e.g. to flush
  // forwarded worker output first, so that once the service knows a job
  // ended it also holds the job's last lines.
  std::function<void()> before_reports;
  // Attempts, exits, restart latency and running workers are counted here
  // (not owned; must outlive the Daemon). May be null: no metrics.
  DaemonMetrics* metrics = nullptr;
  // Times the restart latency metric. Not owned.
  Clock* clock = &RealClock();
};

class Daemon {
 public:
  // `client` and `runner` are not owned and must outlive the Daemon.
  Daemon(DaemonOptions options, RendezvousClient* client, AttemptRunner* runner);

  // Handles one Watch command (see the file comment): starts or stops an
  // attempt, and queues the JoinRound call on the job's lane; returns
  // without waiting for the service or for an attempt's end.
  void OnCommand(const v1::Command& command);

  // Attempts this node runs now, every job's, for RegisterNode: the service
  // re-sends what is still wanted and stops what is not. Also, marked
  // `ended`, the rounds this node still holds without running them: one
  // that waits for slots, and one that ended with its ReportExit still
  // queued; a restarted service must not take the node as lost for them.
  std::vector<v1::RunningAttempt> Running() const;
  // How many jobs the record of attempts that ran holds (for tests).
  size_t RanJobsRecorded() const;

  // Releases the slots held by JoinRounds not yet followed by their
  // StartAttempt. Called before (re-)registering: the service then re-sends
  // the joins it still wants, and an EndJob lost while it was away would
  // otherwise hold them for good.
  void ForgetJoins();

  // Routes a worker's progress report to its attempt: the one of
  // report.job_id, or, for a report without a job (an older worker), the
  // only attempt running. A report that fits no attempt here is dropped.
  void OnProgress(const ProgressReport& report);

  // Routes a worker's barrier arrival like OnProgress; one that fits no
  // attempt here is answered FailedPrecondition at once.
  void OnBarrier(const BarrierArrival& arrival, std::function<void(const absl::Status&)> reply);

  // Sends the reports kept while the service was away, in order, on the
  // reports lane; returns at once. A report refused for good (stale round,
  // finished job) is dropped; one that fails with UNAVAILABLE or a deadline
  // is kept for the next call.
  void SendReports();

  // Waits until no service call of the Daemon's is queued or in flight, at
  // most `timeout`; returns whether none is (for tests).
  bool WaitCallsDone(absl::Duration timeout);

  // Stops every running attempt with `sig`, and starts no other one.
  // Their ends are not reported: the service learns of the node's loss from its
  // Watch stream. Returns at once; see WaitIdle.
  void Shutdown(int sig);

  // Waits until no attempt of any job runs or waits to start, and no
  // attempt's end is still being handled, at most `timeout`; returns
  // whether idle.
  bool WaitIdle(absl::Duration timeout);

  // How many reports wait to be sent (for tests and logs).
  size_t pending_reports() const;

 private:
  // An attempt the runner runs (or is about to run).
  struct Attempt {
    // Its id with the runner (AttemptRunner::Start): unique in this Daemon.
    // Not its round (the service's number of the job's attempt, in folder
    // names and ELASTRUN_ROUND), nor the agent's own id of it.
    uint64_t runner_id = 0;
    std::string job_id;
    int64_t round = 0;
    int nproc = 0;  // slots it takes
    std::string attempt_dir;
    bool stop_requested = false;  // by a command or Shutdown: no report
    // Handed to the runner yet. A stop requested before (between Launch and
    // runner_->Start) is sent by StartOnRunner, which the runner would
    // otherwise drop as a stop of an attempt it does not know.
    bool on_runner = false;
    int stop_signal = SIGTERM;
  };
  // What this node does for one job (not rendezvous::JobState, the job's
  // state at the service).
  struct JobHere {
    std::optional<Attempt> current;
    // A StartAttempt waiting for `current` to end, or for slots that other
    // jobs' attempts being stopped still take.
    std::optional<v1::StartAttempt> next;
    // Whom `next`'s workers run as, looked up when it came: never under
    // mu_, since a user lookup may wait on the network (NSS: LDAP, sssd).
    absl::StatusOr<WorkerUser> next_user = absl::UnknownError("no attempt queued");
    // Slots held by a JoinRound until its StartAttempt (0: none), and its round.
    int joined_nproc = 0;
    int64_t joined_round = -1;
  };
  // An attempt built and made current, to hand to the runner.
  struct Launched {
    uint64_t runner_id = 0;
    std::string job_id;
    int64_t round = 0;
    AttemptSpec spec;
  };

  void HandleJoin(const v1::JoinRoundCommand& join);
  // JoinRound `r` (a short retry while the service is briefly away), on
  // the job's lane; a join that fails for good frees its slots.
  void CallJoinRound(const v1::JoinRoundRequest& r);
  void HandleStart(const v1::StartAttempt& start);
  void HandleStop(const std::string& job_id, std::optional<int64_t> round);
  // Builds attempt `start`, its workers run as `user` (ResolveWorkerUser,
  // looked up outside mu_), and makes it the job's current one; nullopt
  // when the user or its log folders cannot be had (then a failure report
  // is queued instead).
  std::optional<Launched> Launch(const v1::StartAttempt& start,
                                 const absl::StatusOr<WorkerUser>& user)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Launches the queued StartAttempts that fit now.
  std::vector<Launched> LaunchQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartOnRunner(std::vector<Launched> launches);
  void OnAttemptEnded(uint64_t id, const AttemptOutcome& outcome);
  void QueueEndReport(const Attempt& a, const AttemptOutcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots that jobs other than `except` hold. `live_only`: leave out
  // attempts being stopped (they free theirs soon), count joins and queued
  // starts; otherwise: only the attempts whose processes exist now.
  int SlotsOfOthersLocked(const std::string& except, bool live_only) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "job a (2 slots), job b (1 slot)": who holds the slots, for errors.
  std::string HoldersLocked(const std::string& except) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attempt a worker's datagram of `job_id` belongs to, if it runs here.
  std::optional<std::pair<std::string, int64_t>> RouteLocked(const std::string& job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job's entry once nothing of it is left.
  void MaybeForgetLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once the job ended here and nothing of it runs or waits to start:
  // removes its snapshot folder and queues it for on_job_done.
  void MaybeFinishEndingLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DaemonOptions options_;
  RendezvousClient* const client_;
  AttemptRunner* const runner_;
  // What options_ gives every attempt (attempt_start.h).
  const NodeSettings node_;

  mutable absl::Mutex mu_;
  std::map<std::string, JobHere> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_runner_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Attempts that ran: a re-sent StartAttempt never runs one twice. The
  // newest round that ran per job (by JobKeyLocked; rounds only grow), the
  // jobs in the order they first ran, at most options_.ran_jobs_kept.
  std::map<std::string, int64_t> ran_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ran_order_ ABSL_GUARDED_BY(mu_);
  // The service's cluster (Welcome): job ids are unique within it only.
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);
  // "<job>@<cluster>": the job among every cluster's (the job id alone when
  // the service names no cluster).
  std::string JobKeyLocked(const std::string& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether round `round` of the job keyed `key` ran here.
  bool RanLocked(const std::string& key, int64_t round) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkRanLocked(const std::string& job, int64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MASTER_PORTs offered lately: their sockets may linger, so skip them.
  std::deque<int> recent_ports_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  JobSnapshots snapshots_ ABSL_GUARDED_BY(mu_);
  // Jobs that ended here, whose folder goes when their attempt has ended.
  std::set<std::string> ending_ ABSL_GUARDED_BY(mu_);
  // OnAttemptEnded calls still working after their attempt was dropped
  // (hooks, starts): the Daemon is not idle until they are done.
  int ending_calls_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs done here, for on_job_done (CallJobsDone, outside mu_).
  std::vector<std::string> jobs_done_ ABSL_GUARDED_BY(mu_);
  void CallJobsDone();
  // When each job's workers last failed here, until its next attempt
  // starts (the restart latency metric).
  std::map<std::string, absl::Time> failed_at_ ABSL_GUARDED_BY(mu_);
  // The ends of attempts, to be reported (added under mu_; their own lock
  // inside it), sent on lanes_.
  ExitReports reports_;
  // The service calls, off the callers' threads. Last: destroyed first, so
  // its queued calls finish while the rest of the Daemon is still there.
  Lanes lanes_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_DAEMON_H_
