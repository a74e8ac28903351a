// The start of one attempt of a job on this node, in one place (the Daemon
// keeps only its books): who its workers run as, from the job spec's owner
// (set by the service from the submitter's verified identity): a root
// elastrund runs them as the owner, as Slurm does, never as root for
// another user; a non-root elastrund runs only its own user's jobs. And
// what follows from it: the working folder, the attempt's log folders (the
// workers' own per-rank folder, where they write their error file), the
// environment they start from, and the AttemptSpec the runner runs.
//
// Thread-compatible: plain functions.
#ifndef ELASTRUN_LAUNCHER_DAEMON_ATTEMPT_START_H_
#define ELASTRUN_LAUNCHER_DAEMON_ATTEMPT_START_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "elastrun/v1/types.pb.h"
#include "launcher/agent/attempt_spec.h"
#include "launcher/agent/process.h"

namespace elastrun::launcher {

struct WorkerUser {
  // Set when the workers run as another user than the daemon's.
  std::optional<ProcessCredentials> run_as;
  // The workers' user and group (the daemon's own when run_as is unset).
  uid_t uid = 0;
  gid_t gid = 0;
  // HOME, USER and LOGNAME of that user ("NAME=value"); empty when the
  // workers run as the daemon's user (they keep the environment's).
  std::vector<std::string> env;
};

// The user the workers of `job_id` (its spec `spec`) run as on `node_id`,
// for a daemon running as `self_uid`:`self_gid`. No owner, or the owner is
// the daemon's user: the daemon's user. A root daemon: the owner's uid, gid
// and the groups of the owner's name on this node. FailedPrecondition,
// naming the uid, job and node, when a root daemon does not know the uid,
// or a non-root daemon is asked to run another user's job.
absl::StatusOr<WorkerUser> ResolveWorkerUser(const v1::JobSpec& spec,
                                             const std::string& job_id,
                                             const std::string& node_id, uid_t self_uid,
                                             gid_t self_gid);

// The environment the workers start from: `base_env` (the daemon's) unless
// spec.replace_env, then spec.env and user.env over it (a later name
// replaces an earlier one; the order of first appearance is kept). Workers
// that run as another user (user.run_as) get only the names of
// IsPassedToOtherUsers from `base_env`: the daemon's environment may hold
// its own secrets.
std::vector<std::string> WorkerBaseEnv(const std::vector<std::string>& base_env,
                                       const v1::JobSpec& spec, const WorkerUser& user);

// The daemon's variables that another user's workers get: PATH, LANG, LC_*,
// TZ, TMPDIR, LD_LIBRARY_PATH, CUDA_*, NVIDIA_*, NCCL_*, GLOO_*, OMP_*,
// MKL_*, OPENBLAS_*, HTTP(S)_PROXY, NO_PROXY (either case): where programs
// and libraries are, how the node's devices and network are set up.
// Anything else of a job's reaches its workers through the job's own env
// (`submit --export`).
bool IsPassedToOtherUsers(std::string_view name);

// Makes the log folders of one attempt and returns the attempt's:
// <log_dir>/<job_id> (kept across rounds, its ".job" file naming `job_key`,
// the job's unique name, "<job id>@<cluster>"), in it attempt_<round> and
// its <local_rank> folders (new: one that exists is an error, never reused),
// private to the daemon (0711 for root, whose workers of other users pass
// through; else 0700), each rank's folder given to the workers' user (they
// write their error file there). When <log_dir>/<job_id> is another job's
// (another cluster's job of the same id: a fresh service numbers from 1
// again), <log_dir>/<job_key> instead; its logs stay as they are. An empty
// `job_key` (a service that names no cluster) takes <log_dir>/<job_id> as
// it is. Errors name the folder.
absl::StatusOr<std::string> MakeAttemptFolders(const std::string& log_dir,
                                               const std::string& job_id,
                                               const std::string& job_key, int64_t round,
                                               int nproc, const WorkerUser& user);

// OK when `dir` is empty (the daemon's own folder) or a folder on this
// node; else FailedPrecondition naming the folder, the job and the node.
absl::Status CheckWorkingDir(const std::string& dir, const std::string& job_id,
                             const std::string& node_id);

// What a node gives every attempt it starts (the Daemon's options).
struct NodeSettings {
  std::string node_id;
  // Logs go to <log_dir>/<job>/attempt_<round>/<local_rank>/.
  std::string log_dir;
  // The environment workers start from ("NAME=value").
  std::vector<std::string> base_env;
  // The workers' folder when the job names none; empty: the daemon's own.
  std::string working_dir;
  // The agent's progress socket (ELASTRUN_AGENT_SOCKET); empty: none.
  std::string agent_socket;
};

// The folder attempt `start` runs in on this node: the job's working_dir,
// else the node's.
std::string WorkingDirOf(const v1::StartAttempt& start, const NodeSettings& node);

// Readies the folders of attempt `start` (its workers run as `user`): checks
// its working folder and makes its log folders (MakeAttemptFolders under
// the job's unique name `job_key`). Returns the attempt's folder; the error
// says why the attempt cannot start here, naming the node.
absl::StatusOr<std::string> PrepareAttemptFolders(const v1::StartAttempt& start,
                                                  const NodeSettings& node,
                                                  const std::string& job_key,
                                                  const WorkerUser& user);

// The spec the runner runs for this node's part of attempt `start` (which
// names this node): its workers' ranks and torchrun's environment over
// WorkerBaseEnv, run as `user` in WorkingDirOf, their logs in
// `attempt_dir`, the job's snapshot folder `snapshot_dir` (empty: none).
AttemptSpec BuildNodeAttempt(const v1::StartAttempt& start, const NodeSettings& node,
                             const WorkerUser& user, const std::string& attempt_dir,
                             const std::string& snapshot_dir);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_ATTEMPT_START_H_
