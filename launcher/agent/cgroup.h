// Control groups (cgroup v2) for the launcher's processes: each attempt in a
// folder of its own, so that stopping it kills everything its workers
// started (grandchildren that left the process group, a DataLoader's
// workers), and what a launcher that died left behind can be found and
// killed by the next one.
//
// Layout: <this process's cgroup>/elastrun-<name>@<pid>/{attempt-<n>,
// standby-<n>}, with <name> "run" for `elastrun run` and "node-<node id>"
// for a daemon, and <pid> the launcher's: two live launchers of one name
// (two daemons of one node id serving two services, as tests do) never
// touch each other's folders, and a folder whose launcher is dead is known
// to be left over. Where cgroup v2 is missing or not writable (cgroup v1 only, not
// root and no delegation) the launcher falls back to process groups:
// LauncherCgroup::Create says why.
//
// Free functions; LauncherCgroup is not thread-safe (one owner).
#ifndef ELASTRUN_LAUNCHER_AGENT_CGROUP_H_
#define ELASTRUN_LAUNCHER_AGENT_CGROUP_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace elastrun::launcher {

// Where FindOwnCgroup looks; tests pass files of their own.
struct CgroupSources {
  // The mount table: the cgroup2 mount is the line of fstype "cgroup2".
  std::string mountinfo = "/proc/self/mountinfo";
  // This process's cgroups: the "0::<path>" line is its cgroup v2.
  std::string self_cgroup = "/proc/self/cgroup";
};

// This process's cgroup v2 folder: the cgroup2 mount point joined with the
// "0::" path. Errors (FailedPrecondition) say why there is none: no cgroup2
// mount, no "0::" line, or a path outside the mount.
absl::StatusOr<std::string> FindOwnCgroup(const CgroupSources& sources = {});

// The pids in cgroup folder `dir` and every folder below it; empty when
// `dir` is missing.
std::vector<pid_t> CgroupProcesses(const std::string& dir);

// Opens dir/cgroup.procs for writing, close-on-exec. A forked child writes
// "0" to it before exec to enter the cgroup (async-signal-safe, so it works
// in a child of a multithreaded launcher); the caller closes it.
absl::StatusOr<int> OpenCgroupProcs(const std::string& dir);

// Creates cgroup folder `dir` (its parent must exist). Error when it
// cannot be created, or exists already.
absl::Status MakeCgroup(const std::string& dir);

// Moves every process of `from` (and below) into `to`, again until none is
// left (a process may fork while it moves). Error when one cannot be moved.
absl::Status MoveCgroupProcesses(const std::string& from, const std::string& to);

struct KillOptions {
  // How long the processes may take to die before the kill is given up.
  absl::Duration timeout = absl::Seconds(10);
  // Use cgroup.kill where the kernel has it (5.14+). false: the fallback of
  // older kernels, also where cgroup.kill exists (for tests): freeze, SIGKILL
  // every pid, thaw, until empty.
  bool use_kill_file = true;
};

// Kills every process in cgroup `dir` and below, waits until the cgroup is
// empty, and removes the folders, deepest first. Returns how many processes
// were found there (0 when `dir` is missing: nothing to do). Errors: still
// populated at the deadline (DeadlineExceeded, naming a pid), or a folder
// that cannot be removed.
absl::StatusOr<int> KillCgroup(const std::string& dir, KillOptions options = {});

// A launcher's own folder, <own cgroup>/elastrun-<name>@<pid>. Destroying
// it kills what is left in it and removes it.
class LauncherCgroup {
 public:
  // Finds this process's cgroup v2; with `kill_leftovers`, kills and removes
  // the folders of earlier launchers of the same `name` that are dead (their
  // pid gone, or now another program: see leftovers()); creates the folder,
  // and proves a process can be moved into it. An error says, in words
  // meant for a log line, why cgroups cannot be used here; the caller then
  // falls back to process groups.
  static absl::StatusOr<std::unique_ptr<LauncherCgroup>> Create(
      const std::string& name, bool kill_leftovers, const CgroupSources& sources = {});
  ~LauncherCgroup();
  LauncherCgroup(const LauncherCgroup&) = delete;
  LauncherCgroup& operator=(const LauncherCgroup&) = delete;

  // The folder.
  const std::string& dir() const { return dir_; }
  // How many processes dead launchers of this name left, killed by Create;
  // -1 when they left no folder (or leftovers were not looked for).
  int leftovers() const { return leftovers_; }

 private:
  LauncherCgroup(std::string dir, int leftovers) : dir_(std::move(dir)), leftovers_(leftovers) {}

  const std::string dir_;
  const int leftovers_;
};

// `text` with every character that is not a letter, digit, '.', '-' or '_'
// replaced by '_' (a node id in a folder name).
std::string CgroupNamePart(const std::string& text);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_CGROUP_H_
