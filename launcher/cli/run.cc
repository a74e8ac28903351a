#include "launcher/cli/run.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "common/host.h"
#include "common/worker_env.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/attempt.h"
#include "launcher/agent/cgroup.h"
#include "launcher/agent/cgroup_reaper.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/port.h"
#include "launcher/agent/snapshot_dir.h"
#include "launcher/protocol/context.h"
#include "launcher/protocol/failure.h"
#include "rendezvous/core.h"

extern char** environ;

namespace elastrun::launcher {
namespace {


bool IsEmptyOrMissing(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return errno == ENOENT;
  int entries = 0;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ++entries;
  }
  closedir(d);
  return entries == 0;
}

std::string RandomId() {
  std::random_device rd;
  return absl::StrFormat("%08x%04x", rd(), rd() & 0xffff);
}

int CountGpus() {
  int n = 0;
  for (int i = 0; i < 64; ++i) {
    struct stat st;
    if (stat(absl::StrCat("/dev/nvidia", i).c_str(), &st) == 0) ++n;
  }
  return n;
}

}  // namespace

absl::StatusOr<std::string> RunDir(const RunOptions& o, const std::string& run_id) {
  std::string base = o.log_dir;
  if (base.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/elastrun-XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create a temporary log folder: ", strerror(errno)));
    }
    base = templ;
  }
  std::string dir = absl::StrCat(base, "/", run_id);
  for (int i = 1; !IsEmptyOrMissing(dir); ++i) {
    dir = absl::StrCat(base, "/", run_id, "-", i);
  }
  if (auto s = MakeDirs(dir); !s.ok()) return s;
  return dir;
}

absl::StatusOr<int> ResolveNproc(const RunOptions& o) {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  const int gpus = VisibleGpuCount(
      visible ? std::optional<std::string>(visible) : std::nullopt, CountGpus());
  return ResolveNprocPerNode(o.nproc_per_node_text, cpus, gpus);
}

namespace {

// What every attempt of a run shares, prepared once before the first.
struct RunSetup {
  std::string run_id;
  std::string run_dir;
  int nproc = 0;
  GroupSpec group;
  std::vector<std::string> base_env;
};

// Resolves the worker count, the run id and its log folder, and the group
// every attempt starts. An error is a usage error; its message is what the
// user is told.
absl::StatusOr<RunSetup> PrepareRun(const RunOptions& o) {
  RunSetup setup;
  auto nproc = ResolveNproc(o);
  if (!nproc.ok()) return nproc.status();
  setup.nproc = *nproc;
  setup.run_id = o.run_id.empty() ? RandomId() : o.run_id;
  auto run_dir = RunDir(o, setup.run_id);
  if (!run_dir.ok()) return run_dir.status();
  setup.run_dir = *run_dir;

  const char* py = getenv("ELASTRUN_PYTHON");
  setup.group.argv = WorkerArgv(o, py && *py ? py : "python3");
  setup.group.role = o.role;
  setup.group.nproc_per_node = setup.nproc;
  setup.group.max_restarts = o.max_restarts;
  setup.group.redirects = o.redirects;
  setup.group.tee = o.tee;
  setup.group.local_ranks_filter = o.local_ranks_filter;
  setup.group.hang_timeout = o.hang_timeout;
  setup.group.python_path = FindPythonHelperDir();
  for (char** e = environ; *e != nullptr; ++e) setup.base_env.emplace_back(*e);
  return setup;
}

// One run: the rendezvous core keeps the rounds, restart count and root
// cause, as it does for the service; the agent runs each round's attempt.
// An error from a step below is an internal failure: its message is said
// and the run exits 1.
class StandaloneRun {
 public:
  StandaloneRun(const RunOptions& o, RunSetup setup, Agent* agent)
      : o_(o),
        setup_(std::move(setup)),
        agent_(agent),
        core_(setup_.run_id, CoreConfig(o), absl::Now()) {}

  // Attempts until one decides the run; returns the process exit code.
  int Run() {
    Say(absl::StrCat("run ", setup_.run_id, ": ", setup_.nproc, " worker",
                     setup_.nproc > 1 ? "s" : "", ", max restarts ", o_.max_restarts,
                     ", logs in ", setup_.run_dir,
                     setup_.group.snapshot_dir.empty()
                         ? ""
                         : absl::StrCat(", snapshots in ", setup_.group.snapshot_dir)));
    for (;;) {
      absl::StatusOr<const rendezvous::RoundAssignment*> a = JoinRound();
      if (!a.ok()) return Fail(a.status());
      absl::StatusOr<AttemptContext> ctx = PrepareAttempt(**a);
      if (!ctx.ok()) return Fail(ctx.status());
      absl::StatusOr<AttemptOutcome> outcome = RunAttempt(**a, *ctx);
      if (!outcome.ok()) return Fail(outcome.status());
      if (std::optional<int> exit_code = Settle(**a, *ctx, *outcome)) return *exit_code;
    }
  }

 private:
  static rendezvous::RoundConfig CoreConfig(const RunOptions& o) {
    rendezvous::RoundConfig rc;
    rc.min_nodes = rc.max_nodes = 1;
    rc.max_restarts = o.max_restarts;
    return rc;
  }

  static int Fail(const absl::Status& s) {
    Say(std::string(s.message()));
    return 1;
  }

  // Joins the next round as its only node. Unless --master-port pins it,
  // each round gets a master port no earlier round used: an earlier store's
  // socket may linger (see PickFreePort).
  absl::StatusOr<const rendezvous::RoundAssignment*> JoinRound() {
    rendezvous::JoinRequest join;
    join.node_id = node_;
    join.addr = o_.master_addr;
    join.local_world_size = setup_.nproc;
    if (o_.master_port != 0) {
      join.master_port = o_.master_port;
    } else {
      auto port = PickFreePort(used_ports_);
      if (!port.ok()) return port.status();
      join.master_port = *port;
      used_ports_.insert(*port);
    }
    auto joined = core_.Join(join, absl::Now());
    const rendezvous::RoundAssignment* a = core_.assignment();
    if (!joined.ok() || a == nullptr) {
      return absl::InternalError(
          absl::StrCat("internal error: round did not close: ",
                       joined.ok() ? "no assignment" : joined.status().message()));
    }
    return a;
  }

  // The round's context for this node, with a log folder per local rank.
  absl::StatusOr<AttemptContext> PrepareAttempt(const rendezvous::RoundAssignment& a) {
    const rendezvous::NodeAssignment* me = a.Find(node_);
    AttemptContext ctx = ContextFor(setup_.run_id, a, *me,
                                    absl::StrCat(setup_.run_dir, "/attempt_", a.round));
    for (int local = 0; local < setup_.nproc; ++local) {
      if (auto s = MakeDirs(absl::StrCat(ctx.attempt_dir, "/", local)); !s.ok()) return s;
    }
    return ctx;
  }

  // Starts the round's workers and waits until the attempt ends.
  absl::StatusOr<AttemptOutcome> RunAttempt(const rendezvous::RoundAssignment& a,
                                            const AttemptContext& ctx) {
    AttemptSpec attempt = BuildAttempt(setup_.group, ctx, setup_.base_env);
    attempt.next_attempt_possible = a.restart_count < o_.max_restarts;
    attempt.store_port = ctx.master_port;  // rank 0, and so the store, runs here
    auto outcome = agent_->RunAttempt(std::move(attempt));
    if (!outcome.ok()) {
      return absl::InternalError(
          absl::StrCat("internal error: ", outcome.status().message()));
    }
    if (!outcome->unreaped.empty()) {
      Say(absl::StrCat("warning: ", DescribeUnreaped(outcome->unreaped)));
    } else if (outcome->leftovers) {
      Say("warning: some processes of the attempt could not be reaped after SIGKILL");
    }
    return outcome;
  }

  // What the attempt's end means for the run: its exit code, or nullopt when
  // the core opened a new round (a restart).
  std::optional<int> Settle(const rendezvous::RoundAssignment& a,
                            const AttemptContext& ctx, const AttemptOutcome& outcome) {
    switch (outcome.kind) {
      case AttemptOutcome::Kind::kSucceeded: {
        const int restarts = a.restart_count;
        (void)core_.ReportSuccess(node_, ctx.round, absl::Now());
        Say(absl::StrCat(
            "run ", setup_.run_id, " succeeded",
            restarts > 0 ? absl::StrCat(" after ", restarts, " restart(s)") : ""));
        return 0;
      }
      case AttemptOutcome::Kind::kStopped: {
        const int sig = outcome.stop_signal;
        core_.Cancel(absl::StrCat("stopped by signal ", sig), absl::Now());
        Say(absl::StrCat("run ", setup_.run_id, " stopped by SIG", sigabbrev_np(sig),
                         "; every worker has exited"));
        return 128 + sig;
      }
      case AttemptOutcome::Kind::kFailed:
        break;
    }
    if (!outcome.spawn_error.ok()) return CannotStart(ctx, outcome.spawn_error);
    return SettleFailure(ctx, outcome);
  }

  // The core decides (as for elastrund): a program that cannot be started
  // fails the run without a restart.
  int CannotStart(const AttemptContext& ctx, const absl::Status& spawn_error) {
    const rendezvous::Failure failure = NotStartedFailure(
        node_, ctx.round, std::string(spawn_error.message()), /*cannot_start=*/true);
    (void)core_.ReportFailure(failure, absl::Now());
    Say(failure.message);
    return 127;
  }

  // A worker failed: a restart while the core has restarts left, else the
  // root-cause summary and the failing worker's own exit code.
  std::optional<int> SettleFailure(const AttemptContext& ctx,
                                   const AttemptOutcome& outcome) {
    const WorkerExit& f = *outcome.first_failure;
    rendezvous::Failure failure = MakeFailure(node_, ctx.round, f, ctx.attempt_dir);
    (void)core_.ReportFailure(failure, absl::Now());
    if (core_.state() == rendezvous::JobState::kJoining) {
      Say(absl::StrCat(
          f.hung ? DescribeHang(f.rank, f.hung_step, f.hung_for)
                 : absl::StrCat("worker rank ", f.rank, " failed with ", DescribeExit(f)),
          "; restarting (", core_.restart_count(), " of ", o_.max_restarts, ")"));
      return std::nullopt;
    }
    WriteAll(STDERR_FILENO,
             FormatFailureSummary(setup_.run_id, node_, core_, outcome, ctx.attempt_dir));
    return f.ShellCode();
  }

  const RunOptions& o_;
  const RunSetup setup_;
  Agent* const agent_;
  rendezvous::RendezvousCore core_;
  const std::string node_ = Hostname();
  // Master ports of earlier rounds.
  std::set<int> used_ports_;
};

// The run's snapshot folder, named by its id and held for the run's life,
// which keeps another run with the same id out of it, and cleaners too;
// null (after a warning saying why) when it cannot be had: snapshots are an
// optimisation, not a reason to refuse a run.
std::unique_ptr<HeldSnapshotDir> MakeSnapshotDir(const RunOptions& o,
                                                 const std::string& run_id) {
  if (o.no_snapshots) return nullptr;
  absl::StatusOr<std::unique_ptr<HeldSnapshotDir>> dir =
      HeldSnapshotDir::Create(DefaultSnapshotBase(), SnapshotFolderName(run_id));
  if (!dir.ok()) {
    Say(absl::StrCat("warning: workers run without ", env::kSnapshot,
                     " (no in-memory snapshots): ", dir.status().message()));
    return nullptr;
  }
  return *std::move(dir);
}

}  // namespace

RunCgroup MakeRunCgroup() {
  RunCgroup run;
  // Leftovers of dead runs are their watchdogs' to kill.
  auto made = LauncherCgroup::Create("run", /*kill_leftovers=*/false);
  if (!made.ok()) {
    Say(absl::StrCat("cgroups not used (workers are stopped by process group only): ",
                     made.status().message()));
    return run;
  }
  run.cgroup = *std::move(made);
  auto reaper = CgroupReaper::Start(run.cgroup->dir());
  if (!reaper.ok()) {
    Say(absl::StrCat("warning: no watchdog kills the workers if elastrun is killed: ",
                     reaper.status().message()));
  } else {
    run.reaper = *std::move(reaper);
  }
  return run;
}

void Say(const std::string& line) {
  std::string s = absl::StrCat("elastrun: ", line, "\n");
  WriteAll(STDERR_FILENO, s);
}

void RemoveSnapshotsOfDeadRuns() {
  const std::string base = DefaultSnapshotBase();
  absl::StatusOr<std::vector<RemovedSnapshotDir>> removed =
      RemoveLeftoverSnapshotDirs(base, [](absl::string_view) { return true; });
  if (!removed.ok()) {
    Say(absl::StrCat("warning: snapshot folders of runs that are gone are left in ",
                     SnapshotUserRoot(base), ": ", removed.status().message()));
    return;
  }
  for (const RemovedSnapshotDir& dir : *removed) {
    Say(absl::StrFormat("removed the snapshot folder of a run that is gone: %s (%.1f MB)",
                        dir.path, static_cast<double>(dir.bytes) / 1e6));
  }
}

int RunStandalone(const RunOptions& o) {
  absl::StatusOr<RunSetup> setup = PrepareRun(o);
  if (!setup.ok()) {
    Say(std::string(setup.status().message()));
    return 2;
  }
  // Every attempt, restarts and standbys included, shares the folder; it
  // goes when the run ends, however it ends (a stop signal ends the run
  // through the agent, so this runs then too).
  const std::unique_ptr<HeldSnapshotDir> snapshots = MakeSnapshotDir(o, setup->run_id);
  if (snapshots != nullptr) setup->group.snapshot_dir = snapshots->path();
  absl::Cleanup remove_snapshots = [&snapshots] {
    if (snapshots == nullptr) return;
    if (absl::Status st = snapshots->Remove(); !st.ok()) {
      Say(absl::StrCat("warning: ", st.message()));
    }
  };
  // After taking its own: a restart of a dead run with the same id adopts
  // that run's folder rather than removing it.
  RemoveSnapshotsOfDeadRuns();
  const RunCgroup cgroup = MakeRunCgroup();
  AgentOptions agent_options;
  agent_options.grace = o.shutdown_timeout;
  // Workers report progress (and so liveness) on a socket in the run's
  // folder; the secret each one gets, not the folder, keeps others out.
  agent_options.progress_socket = absl::StrCat(setup->run_dir, "/agent.sock");
  setup->group.agent_socket = agent_options.progress_socket;
  agent_options.standby = o.standby;
  if (cgroup.cgroup != nullptr) agent_options.cgroup = cgroup.cgroup->dir();
  auto agent = Agent::Create(agent_options);
  if (!agent.ok() && !agent_options.progress_socket.empty()) {
    // A log folder where no socket can be made (a path too long for one,
    // some network file systems) costs the progress reports, not the run.
    Say(absl::StrCat("warning: no progress reports (hangs are seen from /proc only): ",
                     agent.status().message()));
    agent_options.progress_socket.clear();
    setup->group.agent_socket.clear();
    agent = Agent::Create(agent_options);
  }
  if (!agent.ok()) {
    Say(absl::StrCat("cannot start the agent: ", agent.status().message()));
    return 1;
  }
  const int exit_code = StandaloneRun(o, *std::move(setup), agent->get()).Run();
  agent->reset();  // its standbys are gone before their folder
  return exit_code;
}

}  // namespace elastrun::launcher
