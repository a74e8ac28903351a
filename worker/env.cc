#include "worker/env.h"

#include <cstdlib>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "common/worker_env.h"
#include "worker/standby.h"

namespace elastrun::worker {
namespace {

// Appended to every error: the usual cause is a worker started by hand.
constexpr char kHint[] =
    "; this program must be started by `elastrun run` or torchrun, which set "
    "the worker environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...)";

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(message, kHint));
}

// Reads variables through a lookup and remembers the strictness, so each
// field is one line in FromLookup().
class Reader {
 public:
  Reader(const EnvLookup& lookup, EnvStrictness strictness)
      : lookup_(lookup), strictness_(strictness) {}

  // The value of `name`; missing is an error if `required` (or, under
  // kTorchrun, if `torchrun_sets`), otherwise nullopt.
  absl::StatusOr<std::optional<std::string>> Get(const char* name, bool required,
                                                 bool torchrun_sets) const {
    std::optional<std::string> value = lookup_(name);
    if (!value.has_value() &&
        (required || (torchrun_sets && strictness_ == EnvStrictness::kTorchrun))) {
      return Invalid(absl::StrCat(name, " is not set"));
    }
    return value;
  }

  // An integer variable in [min, max]; `fallback` when optional and unset.
  absl::StatusOr<int64_t> Int(const char* name, bool required, bool torchrun_sets,
                              int64_t fallback, int64_t min, int64_t max) const {
    ASSIGN_OR_RETURN(std::optional<std::string> text,
                     Get(name, required, torchrun_sets));
    if (!text.has_value()) return fallback;
    absl::StatusOr<int64_t> value = ParseInt(*text, name, min, max);
    if (!value.ok()) return Invalid(value.status().message());
    return *value;
  }

  absl::StatusOr<std::string> String(const char* name, bool required,
                                     bool torchrun_sets,
                                     const std::string& fallback) const {
    ASSIGN_OR_RETURN(std::optional<std::string> text,
                     Get(name, required, torchrun_sets));
    if (!text.has_value()) return fallback;
    if (required && text->empty()) return Invalid(absl::StrCat(name, " is empty"));
    return *text;
  }

 private:
  const EnvLookup& lookup_;
  const EnvStrictness strictness_;
};

constexpr int64_t kMaxWorld = 1 << 24;  // Far above any real job.

}  // namespace

absl::StatusOr<WorkerEnv> WorkerEnv::FromEnvironment(EnvStrictness strictness) {
  // A standby worker learns its environment only now (worker/standby.h).
  RETURN_IF_ERROR(AwaitStandbyActivation());
  return FromLookup(
      [](const char* name) -> std::optional<std::string> {
        const char* value = std::getenv(name);
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      },
      strictness);
}

absl::StatusOr<WorkerEnv> WorkerEnv::FromLookup(const EnvLookup& lookup,
                                                EnvStrictness strictness) {
  const Reader r(lookup, strictness);
  WorkerEnv e;
  // Sizes first, so each rank is checked against its size with a message
  // that names both.
  ASSIGN_OR_RETURN(e.world_size, r.Int(env::kWorldSize, true, true, 1, 1, kMaxWorld));
  ASSIGN_OR_RETURN(e.rank, r.Int(env::kRank, true, true, 0, 0, kMaxWorld));
  if (e.rank >= e.world_size) {
    return Invalid(absl::StrCat(env::kRank, "=", e.rank, " is not below ",
                                env::kWorldSize, "=", e.world_size));
  }
  ASSIGN_OR_RETURN(e.local_world_size, r.Int(env::kLocalWorldSize, false, true,
                                             e.world_size, 1, kMaxWorld));
  if (e.local_world_size > e.world_size) {
    return Invalid(absl::StrCat(env::kLocalWorldSize, "=", e.local_world_size,
                                " is greater than ", env::kWorldSize, "=",
                                e.world_size));
  }
  ASSIGN_OR_RETURN(e.local_rank,
                   r.Int(env::kLocalRank, false, true,
                         e.rank % e.local_world_size, 0, kMaxWorld));
  if (e.local_rank >= e.local_world_size) {
    return Invalid(absl::StrCat(env::kLocalRank, "=", e.local_rank,
                                " is not below ", env::kLocalWorldSize, "=",
                                e.local_world_size));
  }
  ASSIGN_OR_RETURN(e.group_world_size,
                   r.Int(env::kGroupWorldSize, false, true, 1, 1, kMaxWorld));
  ASSIGN_OR_RETURN(e.group_rank, r.Int(env::kGroupRank, false, true, 0, 0, kMaxWorld));
  if (e.group_rank >= e.group_world_size) {
    return Invalid(absl::StrCat(env::kGroupRank, "=", e.group_rank,
                                " is not below ", env::kGroupWorldSize, "=",
                                e.group_world_size));
  }
  ASSIGN_OR_RETURN(e.role_world_size, r.Int(env::kRoleWorldSize, false, true,
                                            e.world_size, 1, kMaxWorld));
  ASSIGN_OR_RETURN(e.role_rank,
                   r.Int(env::kRoleRank, false, true, e.rank, 0, kMaxWorld));
  if (e.role_rank >= e.role_world_size) {
    return Invalid(absl::StrCat(env::kRoleRank, "=", e.role_rank,
                                " is not below ", env::kRoleWorldSize, "=",
                                e.role_world_size));
  }
  ASSIGN_OR_RETURN(e.role_name, r.String(env::kRoleName, false, true, "default"));
  ASSIGN_OR_RETURN(e.master_addr, r.String(env::kMasterAddr, true, true, ""));
  ASSIGN_OR_RETURN(e.master_port, r.Int(env::kMasterPort, true, true, 0, 1, 65535));
  ASSIGN_OR_RETURN(e.restart_count,
                   r.Int(env::kRestartCount, false, true, 0, 0, INT32_MAX));
  ASSIGN_OR_RETURN(e.max_restarts,
                   r.Int(env::kMaxRestarts, false, true, 0, 0, INT32_MAX));
  ASSIGN_OR_RETURN(e.run_id, r.String(env::kRunId, false, true, ""));
  ASSIGN_OR_RETURN(e.error_file, r.String(env::kErrorFile, false, false, ""));

  // PyTorch tests `== "True"` exactly; anything but True/False would make a
  // C++ and a Python worker of one job disagree on who hosts the store.
  ASSIGN_OR_RETURN(std::optional<std::string> agent_store,
                   r.Get(env::kUseAgentStore, false, true));
  if (agent_store.has_value() && *agent_store != "True" &&
      *agent_store != "False") {
    return Invalid(absl::StrCat(env::kUseAgentStore, "='", *agent_store,
                                "' is neither True nor False"));
  }
  e.use_agent_store = agent_store.has_value() && *agent_store == "True";

  if (lookup(env::kOmpNumThreads).has_value()) {
    ASSIGN_OR_RETURN(e.omp_num_threads,
                     r.Int(env::kOmpNumThreads, false, false, 1, 1, 1 << 16));
  }
  ASSIGN_OR_RETURN(e.agent_socket, r.String(env::kAgentSocket, false, false, ""));
  if (lookup(env::kRound).has_value()) {
    ASSIGN_OR_RETURN(e.round, r.Int(env::kRound, false, false, 0, 0, INT64_MAX));
  }
  ASSIGN_OR_RETURN(e.snapshot, r.String(env::kSnapshot, false, false, ""));
  return e;
}

std::vector<std::pair<std::string, std::string>> WorkerEnv::ToVariables() const {
  std::vector<std::pair<std::string, std::string>> v = {
      {env::kRank, absl::StrCat(rank)},
      {env::kLocalRank, absl::StrCat(local_rank)},
      {env::kWorldSize, absl::StrCat(world_size)},
      {env::kLocalWorldSize, absl::StrCat(local_world_size)},
      {env::kGroupRank, absl::StrCat(group_rank)},
      {env::kGroupWorldSize, absl::StrCat(group_world_size)},
      {env::kRoleRank, absl::StrCat(role_rank)},
      {env::kRoleWorldSize, absl::StrCat(role_world_size)},
      {env::kRoleName, role_name},
      {env::kMasterAddr, master_addr},
      {env::kMasterPort, absl::StrCat(master_port)},
      {env::kRestartCount, absl::StrCat(restart_count)},
      {env::kMaxRestarts, absl::StrCat(max_restarts)},
      {env::kRunId, run_id},
  };
  if (!error_file.empty()) v.emplace_back(env::kErrorFile, error_file);
  v.emplace_back(env::kUseAgentStore, use_agent_store ? "True" : "False");
  if (omp_num_threads.has_value()) {
    v.emplace_back(env::kOmpNumThreads, absl::StrCat(*omp_num_threads));
  }
  if (!agent_socket.empty()) v.emplace_back(env::kAgentSocket, agent_socket);
  if (round.has_value()) v.emplace_back(env::kRound, absl::StrCat(*round));
  if (!snapshot.empty()) v.emplace_back(env::kSnapshot, snapshot);
  return v;
}

bool WorkerEnv::operator==(const WorkerEnv& o) const {
  auto tie = [](const WorkerEnv& e) {
    return std::tie(e.rank, e.local_rank, e.world_size, e.local_world_size,
                    e.group_rank, e.group_world_size, e.role_rank,
                    e.role_world_size, e.role_name, e.master_addr, e.master_port,
                    e.restart_count, e.max_restarts, e.run_id, e.error_file,
                    e.use_agent_store, e.omp_num_threads, e.agent_socket,
                    e.round, e.snapshot);
  };
  return tie(*this) == tie(o);
}

}  // namespace elastrun::worker
