// `elastrun run`'s command line: torchrun's flags with torchrun's meaning
// (dashed and underscored spellings, PET_* environment fallbacks), parsed
// with CLI11 (common/flags.h) into RunOptions. Parsing is pure: the
// environment and "is this host me?" come in as functions. Flags elastrun
// accepts but cannot honour are refused, or kept with a warning.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_OPTIONS_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_OPTIONS_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/strings.h"
#include "launcher/agent/liveness.h"
#include "launcher/agent/output.h"
#include "launcher/cli/this_host.h"

namespace CLI {
class App;
}  // namespace CLI

namespace elastrun::launcher {

// --rdzv-conf K=V,... of the multi-node form: torchrun's keys where it has
// them (join_timeout, last_call_timeout, is_host, keep_alive_*), plus
// token_file. Unknown keys are warned about and ignored, as torchrun's
// backends ignore keys they do not read.
struct RendezvousConf {
  // is_host: true hosts the rendezvous on this node, false never; unset:
  // the node whose address the endpoint names hosts it (the first of them
  // to bind the port, when several share the address).
  std::optional<bool> is_host;
  // join_timeout: a round still short of MIN nodes this long fails the run.
  absl::Duration join_timeout = absl::Seconds(600);
  // last_call_timeout: once MIN nodes joined a round, how long it waits
  // for more before it closes.
  absl::Duration last_call_timeout = absl::Seconds(1);
  // keep_alive_interval / keep_alive_max_attempt: how often each node
  // heartbeats, and after how many missed heartbeats a silent node is
  // lost (a node whose process died is lost at once: its stream breaks).
  // The host is given up for lost after as long without an answer.
  absl::Duration keep_alive_interval = absl::Seconds(1);
  int keep_alive_max_attempt = 3;
  // token_file: the file holding the rendezvous token; empty:
  // $ELASTRUN_TOKEN_FILE, then $ELASTRUN_TOKEN, else one derived from the
  // run id.
  std::string token_file;
};

struct RunOptions {
  // --nnodes N or MIN:MAX; above 1 is the multi-node form (run_multinode.h).
  IntRange nnodes;
  // --nproc-per-node as given (N, cpu, gpu, auto) and resolved to a count.
  std::string nproc_per_node_text = "1";
  int nproc_per_node = 1;
  // --max-restarts: failure-caused restarts before the run fails.
  int max_restarts = 0;
  // --monitor-interval: accepted with a warning; exits are seen through
  // SIGCHLD at once, so it changes nothing.
  absl::Duration monitor_interval = absl::Milliseconds(100);
  // --rdzv-id / --run-id; a random id when not given.
  std::string run_id;
  // --log-dir; a fresh temporary folder when not given.
  std::string log_dir;
  // --redirects / --tee (torchrun's Std selectors).
  StdSetting redirects;
  StdSetting tee;
  // --local-ranks-filter: local ranks whose output reaches the console.
  std::optional<std::set<int>> local_ranks_filter;
  // --role
  std::string role = "default";
  // --no-python, -m/--module, --run-path: how the program is started.
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  // --master-addr / --master-port; port 0 picks a free port per attempt.
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // Whether --master-addr was given.
  bool master_addr_given = false;
  // --standalone: this node alone (the default for --nnodes 1).
  bool standalone = false;
  // --rdzv-backend: c10d (default), static, or elastrun (a running
  // elastrun-rendezvous service).
  std::string rdzv_backend = "c10d";
  // --rdzv-endpoint HOST:PORT (port 29400 when not given); with the
  // elastrun backend HOST:PORT[,HOST:PORT...]; empty: none.
  std::string rdzv_endpoint;
  // Whether the endpoint's host is this node (an address of it).
  bool endpoint_is_this_host = true;
  // --rdzv-conf.
  RendezvousConf rdzv_conf;
  // The elastrun backend: the rendezvous is a service already running (its
  // replicas, for HA), not hosted by a node of the run.
  bool external_rendezvous() const { return rdzv_backend == "elastrun"; }
  // --node-rank; -1: not given. The static backend's group rank of this
  // node.
  int node_rank = -1;
  // --local-addr: this node's address as the others reach it (MASTER_ADDR
  // when it holds rank 0); empty: the address on the route to the endpoint.
  std::string local_addr;
  // The multi-node form: --nnodes above 1, or an endpoint on another host.
  bool multinode = false;
  // --standby: pre-start the next attempt's workers (libelastrun_worker
  // programs), so a restart skips process start-up.
  bool standby = false;
  // --no-snapshots: no snapshot folder, no ELASTRUN_SNAPSHOT for workers.
  bool no_snapshots = false;
  // --shutdown-timeout: grace between the stop signal and SIGKILL.
  absl::Duration shutdown_timeout = absl::Seconds(30);
  // --hang-timeout: a rank without progress this long is declared hung and
  // the group restarts (liveness.h); by default derived from the step time
  // (at least 5 minutes).
  HangTimeout hang_timeout = HangTimeout::Derived();
  // The program and its arguments.
  std::vector<std::string> program;
  // --help was asked for.
  bool help = false;
  // Flags that were accepted but change nothing here (--monitor-interval;
  // --local-addr and --rdzv-conf with one node; unknown --rdzv-conf keys):
  // one line each, for stderr.
  std::vector<std::string> warnings;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// True when a host name or address is this node (--rdzv-endpoint).
using HostCheck = std::function<bool(const std::string&)>;

// Adds `elastrun run`'s flags to `app` (the `run` subcommand, or an app of
// its own) and stops its parsing at the first word that is not a flag (the
// program): everything from there on is the program's.
void AddRunFlags(CLI::App* app);

// The options from an `app` that AddRunFlags set up and that has parsed:
// its flags, then PET_<NAME> for each flag not given, then the program
// (what parsing left). InvalidArgument naming the flag (or the PET_
// variable) for a bad value, an unknown flag before the program, no
// program, or a flag that cannot be honoured: several nodes without
// --rdzv-endpoint or with the static backend, --start-method other than
// spawn, --rdzv-backend other than c10d or static, --node-rank other than
// 0 on one node.
absl::StatusOr<RunOptions> RunOptionsFrom(const CLI::App& app, const EnvLookup& env,
                                          const HostCheck& is_this_host = IsThisHost);

// `args` (the words after "run") with each flag given as an unambiguous
// prefix of a flag's name spelled out, as Python's argparse (and so
// torchrun) accepts them: --nproc_per 2 is --nproc_per_node 2. Words from
// the program on are left alone. InvalidArgument naming the candidates
// for an ambiguous prefix (--r: --rdzv-backend, --redirects, ...).
absl::StatusOr<std::vector<std::string>> ExpandRunAbbreviations(
    const std::vector<std::string>& args);

// `elastrun launch ARGS` (torch.distributed.launch's form, seed 002's
// `python -m torch.distributed.launch --nproc_per_node 7 ...`) as the
// `elastrun run` words it means: --use_env / --use-env (before the program)
// removed, and without it each worker's `--local_rank=N` appended to the
// program's arguments (the legacy contract; `${local_rank}`, see
// launcher/agent/attempt.h). InvalidArgument for a --use_env with a value
// that is not a boolean.
absl::StatusOr<std::vector<std::string>> LegacyLaunchArgs(const std::vector<std::string>& args);

// The GPUs workers may use: the entries of $CUDA_VISIBLE_DEVICES when it is
// set (as torch counts them), else `device_count` (/dev/nvidiaN files).
int VisibleGpuCount(const std::optional<std::string>& cuda_visible_devices, int device_count);

// Parses `args` (the words after "run") with a fresh app:
// ExpandRunAbbreviations, AddRunFlags, then RunOptionsFrom. -h/--help sets
// `help` (nothing else is checked).
absl::StatusOr<RunOptions> ParseRunOptions(const std::vector<std::string>& args,
                                           const EnvLookup& env,
                                           const HostCheck& is_this_host = IsThisHost);

// --nproc-per-node: N, "cpu" (CPU cores), "gpu" (GPUs; an error without
// any) or "auto" (GPUs if any, else CPU cores).
absl::StatusOr<int> ResolveNprocPerNode(const std::string& text, int cpu_count,
                                        int gpu_count);

// The argv that runs the program: "<python> -u [-m] PROGRAM ARGS" for a
// module or a .py file (unless --no-python), else the program itself. With
// --standby, Python programs start through a small bootstrap that speaks the
// standby protocol: "<python> -u -c BOOTSTRAP module|path PROGRAM ARGS".
std::vector<std::string> WorkerArgv(const RunOptions& options, const std::string& python);

// What `elastrun run --help` prints before and after the flags.
extern const char kRunIntro[];
extern const char kRunFooter[];

// The text of `elastrun run --help`.
std::string RunUsage();

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_OPTIONS_H_
