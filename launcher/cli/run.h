// `elastrun run`: one node, composed in one process from the two pieces the
// multi-node service and daemon reuse — the rendezvous core (rounds, ranks,
// restart accounting, root cause) and the agent (processes).
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "launcher/agent/cgroup.h"
#include "launcher/agent/cgroup_reaper.h"
#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// One line of `elastrun run`'s own to stderr, "elastrun: LINE" (one write:
// lines of several threads do not interleave).
void Say(const std::string& line);

// Removes this user's snapshot folders that nobody holds: those of runs (and
// elastrund jobs) whose launcher is gone, SIGKILLed or with its machine
// (RemoveLeftoverSnapshotDirs, under DefaultSnapshotBase()). Says one line
// per folder removed, naming it and the memory it held, or one warning
// when the folders cannot be looked at or removed; never fails the run.
void RemoveSnapshotsOfDeadRuns();

// --nproc-per-node resolved on this node: CPU cores, and GPUs as
// $CUDA_VISIBLE_DEVICES allows. An error is a usage error.
absl::StatusOr<int> ResolveNproc(const RunOptions& options);

// The run's log folder: <log_dir>/<run_id>, or a new temporary folder. An
// existing non-empty folder of an earlier run with the same id is never
// overwritten: "-1", "-2", ... is appended instead.
absl::StatusOr<std::string> RunDir(const RunOptions& options, const std::string& run_id);

// The run's cgroup (each attempt in a folder of it) and its watchdog, which
// kills it if elastrun itself dies (SIGKILL leaves no time to stop anything).
// Destroyed after the agent: the watchdog's pipe closes, it kills and
// removes what is left, and is waited for.
struct RunCgroup {
  std::unique_ptr<LauncherCgroup> cgroup;  // null: process groups only
  std::unique_ptr<CgroupReaper> reaper;
};

// Where the machine does not allow cgroups, one line says why and the run
// goes on with process groups. Forks the watchdog: call before any thread.
RunCgroup MakeRunCgroup();

// Runs the workers until they succeed, fail past --max-restarts, or the
// launcher is signalled. Returns the process exit code: 0 on success, the
// failing worker's own code (128+signal when killed) otherwise, 128+signal
// when the launcher itself was stopped, 2 for a usage error.
// Prints progress and the root-cause summary to stderr.
int RunStandalone(const RunOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_H_
