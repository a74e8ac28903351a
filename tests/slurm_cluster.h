// A real Slurm for tests, on this machine: munged with its own key and
// socket, slurmctld, and one slurmd per network namespace (nodes n0, n1,
// ... joined by veth pairs to a bridge that holds slurmctld's address), all
// children of the test, with a slurm.conf, state, spool and logs in a temp
// folder. Slurm's commands find it through SLURM_CONF (Command() sets it).
//
// Needs Debian's slurm-wlm and munge, root and CAP_NET_ADMIN; Start() says
// which part could not start, so the caller can skip. Not thread-safe: one
// test thread drives it.
#ifndef ELASTRUN_TESTS_SLURM_CLUSTER_H_
#define ELASTRUN_TESTS_SLURM_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace elastrun::testing {

class SlurmCluster {
 public:
  // Starts munged, slurmctld and `nodes` slurmds under `dir` (an empty temp
  // folder) and waits until every node is idle. The daemons' environment
  // gets `daemon_env` ("NAME=value"). FailedPrecondition names what is
  // missing or what did not start (with its log); nothing is left running.
  static absl::StatusOr<std::unique_ptr<SlurmCluster>> Start(
      const std::string& dir, int nodes, const std::vector<std::string>& daemon_env);
  // Kills the daemons and whatever their jobs left (by the daemons' and
  // `job_env_marker`'s environment entries), then removes the namespaces.
  ~SlurmCluster();

  // Kills, at the end, the processes whose environment holds `entry` (the
  // jobs' marker: what the batch scripts started).
  void set_job_marker(const std::string& entry) { job_marker_ = entry; }
  const std::string& conf() const { return conf_; }
  // Each node's network interface (its address's), the same name on all.
  static constexpr char kInterface[] = "eth0";
  // Node i's Slurm name and address.
  static std::string NodeName(int i);
  std::string NodeAddr(int i) const;

  // Runs a Slurm command (sbatch, scontrol, squeue...) against this cluster
  // with `env` added to the test's environment.
  RunResult Command(std::vector<std::string> argv, std::vector<std::string> env = {}) const;
  // `scontrol show job`'s JobState of `job` ("" when unknown), and its
  // Restarts count (-1 when unknown).
  std::string JobState(const std::string& job) const;
  int JobRestarts(const std::string& job) const;
  // Waits (polling: Slurm has no events to wait on) until `job` left
  // PENDING, RUNNING, CONFIGURING, COMPLETING and REQUEUED; returns its end
  // state, or "" past `timeout`.
  std::string WaitFinished(const std::string& job, absl::Duration timeout) const;
  // The tails of the daemons' logs, for failure messages.
  std::string DaemonLogs() const;

 private:
  SlurmCluster(std::string dir, int nodes) : dir_(std::move(dir)), nodes_(nodes) {}
  absl::Status SetUpNetwork();
  absl::Status WriteConfig();
  absl::Status StartDaemons(const std::vector<std::string>& daemon_env);

  std::string dir_, conf_, id_, subnet_, bridge_, job_marker_, daemon_marker_;
  int nodes_;
  bool made_bridge_ = false;
  std::vector<std::string> namespaces_;
  std::unique_ptr<Subprocess> munged_, slurmctld_;
  std::vector<std::unique_ptr<Subprocess>> slurmds_;
};

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_SLURM_CLUSTER_H_
