// The worker side of the environment contract (common/worker_env.h): what a
// launcher (`elastrun run`, elastrund, or torchrun) tells each worker process
// about its place in the job. Torch-free, so the launcher can reuse it.
#ifndef ELASTRUN_WORKER_ENV_H_
#define ELASTRUN_WORKER_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::worker {

// Returns the value of the environment variable `name`, or nullopt when it is
// not set. Injected so tests never touch the real environment.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// How much of the contract FromEnvironment() insists on.
enum class EnvStrictness {
  // What PyTorch's env:// init needs: RANK, WORLD_SIZE, MASTER_ADDR and
  // MASTER_PORT. The other variables default as for a single-node, single-role
  // job in its first attempt (LOCAL_RANK = RANK, GROUP_RANK = 0, ...), so a
  // worker can also be started by hand.
  kMinimal,
  // Everything torchrun sets (all of the torchrun names in
  // common/worker_env.h except OMP_NUM_THREADS and TORCHELASTIC_ERROR_FILE,
  // which torchrun may leave unset). Launcher compatibility tests use this.
  kTorchrun,
};

// One worker's view of the job. Plain value; the invariants below hold for
// every WorkerEnv returned by FromEnvironment():
//   0 <= rank < world_size, 0 <= local_rank < local_world_size <= world_size,
//   0 <= group_rank < group_world_size, 0 <= role_rank < role_world_size,
//   1 <= master_port <= 65535, restart_count >= 0, max_restarts >= 0.
struct WorkerEnv {
  int rank = 0;                // RANK: global rank in this attempt.
  int local_rank = 0;          // LOCAL_RANK: rank among this node's workers.
  int world_size = 1;          // WORLD_SIZE: workers in this attempt.
  int local_world_size = 1;    // LOCAL_WORLD_SIZE: workers on this node.
  int group_rank = 0;          // GROUP_RANK: this node's rank (node index).
  int group_world_size = 1;    // GROUP_WORLD_SIZE: nodes in this attempt.
  int role_rank = 0;           // ROLE_RANK: rank among workers of this role.
  int role_world_size = 1;     // ROLE_WORLD_SIZE: workers of this role.
  std::string role_name = "default";  // ROLE_NAME
  std::string master_addr;     // MASTER_ADDR: host of the c10d TCPStore.
  int master_port = 0;         // MASTER_PORT: port of the c10d TCPStore.
  int restart_count = 0;       // TORCHELASTIC_RESTART_COUNT: 0 on first try.
  int max_restarts = 0;        // TORCHELASTIC_MAX_RESTARTS
  std::string run_id;          // TORCHELASTIC_RUN_ID; empty when unset.
  // TORCHELASTIC_ERROR_FILE: where to write the JSON error record on a
  // failure (see error_file.h); empty when unset.
  std::string error_file;
  // TORCHELASTIC_USE_AGENT_STORE == "True": the launcher hosts the TCPStore
  // and every rank is a client; otherwise rank 0 hosts it (what unmodified
  // PyTorch expects).
  bool use_agent_store = false;
  std::optional<int> omp_num_threads;  // OMP_NUM_THREADS, when set.
  std::string agent_socket;            // ELASTRUN_AGENT_SOCKET; may be empty.
  std::optional<int64_t> round;        // ELASTRUN_ROUND, when set.
  // ELASTRUN_SNAPSHOT: the job's snapshot folder on this node, the same in
  // every attempt; empty when the launcher has none.
  std::string snapshot;

  // Reads and validates the contract from the process environment. A worker
  // started as a standby (`elastrun run --standby`) first waits here for its
  // activation (worker/standby.h).
  // Errors (InvalidArgument), each naming the variable and saying that the
  // program must be started by `elastrun run` or torchrun: a required
  // variable is missing; a value is not a whole number or is out of range
  // (e.g. RANK >= WORLD_SIZE); TORCHELASTIC_USE_AGENT_STORE is not
  // True/False.
  static absl::StatusOr<WorkerEnv> FromEnvironment(
      EnvStrictness strictness = EnvStrictness::kMinimal);
  // As above, reading variables through `lookup`.
  static absl::StatusOr<WorkerEnv> FromLookup(
      const EnvLookup& lookup,
      EnvStrictness strictness = EnvStrictness::kMinimal);

  // The contract as (NAME, value) pairs, in the order of common/worker_env.h;
  // optional variables that are unset are left out. FromLookup() over these
  // pairs gives back an equal WorkerEnv. Launchers use this to build a
  // worker's environment; `--print-env` uses it to show one.
  std::vector<std::pair<std::string, std::string>> ToVariables() const;

  bool operator==(const WorkerEnv& other) const;
  bool operator!=(const WorkerEnv& other) const { return !(*this == other); }
};

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_ENV_H_
