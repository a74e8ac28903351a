#include "launcher/cli/run_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "launcher/agent/attempt.h"
#include "launcher/agent/liveness.h"
#include "launcher/cli/run_rdzv_options.h"

namespace elastrun::launcher {
namespace {

// A flag of `elastrun run`: CLI11 names (the first long one is canonical;
// each dashed long name also takes underscores), the value's name ("" for a
// flag without one) and its help line.
struct FlagDef {
  const char* names;
  const char* value;
  const char* help;
};

constexpr FlagDef kFlags[] = {
    {"--nproc-per-node", "N|cpu|gpu|auto", "workers on this node (default 1)"},
    {"--nnodes", "N|MIN:MAX",
     "nodes (default 1: this node alone). Above 1: run the\n"
     "same command on every node, with --rdzv-endpoint;\n"
     "MIN:MAX re-forms the group within that range"},
    {"--max-restarts", "K", "restarts after failures (default 0)"},
    {"--shutdown-timeout", "DUR", "grace between SIGTERM and SIGKILL (default 30s)"},
    {"--hang-timeout", "DUR|off|derived",
     "a rank without progress this long is hung: its\n"
     "stacks go to its log and the group restarts. Progress:\n"
     "a new step reported (elastrun.report in Python, the\n"
     "worker library in C++), or, before any report, CPU\n"
     "time; a stopped process makes none (default,\n"
     "\"derived\": 10x the median step time, at least 5m)"},
    {"--standby", "",
     "keep the next attempt's workers started and waiting,\n"
     "so a restart skips start-up (programs built on\n"
     "libelastrun_worker, and .py/-m programs: their\n"
     "interpreter waits with torch imported; others simply\n"
     "get no standbys)"},
    {"--no-snapshots", "",
     "give workers no ELASTRUN_SNAPSHOT folder (in-memory\n"
     "training snapshots that survive a worker's restart)"},
    {"--rdzv-id,--run-id", "ID",
     "run id (default: random; with several nodes \"none\",\n"
     "as torchrun: give each run its own)"},
    {"--log-dir", "DIR",
     "logs: DIR/ID/attempt_N/LOCAL_RANK/{stdout,stderr}.log\n"
     "and error.json (several nodes: DIR/ID/ID-1/attempt_N/..)\n"
     "(default: a new temporary folder)"},
    {"-r,--redirects", "0|1|2|3|R:S,...",
     "keep streams out of the console (1 stdout, 2 stderr,\n3 both)"},
    {"-t,--tee", "0|1|2|3|R:S,...", "show redirected streams on the console too"},
    {"--local-ranks-filter", "R,...", "only these local ranks reach the console"},
    {"--role", "NAME", "ROLE_NAME of the workers (default: default)"},
    {"--master-addr", "ADDR",
     "MASTER_ADDR with one node (default 127.0.0.1); with\n"
     "several, node rank 0's address for the static\n"
     "backend, else ignored (MASTER_ADDR is rank 0's node\n"
     "address, --local-addr there)"},
    {"--master-port", "PORT",
     "MASTER_PORT with one node (default: a free port per\n"
     "attempt); with several, the static backend's\n"
     "rendezvous port, else ignored (workers get a free\n"
     "port of rank 0's node)"},
    {"--no-python", "", "execute PROGRAM directly, even a .py"},
    {"-m,--module", "", "PROGRAM is a python module (python -m)"},
    {"--run-path", "", "run PROGRAM with python (runpy)"},
    {"--standalone", "",
     "this node alone, the rendezvous in this process (the\n"
     "default with --nnodes 1)"},
    {"--rdzv-backend", "NAME",
     "c10d (default): with several nodes, the endpoint's\n"
     "node hosts the rendezvous, ranks in joining order;\n"
     "static: a fixed --nnodes N, node --node-rank R is\n"
     "group rank R, the rendezvous at --master-addr:\n"
     "--master-port (29500) on node rank 0; elastrun: a\n"
     "running elastrun-rendezvous service (its replicas\n"
     "over etcd: no node is a single point); others\n"
     "refused"},
    {"--rdzv-endpoint", "HOST[:PORT]",
     "several nodes: the rendezvous, hosted by the node\n"
     "whose address HOST is (the first to bind PORT; see\n"
     "is_host), the same on every node (port 29400 if\n"
     "not given). Naming this node with --nnodes 1: this\n"
     "node alone. With --rdzv-backend elastrun: the\n"
     "service, HOST:PORT[,HOST:PORT...] (every replica)"},
    {"--node-rank", "R",
     "the static backend's node rank: this node's group\n"
     "rank (0 <= R < N); with one node only 0"},
    {"--start-method", "spawn",
     "only spawn (every worker is a new process); fork\n"
     "and forkserver are refused"},
    {"--rdzv-conf", "K=V,...",
     "several nodes: join_timeout, last_call_timeout,\n"
     "keep_alive_interval (DUR), keep_alive_max_attempt,\n"
     "is_host (0|1), token_file (see below); ignored with\n"
     "one node"},
    {"--local-addr", "ADDR",
     "several nodes: this node's address as the others\n"
     "reach it (default: the one on the route to the\n"
     "endpoint); ignored with one node"},
    {"--monitor-interval", "DUR",
     "warned about and ignored: worker exits are seen at\n"
     "once (SIGCHLD), not polled"},
};

// "PET_NPROC_PER_NODE" for "nproc-per-node", as torchrun reads them.
std::string PetName(const std::string& flag) {
  return absl::StrCat("PET_", absl::AsciiStrToUpper(absl::StrReplaceAll(flag, {{"-", "_"}})));
}


absl::Status ApplyRendezvous(const std::string& flag, const std::string& value,
                             const std::string& shown, const HostCheck& is_this_host,
                             RunOptions& o) {
  if (flag == "rdzv-endpoint") return ParseRdzvEndpoint(value, shown, is_this_host, o);
  if (flag == "rdzv-backend") {
    if (value != "c10d" && value != "static" && value != "elastrun") {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, " ", value, ": only c10d (the endpoint's node hosts the rendezvous), ",
          "static (--master-addr/--master-port, node rank 0 hosts) and elastrun (a ",
          "running elastrun-rendezvous service) are accepted"));
    }
    o.rdzv_backend = value;
  } else if (flag == "start-method") {
    if (value != "spawn") {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, " ", value, ": only spawn is supported (every worker is a new process)"));
    }
  } else if (flag == "rdzv-conf") {
    // --nnodes and --rdzv-endpoint come first (kFlags' order): whether
    // this is one node is known.
    if (!IsOneNode(o)) return ParseRdzvConf(value, shown, o);
    if (!value.empty()) {
      o.warnings.push_back(IgnoredWarning(shown, "one node has nothing to configure in its "
                                          "in-process rendezvous"));
    }
  } else if (flag == "local-addr") {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(shown, ": empty"));
    o.local_addr = value;
    if (IsOneNode(o)) {
      o.warnings.push_back(IgnoredWarning(shown, "one node needs no address for the rendezvous "
                                          "(MASTER_ADDR is --master-addr)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Apply(const std::string& flag, const std::string& value,
                   const std::string& shown, const HostCheck& is_this_host, RunOptions& o) {
  if (flag == "nnodes") {
    ASSIGN_OR_RETURN(o.nnodes, ParseRange(value, shown));
  } else if (flag == "nproc-per-node") {
    o.nproc_per_node_text = value;
  } else if (flag == "max-restarts") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 1000000));
    o.max_restarts = static_cast<int>(n);
  } else if (flag == "monitor-interval") {
    ASSIGN_OR_RETURN(o.monitor_interval, ParseDuration(value, shown));
    o.warnings.push_back(IgnoredWarning(shown, "worker exits are seen at once (SIGCHLD), not polled"));
  } else if (flag == "rdzv-id") {
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
    return ApplyRendezvous(flag, value, shown, is_this_host, o);
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
    o.master_addr_given = true;
  } else if (flag == "master-port") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 65535));
    o.master_port = static_cast<int>(n);
  } else if (flag == "node-rank") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, shown, 0, 1 << 20));
    o.node_rank = static_cast<int>(n);
  } else if (flag == "shutdown-timeout") {
    ASSIGN_OR_RETURN(o.shutdown_timeout, ParseDuration(value, shown));
  } else if (flag == "hang-timeout") {
    ASSIGN_OR_RETURN(o.hang_timeout, HangTimeout::Parse(value, shown));
  } else if (flag == "standalone") {
    ASSIGN_OR_RETURN(o.standalone, ParseBool(value, shown));
  } else if (flag == "standby") {
    ASSIGN_OR_RETURN(o.standby, ParseBool(value, shown));
  } else if (flag == "no-snapshots") {
    ASSIGN_OR_RETURN(o.no_snapshots, ParseBool(value, shown));
  } else if (flag == "no-python") {
    ASSIGN_OR_RETURN(o.no_python, ParseBool(value, shown));
  } else if (flag == "module") {
    ASSIGN_OR_RETURN(o.module, ParseBool(value, shown));
  } else if (flag == "run-path") {
    ASSIGN_OR_RETURN(o.run_path, ParseBool(value, shown));
  }
  return absl::OkStatus();
}

// The value of one flag: from the command line, else from PET_<NAME> (for
// each of its dashed long names), else none.
absl::Status ApplyFlag(const CLI::Option& opt, const EnvLookup& env,
                       const HostCheck& is_this_host, RunOptions& o) {
  const std::string canonical = opt.get_lnames()[0];
  if (opt.count() > 0) {
    return Apply(canonical, opt.results().back(), "--" + canonical, is_this_host, o);
  }
  for (const std::string& name : opt.get_lnames()) {
    if (absl::StrContains(name, '_')) continue;  // the underscored alias
    const std::string var = PetName(name);
    if (std::optional<std::string> v = env(var)) {
      return Apply(canonical, *v, var, is_this_host, o);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddRunFlags(CLI::App* app) {
  for (const FlagDef& f : kFlags) {
    const std::string names = flags::WithUnderscores(f.names);
    if (f.value[0] == '\0') {
      app->add_flag(names, f.help);
    } else {
      app->add_option(names, f.help)->type_name(f.value);
    }
  }
  // The first word that is not a flag is the program; it and everything
  // after it are the program's (`elastrun run train.py --lr 0.1`).
  app->prefix_command();
}

absl::StatusOr<RunOptions> RunOptionsFrom(const CLI::App& app, const EnvLookup& env,
                                          const HostCheck& is_this_host) {
  RunOptions o;
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest[0] == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') {
    // CLI11 stopped at a word it did not know: a flag, not a program.
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", rest[0].substr(0, rest[0].find('='))));
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr() || opt->get_lnames().empty()) continue;
    RETURN_IF_ERROR(ApplyFlag(*opt, env, is_this_host, o));
  }
  RETURN_IF_ERROR(CheckNodesForm(o, is_this_host));
  o.program = std::move(rest);
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

absl::StatusOr<RunOptions> ParseRunOptions(const std::vector<std::string>& args,
                                           const EnvLookup& env,
                                           const HostCheck& is_this_host) {
  ASSIGN_OR_RETURN(std::vector<std::string> expanded, ExpandRunAbbreviations(args));
  std::unique_ptr<CLI::App> app =
      flags::NewApp("elastrun run", kRunIntro, kRunFooter, /*version=*/false);
  AddRunFlags(app.get());
  const flags::Outcome parsed = flags::TryParse(*app, expanded);
  if (parsed.kind == flags::Outcome::kHelp) {
    RunOptions o;
    o.help = true;
    return o;
  }
  if (parsed.kind == flags::Outcome::kError) {
    return absl::InvalidArgumentError(parsed.message);
  }
  return RunOptionsFrom(*app, env, is_this_host);
}

namespace {

// A long flag name of `elastrun run` and whether it takes a value.
struct LongName {
  std::string name;  // with the leading "--"
  std::string canonical;
  bool takes_value = false;
};

std::vector<LongName> LongNames() {
  std::vector<LongName> names = {{"--help", "--help", false}};
  for (const FlagDef& f : kFlags) {
    std::string canonical;
    for (absl::string_view n : absl::StrSplit(f.names, ',')) {
      if (!absl::StartsWith(n, "--")) continue;
      if (canonical.empty()) canonical = std::string(n);
      const std::string dashed(n);
      const std::string underscored = absl::StrCat(
          "--", absl::StrReplaceAll(dashed.substr(2), {{"-", "_"}}));
      names.push_back({dashed, canonical, f.value[0] != '\0'});
      if (underscored != dashed) names.push_back({underscored, canonical, f.value[0] != '\0'});
    }
  }
  return names;
}

// The flag `word` (the part before '=') names: itself, or the only flag it
// is a prefix of. Null when it names none (CLI11 then reports it).
absl::StatusOr<const LongName*> Resolve(const std::string& word,
                                        const std::vector<LongName>& names) {
  std::vector<const LongName*> matches;
  std::set<std::string> canonicals;
  for (const LongName& n : names) {
    if (n.name == word) return &n;
    if (absl::StartsWith(n.name, word)) {
      matches.push_back(&n);
      canonicals.insert(n.canonical);
    }
  }
  if (matches.empty()) return nullptr;
  if (canonicals.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ambiguous flag ", word, ": could be ", absl::StrJoin(canonicals, ", ")));
  }
  return matches[0];
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandRunAbbreviations(
    const std::vector<std::string>& args) {
  static const std::vector<LongName>* const kNames = new std::vector<LongName>(LongNames());
  std::vector<std::string> out = args;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string& word = out[i];
    if (word == "--" || word.empty() || word[0] != '-') break;  // the program
    if (!absl::StartsWith(word, "--")) {
      // -r/-t take a value (unless attached: -r3); -m does not.
      if ((word == "-r" || word == "-t") && i + 1 < out.size()) ++i;
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    ASSIGN_OR_RETURN(const LongName* n, Resolve(name, *kNames));
    if (n == nullptr) continue;
    if (eq == std::string::npos) {
      out[i] = n->name;
      if (n->takes_value && i + 1 < out.size()) ++i;
    } else {
      out[i] = n->name + word.substr(eq);
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> LegacyLaunchArgs(const std::vector<std::string>& args) {
  static const std::vector<LongName>* const kNames = new std::vector<LongName>(LongNames());
  std::vector<std::string> out;
  bool use_env = false, program = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (program || word == "--" || word.empty() || word[0] != '-') {
      program = true;
      out.push_back(word);
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    if (name == "--use_env" || name == "--use-env") {
      if (eq == std::string::npos) {
        use_env = true;
      } else {
        ASSIGN_OR_RETURN(use_env, ParseBool(word.substr(eq + 1), name));
      }
      continue;
    }
    out.push_back(word);
    if (!absl::StartsWith(word, "--")) {
      if ((word == "-r" || word == "-t") && i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    ASSIGN_OR_RETURN(const LongName* n, Resolve(name, *kNames));
    if (n != nullptr && n->takes_value && eq == std::string::npos && i + 1 < args.size()) {
      out.push_back(args[++i]);
    }
  }
  if (!use_env) out.push_back(absl::StrCat("--local_rank=", kLocalRankMacro));
  return out;
}

int VisibleGpuCount(const std::optional<std::string>& cuda_visible_devices,
                    int device_count) {
  if (!cuda_visible_devices.has_value()) return device_count;
  int n = 0;
  for (absl::string_view d : absl::StrSplit(*cuda_visible_devices, ',', absl::SkipWhitespace())) {
    // torch stops at the first entry that is not a device ("-1" hides all).
    if (absl::StartsWith(absl::StripAsciiWhitespace(d), "-")) break;
    ++n;
  }
  return n;
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
    os.environ.pop("ELASTRUN_STANDBY_LOCAL_RANK", None)  # LOCAL_RANK comes with the activation
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

const char kRunIntro[] = R"(usage: elastrun run [FLAGS] PROGRAM [ARGS...]

Runs PROGRAM as an elastic group of workers on this node, with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...).
A failed worker stops the group, which restarts up to --max-restarts times.
A .py PROGRAM (or -m MODULE) runs with `python3 -u` ($ELASTRUN_PYTHON
overrides the interpreter); anything else is executed directly. Flags stop
at PROGRAM: the words after it are PROGRAM's.

Several nodes (torchrun's multi-node form): run the same command on every
node, e.g.
  elastrun run --nnodes 2:4 --nproc-per-node 8 --rdzv-backend c10d \
      --rdzv-endpoint node1:29400 --rdzv-id job7 train.py
The node whose address the endpoint names (the first to bind its port;
--rdzv-conf is_host=1|0 decides instead) hosts the rendezvous in its own
process; every node joins it. Group ranks follow the joining order
(--rdzv-backend static: --node-rank, with a fixed --nnodes N and the
rendezvous at --master-addr:--master-port on node rank 0); a node
that leaves or dies (noticed within keep_alive_interval x
keep_alive_max_attempt, 3 s by default) makes the others re-form with the
nodes left while at least MIN remain, a node that joins makes them
re-form too (up to MAX); a failed worker restarts every node's workers,
--max-restarts times for the whole run. If the host is lost, the other
nodes stop their workers and exit 1 naming the endpoint: start the run
again. The rendezvous token comes from --rdzv-conf token_file=FILE,
$ELASTRUN_TOKEN or $ELASTRUN_TOKEN_FILE (the first given); without one it
is derived from the run id, and then, as with torchrun, whoever reaches the endpoint and
knows the id may join: keep that network private.

With a rendezvous that outlives any node (torchrun's etcd backend), give
a running elastrun-rendezvous service, e.g. three replicas over etcd:
  elastrun run --nnodes 2:4 --nproc-per-node 8 --rdzv-backend elastrun \
      --rdzv-endpoint rdzv1:29400,rdzv2:29400,rdzv3:29400 --rdzv-id job7 train.py
No node hosts anything: the run is one job of the service (submitted once,
by whichever node comes first), placed on the run's nodes alone (their own
pool), and a node or a replica that is lost is only lost. The token is the
service's ($ELASTRUN_TOKEN_FILE, $ELASTRUN_TOKEN or token_file=FILE; none
is derived); TLS from $ELASTRUN_TLS_CA, _CERT, _KEY, _SERVER_NAME as for
the CLI. While the service does not answer the workers go on; the run gives
up after join_timeout without it. A run id the service has seen end is not
run again: give each run its own.

Flags are torchrun's: each is also spelled with underscores
(--nproc_per_node), may be shortened to an unambiguous prefix
(--nproc_per), and falls back to $PET_<NAME> (PET_NPROC_PER_NODE).
)";

const char kRunFooter[] = R"(DUR is seconds ("3", "0.5") or with a unit ("250ms", "3s", "1m").
--rdzv-conf (several nodes): join_timeout=DUR (a round still short of MIN
nodes this long fails the run; 600s), last_call_timeout=DUR (how long a
round with MIN nodes waits for more; 1s), keep_alive_interval=DUR (1s),
keep_alive_max_attempt=N (3), is_host=0|1, token_file=FILE.
--nproc-per-node gpu (and auto) counts $CUDA_VISIBLE_DEVICES when set.
Console lines are prefixed [rankN]:. On failure elastrun prints the root
cause (rank, exit code or signal, the worker's error file) and exits with the
failing worker's code (128+signal when killed), on every node. SIGINT,
SIGTERM, SIGHUP and SIGQUIT are forwarded to the workers; after the grace
period they are killed, and elastrun exits with 128+signal.
Each attempt runs in a cgroup v2 of its own where the machine allows it
(a writable cgroup2: root, or a delegated cgroup), killed as a whole when
the attempt ends, and by a small watchdog process if elastrun itself is
killed: nothing a worker started outlives the run. Elsewhere one line says
why, and workers are stopped by process group only.
Snapshots live in BASE/elastrun-UID/ID/ (BASE: $ELASTRUN_SNAPSHOT_BASE, else
/dev/shm, else $XDG_RUNTIME_DIR, else $TMPDIR), removed when the run ends
(several nodes: BASE/elastrun-UID/ID-1@NODE/).
)";

std::string RunUsage() {
  std::unique_ptr<CLI::App> app =
      flags::NewApp("elastrun run", kRunIntro, kRunFooter, /*version=*/false);
  AddRunFlags(app.get());
  return app->help();
}

}  // namespace elastrun::launcher
