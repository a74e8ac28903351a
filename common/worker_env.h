// The worker environment contract: the variables a launcher sets for every
// worker and a worker library reads. Names are torchrun's, so scripts written
// for torchrun run unchanged; ELASTRUN_* are elastrun's own additions.
#ifndef ELASTRUN_COMMON_WORKER_ENV_H_
#define ELASTRUN_COMMON_WORKER_ENV_H_

#include <string_view>

namespace elastrun::env {

// torchrun / torch.distributed.elastic
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
// "False": rank 0 hosts the c10d TCPStore at MASTER_ADDR:MASTER_PORT, which
// is what unmodified PyTorch (init_process_group with env://) expects.
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";

// elastrun's own
// Unix socket of the local launcher/daemon (heartbeats, barriers, snapshots).
inline constexpr char kAgentSocket[] = "ELASTRUN_AGENT_SOCKET";
// A fresh secret per worker activation (128 bits, hex) that every datagram
// on the agent socket carries: the agent accepts only its live workers'.
inline constexpr char kAgentSecret[] = "ELASTRUN_AGENT_SECRET";
// Rendezvous round id of this attempt (equal on every node).
inline constexpr char kRound[] = "ELASTRUN_ROUND";
// The folder of this job's in-memory snapshots on this node (owned by the
// launcher or node daemon, kept across restarts; worker/snapshot_area.h).
inline constexpr char kSnapshot[] = "ELASTRUN_SNAPSHOT";
// Set for workers started as standbys (`elastrun run --standby`): the number
// of a socket on which the worker reports that it has started and waits for
// its activation (see common/standby.h).
inline constexpr char kStandbyFd[] = "ELASTRUN_STANDBY_FD";
// Set with kStandbyFd: the LOCAL_RANK the standby will be activated as (a
// set's i-th standby becomes local rank i), so that it can prepare that
// rank's device (its GPU's context) while it waits. Unset on activation.
inline constexpr char kStandbyLocalRank[] = "ELASTRUN_STANDBY_LOCAL_RANK";

// Whether `name` is one of elastrun's own client settings (any ELASTRUN_
// name holding TOKEN or CREDENTIAL, the credential socket, TLS files): the
// launcher's or the submitter's, never passed on to workers (neither from
// a daemon's environment nor by `submit --export ALL`).
inline bool IsLauncherSetting(std::string_view name) {
  constexpr std::string_view kPrefix = "ELASTRUN_";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  const std::string_view rest = name.substr(kPrefix.size());
  for (std::string_view part : {"TOKEN", "CREDENTIAL"}) {
    if (rest.find(part) != std::string_view::npos) return true;
  }
  for (std::string_view start : {"CRED_SOCKET", "TLS_"}) {
    if (rest.substr(0, start.size()) == start) return true;
  }
  return false;
}

}  // namespace elastrun::env

#endif  // ELASTRUN_COMMON_WORKER_ENV_H_
