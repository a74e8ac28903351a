#include "launcher/cli/run_options.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace elastrun::launcher {
namespace {

// A flag of `elastrun run`: canonical dashed name and whether it takes a value.
struct FlagDef {
  const char* name;
  bool takes_value;
};

constexpr FlagDef kFlags[] = {
    {"nnodes", true},          {"nproc-per-node", true},   {"max-restarts", true},
    {"monitor-interval", true}, {"rdzv-id", true},         {"run-id", true},
    {"rdzv-backend", true},    {"rdzv-endpoint", true},    {"rdzv-conf", true},
    {"log-dir", true},         {"redirects", true},        {"tee", true},
    {"local-ranks-filter", true}, {"role", true},          {"master-addr", true},
    {"master-port", true},     {"node-rank", true},        {"start-method", true},
    {"shutdown-timeout", true}, {"local-addr", true},      {"standalone", false},
    {"no-python", false},      {"standby", false},      {"module", false},          {"run-path", false},
    {"help", false},
};

const std::map<std::string, std::string>& ShortFlags() {
  static const auto* m = new std::map<std::string, std::string>{
      {"m", "module"}, {"r", "redirects"}, {"t", "tee"}, {"h", "help"}};
  return *m;
}

const FlagDef* FindFlag(const std::string& name) {
  for (const FlagDef& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// "PET_NPROC_PER_NODE" for "nproc-per-node", as torchrun reads them.
std::string PetName(const std::string& flag) {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}

absl::Status Apply(const std::string& flag, const std::string& value,
                   const std::string& shown, RunOptions& o) {
  if (flag == "nnodes") {
    ASSIGN_OR_RETURN(o.nnodes, ParseRange(value, shown));
    if (o.nnodes.max > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, " ", value, ": `elastrun run` runs on this node only. For several ",
          "nodes start `elastrund` on each node and submit with ",
          "`elastrun submit --nnodes ", value, "`"));
    }
  } else if (flag == "nproc-per-node") {
    o.nproc_per_node_text = value;
  } else if (flag == "max-restarts") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 1000000));
    o.max_restarts = static_cast<int>(n);
  } else if (flag == "monitor-interval") {
    ASSIGN_OR_RETURN(o.monitor_interval, ParseDuration(value, shown));
  } else if (flag == "rdzv-id" || flag == "run-id") {
    if (value.empty() || value.size() > 128 ||
        value.find_first_of("/\\\n\t ") != std::string::npos || value == "." ||
        value == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, ": '", value, "' is not a valid run id (1-128 characters, no ",
          "slashes or spaces)"));
    }
    o.run_id = value;
  } else if (flag == "rdzv-backend" || flag == "rdzv-endpoint" || flag == "rdzv-conf" ||
             flag == "start-method" || flag == "local-addr") {
    // Accepted for torchrun compatibility; a single-node run needs none.
  } else if (flag == "log-dir") {
    o.log_dir = value;
  } else if (flag == "redirects") {
    ASSIGN_OR_RETURN(o.redirects, StdSetting::Parse(value, shown));
  } else if (flag == "tee") {
    ASSIGN_OR_RETURN(o.tee, StdSetting::Parse(value, shown));
  } else if (flag == "local-ranks-filter") {
    std::set<int> ranks;
    for (absl::string_view r : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      ASSIGN_OR_RETURN(int64_t n, ParseInt(r, shown, 0, 1 << 20));
      ranks.insert(static_cast<int>(n));
    }
    o.local_ranks_filter = std::move(ranks);
  } else if (flag == "role") {
    o.role = value;
  } else if (flag == "master-addr") {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(shown, ": empty"));
    o.master_addr = value;
  } else if (flag == "master-port") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 65535));
    o.master_port = static_cast<int>(n);
  } else if (flag == "node-rank") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 0));
    (void)n;
  } else if (flag == "shutdown-timeout") {
    ASSIGN_OR_RETURN(o.shutdown_timeout, ParseDuration(value, shown));
  } else if (flag == "standalone") {
    ASSIGN_OR_RETURN(o.standalone, ParseBool(value, shown));
  } else if (flag == "standby") {
    ASSIGN_OR_RETURN(o.standby, ParseBool(value, shown));
  } else if (flag == "no-python") {
    ASSIGN_OR_RETURN(o.no_python, ParseBool(value, shown));
  } else if (flag == "module") {
    ASSIGN_OR_RETURN(o.module, ParseBool(value, shown));
  } else if (flag == "run-path") {
    ASSIGN_OR_RETURN(o.run_path, ParseBool(value, shown));
  } else if (flag == "help") {
    o.help = true;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunOptions> ParseRunOptions(const std::vector<std::string>& args,
                                           const EnvLookup& env) {
  RunOptions o;
  std::set<std::string> seen;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    std::string name, value;
    bool has_value = false;
    if (absl::StartsWith(arg, "--")) {
      name = arg.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      name = absl::StrReplaceAll(name, {{"_", "-"}});
    } else {
      auto it = ShortFlags().find(arg.substr(1));
      if (it == ShortFlags().end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown flag '", arg, "'; see `elastrun run --help`"));
      }
      name = it->second;
    }
    const FlagDef* def = FindFlag(name);
    if (def == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "'; see `elastrun run --help`"));
    }
    if (def->takes_value && !has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag '", arg, "' needs a value"));
      }
      value = args[++i];
    } else if (!def->takes_value && !has_value) {
      value = "true";
    }
    RETURN_IF_ERROR(Apply(name, value, absl::StrCat("--", name), o));
    seen.insert(name);
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  // torchrun's PET_* fallbacks for flags not given on the command line.
  for (const FlagDef& f : kFlags) {
    if (seen.count(f.name) || std::string(f.name) == "help") continue;
    const std::string var = PetName(f.name);
    if (auto v = env(var)) RETURN_IF_ERROR(Apply(f.name, *v, var, o));
  }

  if (o.help) return o;
  if (o.program.empty()) {
    return absl::InvalidArgumentError(
        "no program given; usage: elastrun run [FLAGS] PROGRAM [ARGS...]");
  }
  if (o.no_python && o.module) {
    return absl::InvalidArgumentError(
        "--no-python and --module cannot be used together: a module needs python");
  }
  return o;
}

absl::StatusOr<int> ResolveNprocPerNode(const std::string& text, int cpu_count,
                                        int gpu_count) {
  if (text == "cpu") return std::max(cpu_count, 1);
  if (text == "gpu") {
    if (gpu_count <= 0) {
      return absl::FailedPreconditionError(
          "--nproc-per-node gpu: this node has no GPU; use a number, cpu or auto");
    }
    return gpu_count;
  }
  if (text == "auto") return gpu_count > 0 ? gpu_count : std::max(cpu_count, 1);
  auto n = ParseInt(text, "--nproc-per-node", 1, 4096);
  if (!n.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nproc-per-node: '", text, "' is not a number of workers (1-4096) nor one of ",
        "cpu, gpu, auto"));
  }
  return static_cast<int>(*n);
}

// The standby protocol (common/standby.h) for Python programs, run with
// `python -u -c`: sys.argv is then ["-c", "module"|"path", TARGET, ARGS...].
// It imports torch (the start-up a restart should not pay again), reports
// its start-up, takes the activation into os.environ, and runs TARGET as
// `python -m TARGET` or `python TARGET` would: as __main__, with sys.argv
// and sys.path[0] set the same way.
constexpr char kPythonStandby[] = R"py(import os, runpy, sys
def _elastrun_standby():
    fd = int(os.environ.pop("ELASTRUN_STANDBY_FD"))
    try:
        import torch, torch.distributed
    except ImportError:
        pass
    os.write(fd, b"R")
    data = b""
    while not (data == b"\0" or data.endswith(b"\0\0")):
        chunk = os.read(fd, 65536)
        if not chunk:
            os._exit(0)  # not needed: the launcher closed the socket
        data += chunk
    os.close(fd)
    for entry in data[:-1].split(b"\0")[:-1]:
        name, _, value = entry.partition(b"=")
        os.environ[os.fsdecode(name)] = os.fsdecode(value)
    mode, target = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    if mode == "module":
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
_elastrun_standby()
)py";

std::vector<std::string> WorkerArgv(const RunOptions& o, const std::string& python) {
  std::vector<std::string> argv;
  const bool is_py = absl::EndsWith(o.program[0], ".py");
  if (!o.no_python && (o.module || o.run_path || is_py)) {
    argv = {python, "-u"};
    if (o.standby) {
      argv.insert(argv.end(), {"-c", kPythonStandby, o.module ? "module" : "path"});
    } else if (o.module) {
      argv.push_back("-m");
    }
  }
  argv.insert(argv.end(), o.program.begin(), o.program.end());
  return argv;
}

std::string RunUsage() {
  return R"(usage: elastrun run [FLAGS] PROGRAM [ARGS...]

Runs PROGRAM as an elastic group of workers on this node, with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...).
A failed worker stops the group, which restarts up to --max-restarts times.
A .py PROGRAM (or -m MODULE) runs with `python3 -u` ($ELASTRUN_PYTHON
overrides the interpreter); anything else is executed directly.

Flags (also spelled with underscores; each falls back to PET_<NAME>):
  --nproc-per-node N|cpu|gpu|auto  workers on this node (default 1)
  --nnodes 1|1:1                   nodes; more go through elastrund + submit
  --max-restarts K                 restarts after failures (default 0)
  --shutdown-timeout SECONDS       grace between SIGTERM and SIGKILL (30)
  --standby                        keep the next attempt's workers started and
                                   waiting, so a restart skips start-up
                                   (programs built on libelastrun_worker, and
                                   .py/-m programs: their interpreter waits
                                   with torch imported; others simply get no
                                   standbys)
  --rdzv-id, --run-id ID           run id (default: random)
  --log-dir DIR                    logs: DIR/ID/attempt_N/LOCAL_RANK/
                                   {stdout,stderr}.log and error.json
                                   (default: a new temporary folder)
  -r, --redirects 0|1|2|3|R:S,...  keep streams out of the console
                                   (1 stdout, 2 stderr, 3 both)
  -t, --tee 0|1|2|3|R:S,...        show redirected streams on the console too
  --local-ranks-filter R,...       only these local ranks reach the console
  --role NAME                      ROLE_NAME of the workers (default)
  --master-addr ADDR               MASTER_ADDR (default 127.0.0.1)
  --master-port PORT               MASTER_PORT (default: a free port per attempt)
  --no-python                      execute PROGRAM directly, even a .py
  -m, --module                     PROGRAM is a python module (python -m)
  --run-path                       run PROGRAM with python (runpy)
  --standalone                     accepted: elastrun run is always standalone
  --monitor-interval SECONDS       accepted; exits are seen at once (SIGCHLD)
  --rdzv-backend, --rdzv-endpoint, --rdzv-conf, --start-method,
  --node-rank 0, --local-addr      accepted for torchrun compatibility
  -h, --help                       this text

Console lines are prefixed [rankN]:. On failure elastrun prints the root
cause (rank, exit code or signal, the worker's error file) and exits with the
failing worker's code (128+signal when killed). SIGINT, SIGTERM, SIGHUP and
SIGQUIT are forwarded to the workers; after the grace period they are
killed, and elastrun exits with 128+signal.
)";
}

}  // namespace elastrun::launcher
