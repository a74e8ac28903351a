// The standby pool: the next attempt's workers, started ahead of time
// (common/standby.h), so that a restart only activates them. One set at a
// time, in one process group of its own, for one program and environment: an
// attempt of another program (a node may run another job next) discards it.
//
// Not thread-safe: used on the agent's loop thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_STANDBY_POOL_H_
#define ELASTRUN_LAUNCHER_AGENT_STANDBY_POOL_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/agent/process.h"

namespace elastrun::launcher {

// A pre-started worker, waiting for its activation.
struct StandbyWorker {
  pid_t pid = -1;
  int control = -1;  // our end of its standby socket
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// A whole set, handed to the attempt that activates it (which owns the
// descriptors and reaps the processes from then on).
struct StandbySet {
  pid_t pgid = 0;
  // The set's cgroup folder (cgroup.h); empty: none.
  std::string cgroup;
  std::vector<StandbyWorker> workers;
};

// A socket pair for the standby protocol: {ours, the worker's}.
bool StandbySocket(int fds[2]);

class StandbyPool {
 public:
  // `cgroup`: the launcher's cgroup folder, under which each set gets a
  // standby-<n> folder of its own; empty: process groups only.
  explicit StandbyPool(ProcessControl* processes, std::string cgroup = "")
      : processes_(processes), cgroup_(std::move(cgroup)) {}
  // Discards the set.
  ~StandbyPool();
  StandbyPool(const StandbyPool&) = delete;
  StandbyPool& operator=(const StandbyPool&) = delete;

  // Starts `n` standbys running `argv` with `env` (at a lower priority, where
  // it can be raised again, so their start-up yields to the running
  // attempt), in folder `cwd` (empty: the launcher's) as user `run_as`
  // (unset: the launcher's). Only when the pool is empty; on any spawn
  // failure none is kept.
  void Fill(const std::vector<std::string>& argv, const std::vector<std::string>& env,
            size_t n, const std::string& cwd = "",
            const std::optional<ProcessCredentials>& run_as = std::nullopt);

  // Hands over the set if it runs `argv` with `env` and has `n` workers, in
  // `cwd` as `run_as`: a set of another user is never handed to a job.
  std::optional<StandbySet> Take(
      const std::vector<std::string>& argv, const std::vector<std::string>& env, size_t n,
      const std::string& cwd = "",
      const std::optional<ProcessCredentials>& run_as = std::nullopt);

  // Reaps standbys that died (call on SIGCHLD): a set with a dead member is
  // useless, and is discarded.
  void ReapDead();

  // Ends the set: closes its sockets (which tells a standby to exit),
  // SIGKILLs its group and reaps it.
  void Discard();

  bool empty() const { return set_.workers.empty(); }
  // Whether `pid` is a standby of the set.
  bool Owns(pid_t pid) const;

  // The set waiting (for tests and logs).
  const StandbySet& set() const { return set_; }

 private:
  // Creates the set's cgroup; -1 (and none) when it cannot be had.
  int MakeSetCgroup();

  ProcessControl* const processes_;
  const std::string cgroup_;
  int sets_made_ = 0;  // numbers the sets' cgroups
  StandbySet set_;
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  std::string cwd_;
  std::optional<ProcessCredentials> run_as_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_STANDBY_POOL_H_
