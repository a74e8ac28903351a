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
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/files.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/attempt.h"
#include "launcher/round/context.h"
#include "launcher/agent/port.h"
#include "launcher/round/failure.h"
#include "rendezvous/core.h"

extern char** environ;

namespace elastrun::launcher {
namespace {

void Say(const std::string& line) {
  std::string s = absl::StrCat("elastrun: ", line, "\n");
  WriteAll(STDERR_FILENO, s);
}

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

// The run's log folder: <log_dir>/<run_id>, or a new temporary folder. An
// existing non-empty folder of an earlier run with the same id is never
// overwritten: "-1", "-2", ... is appended instead.
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

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

int RunStandalone(const RunOptions& o) {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  auto nproc = ResolveNprocPerNode(o.nproc_per_node_text, cpus, CountGpus());
  if (!nproc.ok()) {
    Say(std::string(nproc.status().message()));
    return 2;
  }
  const std::string run_id = o.run_id.empty() ? RandomId() : o.run_id;
  auto run_dir = RunDir(o, run_id);
  if (!run_dir.ok()) {
    Say(std::string(run_dir.status().message()));
    return 2;
  }

  GroupSpec group;
  const char* py = getenv("ELASTRUN_PYTHON");
  group.argv = WorkerArgv(o, py && *py ? py : "python3");
  group.role = o.role;
  group.nproc_per_node = *nproc;
  group.max_restarts = o.max_restarts;
  group.redirects = o.redirects;
  group.tee = o.tee;
  group.local_ranks_filter = o.local_ranks_filter;

  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);

  AgentOptions agent_options;
  agent_options.grace = o.shutdown_timeout;
  agent_options.standby = o.standby;
  auto agent = Agent::Create(agent_options);
  if (!agent.ok()) {
    Say(absl::StrCat("cannot start the agent: ", agent.status().message()));
    return 1;
  }

  rendezvous::RoundConfig rc;
  rc.min_nodes = rc.max_nodes = 1;
  rc.max_restarts = o.max_restarts;
  rendezvous::RendezvousCore core(run_id, rc, absl::Now());
  const std::string node = Hostname();
  std::set<int> used_ports;

  Say(absl::StrCat("run ", run_id, ": ", *nproc, " worker", *nproc > 1 ? "s" : "",
                   ", max restarts ", o.max_restarts, ", logs in ", *run_dir));
  for (;;) {
    rendezvous::JoinRequest join;
    join.node_id = node;
    join.addr = o.master_addr;
    join.local_world_size = *nproc;
    if (o.master_port != 0) {
      join.master_port = o.master_port;
    } else {
      auto port = PickFreePort(used_ports);
      if (!port.ok()) {
        Say(std::string(port.status().message()));
        return 1;
      }
      join.master_port = *port;
      used_ports.insert(*port);
    }
    auto joined = core.Join(join, absl::Now());
    const rendezvous::RoundAssignment* a = core.assignment();
    if (!joined.ok() || a == nullptr) {
      Say(absl::StrCat("internal error: round did not close: ",
                       joined.ok() ? "no assignment" : joined.status().message()));
      return 1;
    }
    const rendezvous::NodeAssignment* me = a->Find(node);
    AttemptContext ctx =
        ContextFor(run_id, *a, *me, absl::StrCat(*run_dir, "/attempt_", a->round));
    for (int local = 0; local < *nproc; ++local) {
      if (auto s = MakeDirs(absl::StrCat(ctx.attempt_dir, "/", local)); !s.ok()) {
        Say(std::string(s.message()));
        return 1;
      }
    }

    AttemptSpec attempt = BuildAttempt(group, ctx, base_env);
    attempt.next_attempt_possible = a->restart_count < o.max_restarts;
    attempt.store_port = ctx.master_port;  // rank 0, and so the store, runs here
    auto outcome = (*agent)->RunAttempt(std::move(attempt));
    if (!outcome.ok()) {
      Say(absl::StrCat("internal error: ", outcome.status().message()));
      return 1;
    }
    if (outcome->leftovers) {
      Say("warning: some processes of the attempt could not be reaped after SIGKILL");
    }
    switch (outcome->kind) {
      case AttemptOutcome::Kind::kSucceeded: {
        const int restarts = a->restart_count;
        (void)core.ReportSuccess(node, ctx.round, absl::Now());
        Say(absl::StrCat("run ", run_id, " succeeded",
                         restarts > 0 ? absl::StrCat(" after ", restarts, " restart(s)")
                                      : ""));
        return 0;
      }
      case AttemptOutcome::Kind::kStopped: {
        const int sig = outcome->stop_signal;
        core.Cancel(absl::StrCat("stopped by signal ", sig), absl::Now());
        Say(absl::StrCat("run ", run_id, " stopped by SIG", sigabbrev_np(sig),
                         "; every worker has exited"));
        return 128 + sig;
      }
      case AttemptOutcome::Kind::kFailed:
        break;
    }
    if (!outcome->spawn_error.ok()) {
      // The core decides (as for elastrund): a program that cannot be
      // started fails the run without a restart.
      rendezvous::Failure failure;
      failure.node_id = node;
      failure.round = ctx.round;
      failure.exit_code = 127;
      failure.cannot_start = true;
      failure.time = absl::Now();
      failure.message = std::string(outcome->spawn_error.message());
      (void)core.ReportFailure(failure, absl::Now());
      Say(failure.message);
      return 127;
    }
    const WorkerExit& f = *outcome->first_failure;
    rendezvous::Failure failure = MakeFailure(node, ctx.round, f, ctx.attempt_dir);
    (void)core.ReportFailure(failure, absl::Now());
    if (core.state() == rendezvous::JobState::kJoining) {
      Say(absl::StrCat("worker rank ", f.rank, " failed with ", DescribeExit(f),
                       "; restarting (", core.restart_count(), " of ", o.max_restarts,
                       ")"));
      continue;
    }
    WriteAll(STDERR_FILENO, FormatFailureSummary(run_id, node, core, *outcome, ctx.attempt_dir));
    return f.ShellCode();
  }
}

}  // namespace elastrun::launcher
