#include "launcher/agent/attempt.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/worker_env.h"

namespace elastrun::launcher {
namespace {

bool HasName(const std::string& entry, const std::string& name) {
  return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
         entry[name.size()] == '=';
}

}  // namespace

std::string ErrorFilePath(const std::string& attempt_dir, int local_rank) {
  return absl::StrCat(attempt_dir, "/", local_rank, "/error.json");
}

std::string FindPythonHelperDir() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string dir(exe, static_cast<size_t>(n));
  dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
  const std::string helper = absl::StrCat(dir, "/../share/elastrun/python");
  if (access(absl::StrCat(helper, "/elastrun/__init__.py").c_str(), R_OK) != 0) return "";
  char resolved[PATH_MAX];
  return realpath(helper.c_str(), resolved) != nullptr ? std::string(resolved) : helper;
}

std::vector<std::string> WorkerArgvFor(const std::vector<std::string>& argv, int local) {
  std::vector<std::string> out = argv;
  for (size_t i = 1; i < out.size(); ++i) {
    out[i] = absl::StrReplaceAll(out[i], {{kLocalRankMacro, absl::StrCat(local)}});
  }
  return out;
}

bool HasLocalRankMacro(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    if (absl::StrContains(argv[i], kLocalRankMacro)) return true;
  }
  return false;
}

AttemptSpec BuildAttempt(const GroupSpec& group, const AttemptContext& ctx,
                         const std::vector<std::string>& base_env) {
  const int n = group.nproc_per_node;
  const std::vector<const char*> contract = {
      env::kRank,        env::kLocalRank,      env::kWorldSize,  env::kLocalWorldSize,
      env::kGroupRank,   env::kGroupWorldSize, env::kRoleRank,   env::kRoleWorldSize,
      env::kRoleName,    env::kMasterAddr,     env::kMasterPort, env::kRestartCount,
      env::kMaxRestarts, env::kRunId,          env::kErrorFile,  env::kUseAgentStore,
      env::kAgentSocket, env::kRound,          env::kStandbyFd,  env::kSnapshot,
      env::kAgentSecret};
  std::vector<std::string> common;
  bool has_omp = false;
  for (const std::string& e : base_env) {
    bool replaced = false;
    for (const char* name : contract) replaced = replaced || HasName(e, name);
    if (replaced) continue;
    has_omp = has_omp || HasName(e, env::kOmpNumThreads);
    common.push_back(e);
  }
  if (!has_omp && n > 1) common.push_back(absl::StrCat(env::kOmpNumThreads, "=1"));
  if (!group.python_path.empty()) {
    // Prepended, so `import elastrun` finds the helper of this launcher.
    bool found = false;
    for (std::string& e : common) {
      if (!HasName(e, "PYTHONPATH")) continue;
      const std::string old = e.substr(sizeof "PYTHONPATH=" - 1);
      e = absl::StrCat("PYTHONPATH=", group.python_path, old.empty() ? "" : ":", old);
      found = true;
    }
    if (!found) common.push_back(absl::StrCat("PYTHONPATH=", group.python_path));
  }
  // The same folder in every attempt: a standby activated for a restart
  // must find what the failed attempt's workers left there.
  if (!group.snapshot_dir.empty()) {
    common.push_back(absl::StrCat(env::kSnapshot, "=", group.snapshot_dir));
  }
  AttemptSpec spec;
  spec.hang_timeout = group.hang_timeout;
  spec.other_nodes = ctx.group_world_size > 1;
  // Workers whose argv carries their local rank cannot be started ahead.
  if (!HasLocalRankMacro(group.argv)) spec.standby_argv = group.argv;
  spec.standby_env = common;  // nothing that depends on the attempt
  auto set = [](std::vector<std::string>& v, const char* name, const auto& value) {
    v.push_back(absl::StrCat(name, "=", value));
  };
  set(common, env::kWorldSize, ctx.world_size);
  set(common, env::kLocalWorldSize, n);
  set(common, env::kGroupRank, ctx.group_rank);
  set(common, env::kGroupWorldSize, ctx.group_world_size);
  set(common, env::kRoleWorldSize, ctx.world_size);
  set(common, env::kRoleName, group.role);
  set(common, env::kMasterAddr, ctx.master_addr);
  set(common, env::kMasterPort, ctx.master_port);
  set(common, env::kRestartCount, ctx.restart_count);
  set(common, env::kMaxRestarts, group.max_restarts);
  set(common, env::kRunId, ctx.run_id);
  set(common, env::kUseAgentStore, "False");
  set(common, env::kRound, ctx.round);
  if (!group.agent_socket.empty()) set(common, env::kAgentSocket, group.agent_socket);

  for (int local = 0; local < n; ++local) {
    const int rank = ctx.rank_offset + local;
    WorkerSpec w;
    w.local_rank = local;
    w.rank = rank;
    w.process.argv = WorkerArgvFor(group.argv, local);
    w.process.env = common;
    set(w.process.env, env::kRank, rank);
    set(w.process.env, env::kLocalRank, local);
    set(w.process.env, env::kRoleRank, rank);
    set(w.process.env, env::kErrorFile, ErrorFilePath(ctx.attempt_dir, local));
    spec.workers.push_back(std::move(w));

    WorkerOutput out;
    const std::string dir = absl::StrCat(ctx.attempt_dir, "/", local);
    out.stdout_log = dir + "/stdout.log";
    out.stderr_log = dir + "/stderr.log";
    const int redirected = group.redirects.For(local);
    const int teed = group.tee.For(local);
    const bool shown =
        !group.local_ranks_filter || group.local_ranks_filter->count(local) > 0;
    out.stdout_to_console = shown && (!(redirected & kStdOut) || (teed & kStdOut));
    out.stderr_to_console = shown && (!(redirected & kStdErr) || (teed & kStdErr));
    out.prefix = absl::StrCat("[rank", rank, "]:");
    spec.outputs.push_back(std::move(out));
  }
  return spec;
}

}  // namespace elastrun::launcher
