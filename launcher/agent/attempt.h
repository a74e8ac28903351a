// Turning "run this program as group rank G of round R" into the processes of
// an attempt: each worker's argv, torchrun environment, log files and console
// routing. Pure; shared by `elastrun run` and the node daemon.
#ifndef ELASTRUN_LAUNCHER_AGENT_ATTEMPT_H_
#define ELASTRUN_LAUNCHER_AGENT_ATTEMPT_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/output.h"

namespace elastrun::launcher {

// What runs on a node, whatever the round.
struct GroupSpec {
  std::vector<std::string> argv;  // program and arguments, interpreter included
  std::string role = "default";
  int nproc_per_node = 1;
  int max_restarts = 0;
  StdSetting redirects;
  StdSetting tee;
  std::optional<std::set<int>> local_ranks_filter;
  // Unix socket of the local agent service, exported to workers if set.
  std::string agent_socket;
  // The job's snapshot folder on this node (snapshot_dir.h), exported to
  // every worker, standbys included, as ELASTRUN_SNAPSHOT; empty: none (an
  // ELASTRUN_SNAPSHOT inherited from the launcher is dropped then too).
  std::string snapshot_dir;
  // Hang detection (liveness.h).
  HangTimeout hang_timeout = HangTimeout::Derived();
  // A folder put first on the workers' PYTHONPATH: the `elastrun` helper
  // module (FindPythonHelperDir); empty: PYTHONPATH is left as it is.
  std::string python_path;
};

// The folder holding the `elastrun` Python helper next to the running
// binary: <bin>/../share/elastrun/python (the build tree copies it there, as
// an installation does). Empty when it is not there.
std::string FindPythonHelperDir();

// Where this node stands in one round.
struct AttemptContext {
  std::string run_id;
  int64_t round = 0;
  int restart_count = 0;
  std::string master_addr;
  int master_port = 0;
  int world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  // The attempt's log folder: <attempt_dir>/<local_rank>/{stdout,stderr}.log
  // and error.json.
  std::string attempt_dir;
};

// The error file path of a worker of the attempt.
std::string ErrorFilePath(const std::string& attempt_dir, int local_rank);

// torchrun's macro in a worker's arguments: each worker's local rank
// replaces it (torch.distributed.elastic.utils.macros), e.g.
// `--local_rank=${local_rank}` as torch.distributed.launch passes it.
inline constexpr char kLocalRankMacro[] = "${local_rank}";

// `argv` for the worker of local rank `local`: kLocalRankMacro replaced.
std::vector<std::string> WorkerArgvFor(const std::vector<std::string>& argv, int local);

// Whether `argv` names kLocalRankMacro: its workers' argv differ, so no
// standby (started before its rank is known) can run them.
bool HasLocalRankMacro(const std::vector<std::string>& argv);

// Builds the attempt. `base_env` ("NAME=value") is the launcher's own
// environment; contract variables in it are replaced. OMP_NUM_THREADS is set
// to 1 when several workers share the node and the user did not set it.
AttemptSpec BuildAttempt(const GroupSpec& group, const AttemptContext& ctx,
                         const std::vector<std::string>& base_env);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_ATTEMPT_H_
