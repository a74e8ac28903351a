// Flag parsing, help texts and dispatch of the job commands. The commands
// themselves are in cli_commands.cc.
#include "launcher/cli/cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/strings.h"
#include "launcher/cli/commands.h"

namespace elastrun::launcher {
namespace {

using internal::ParsedArgs;

constexpr char kExitCodesHelp[] = R"(Exit codes of the job commands:
  0  done (wait: the job SUCCEEDED)
  1  the job FAILED or was CANCELLED (wait), or the command failed
  2  usage error: bad flags or arguments, or a job spec refused
  3  the service could not be reached or did not answer in time
  4  no such job
  5  wait --timeout passed before the job ended
)";

constexpr char kServiceHelp[] = R"(Service flags (every command):
  --rendezvous HOST:PORT  the elastrun-rendezvous service (default
                          $ELASTRUN_RENDEZVOUS, else 127.0.0.1:29400)
  --token TOKEN           sent as "authorization: Bearer TOKEN" (default
                          $ELASTRUN_TOKEN; visible in ps: prefer --token-file)
  --token-file FILE       read the token from FILE (whitespace stripped)
  --rpc-timeout DUR       deadline of each call to the service (default 10s)
  -h, --help              show this help
)";

struct CommandInfo {
  const char* name;
  const char* summary;
  // Flags taking a value, and flags without one, beyond the service flags.
  std::vector<std::string> value_flags;
  std::vector<std::string> bool_flags;
  const char* help;  // usage, description and own flags
};

const std::vector<CommandInfo>& Commands() {
  static const auto* const commands = new std::vector<CommandInfo>{
      {"submit",
       "submit a job (a YAML job spec, or flags and -- PROGRAM ARGS)",
       {"--name", "--nnodes", "--nproc-per-node", "--max-restarts", "--env",
        "--working-dir", "--last-call-timeout", "--join-timeout"},
       {},
       R"(usage: elastrun submit [flags] JOB.yaml [KEY=VALUE...]
       elastrun submit [flags] -- PROGRAM [ARGS...]

Submits a job to the service and prints its id (one line, nothing else on
stdout). The spec is checked here first, then by the service; a refused spec
creates nothing.

A job file is YAML with the keys name, nnodes ("N" or "MIN:MAX"),
nproc_per_node, max_restarts, command (a list: program and arguments), env
(a mapping), working_dir, last_call_timeout, join_timeout; only command is
required. It may inherit with _base_; KEY=VALUE words after the file override
its keys (Hydra's grammar: nnodes=2:4 sets, +env.SEED=1 adds, ~env deletes).
Flags override the file too.

Spec flags:
  --name NAME               job name ([A-Za-z0-9._-], at most 64); id NAME-N
  --nnodes N|MIN:MAX        nodes (default 1)
  --nproc-per-node N        workers per node, one slot each (default 1)
  --max-restarts K          failure-caused restarts for the job (default 0)
  --env NAME=VALUE          extra worker environment (repeatable)
  --working-dir DIR         worker's working directory on its node
  --last-call-timeout DUR   after MIN nodes joined, wait this long for more (1s)
  --join-timeout DUR        a round below MIN this long fails the job (600s)
)"},
      {"status",
       "show a job: state, round, world size, restarts and causes, nodes",
       {"--output"},
       {},
       R"(usage: elastrun status JOB [--output text|json]

Shows the job's state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED), the
current round and its phase, world size, restarts, every round with why it
ended and its root-cause failure (node, rank, exit code or signal, message),
the state of each of its nodes, and the last progress a worker reported.

--output json prints one object with these keys (keys are only ever added;
times are RFC 3339 UTC or null):
  job_id, name, state, phase (QUEUED, JOINING, RUNNING, DONE), round,
  world_size, restarts, max_restarts, min_nodes, max_nodes, nproc_per_node,
  command, submit_time, finish_time, finish_reason,
  root_cause    a failure or null: {node_id, round, rank, local_rank,
                exit_code, signal, message, traceback, time}
  nodes         [{node_id, state, group_rank}]
  last_progress {node_id, round, rank, step, metrics, time} or null
  history       [{round, end_reason, counted_as_restart, world_size, nodes,
                failures, succeeded, opened_time, closed_time, ended_time}]
)"},
      {"list",
       "list jobs, oldest first",
       {"--output"},
       {},
       R"(usage: elastrun list [--output text|json]

Lists every job the service knows, oldest first. --output json prints
{"jobs": [...]}, each job with the keys of `status` but history.
)"},
      {"nodes",
       "list the registered node daemons",
       {"--output"},
       {},
       R"(usage: elastrun nodes [--output text|json]

Lists the node daemons (elastrund) the service knows: id, address, state
(ALIVE, LOST), slots and free slots, the jobs holding its slots, labels.
--output json prints {"nodes": [...]} with keys node_id, addr, slots,
free_slots, labels, state, watching, jobs, lost_reason, registered_time,
lease_expiry.
)"},
      {"cancel",
       "cancel a job; every node stops its workers",
       {"--reason", "--output"},
       {},
       R"(usage: elastrun cancel JOB [--reason TEXT] [--output text|json]

Cancels a job that has not finished: every node stops its workers and the
job ends CANCELLED. Cancelling a finished job changes nothing. Prints the
job's status line (or JSON) afterwards; exits 0 when the call succeeded.
)"},
      {"wait",
       "block until a job ends; exit 0 only if it succeeded",
       {"--timeout", "--poll-interval", "--output"},
       {},
       R"(usage: elastrun wait JOB [--timeout DUR] [--poll-interval DUR] [--output text|json]

Blocks until the job ends, then prints its final status line (or JSON) and
exits 0 if it SUCCEEDED, 1 if it FAILED or was CANCELLED, 5 if --timeout
passed first (default: no timeout). Polls the service every --poll-interval
(default 250ms); a service that stays unreachable for 60s exits 3.
)"},
      {"logs",
       "print a job's worker output (-f: follow until the job ends)",
       {"--rank"},
       {"-f", "--follow"},
       R"(usage: elastrun logs JOB [-f] [--rank R]

Prints the worker output the node daemons forwarded to the service, every
line prefixed [rankN]: (with --rank R: only that rank, unprefixed). With -f,
keeps printing new lines until the job has ended. The service keeps the
newest 8 MiB per job in memory; the complete logs stay on each node under
the daemon's --log-dir (default /tmp/elastrund-NODE_ID), as
LOG_DIR/JOB/attempt_ROUND/LOCAL_RANK/{stdout,stderr}.log.
)"},
  };
  return *commands;
}

const CommandInfo* FindCommand(const std::string& name) {
  for (const CommandInfo& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--token-file %s: cannot read: %s", path, std::strerror(errno)));
  }
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--token-file %s is empty", path));
  }
  return token;
}

// Parses flags (anywhere before "--"; "--flag=value" or "--flag value"),
// positionals, and the words after "--". Sets *help for -h/--help.
absl::StatusOr<ParsedArgs> Parse(const CommandInfo& info,
                                 const std::vector<std::string>& args,
                                 const CliContext& ctx, bool* help) {
  static const std::vector<std::string> kServiceFlags = {"--rendezvous", "--token",
                                                         "--token-file", "--rpc-timeout"};
  ParsedArgs a;
  a.command = info.name;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      if (std::string(info.name) != "submit") {
        return absl::InvalidArgumentError("unexpected \"--\"");
      }
      a.program.assign(args.begin() + i + 1, args.end());
      if (a.program.empty()) {
        return absl::InvalidArgumentError(
            "\"--\" must be followed by the program to run");
      }
      break;
    }
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return a;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      a.positional.push_back(arg);
      continue;
    }
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    // torchrun spells flags with dashes or underscores; accept both.
    if (absl::StartsWith(arg, "--")) std::replace(arg.begin() + 2, arg.end(), '_', '-');
    const bool service = Contains(kServiceFlags, arg);
    if (Contains(info.bool_flags, arg)) {
      if (has_value)
        return absl::InvalidArgumentError(absl::StrCat(arg, " takes no value"));
      a.flags[arg].push_back("");
      continue;
    }
    if (!service && !Contains(info.value_flags, arg)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unknown flag \"%s\" (see elastrun %s --help)", arg, info.name));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(arg + " needs a value");
      value = args[++i];
    }
    a.flags[arg].push_back(value);
  }

  // Service flags, then the environment, then the defaults.
  auto env = [&](const char* name) { return ctx.env ? ctx.env(name) : std::nullopt; };
  if (a.Has("--rendezvous")) {
    a.service.address = a.Last("--rendezvous");
  } else if (auto v = env("ELASTRUN_RENDEZVOUS"); v && !v->empty()) {
    a.service.address = *v;
  }
  if (a.service.address.empty())
    return absl::InvalidArgumentError("--rendezvous is empty");
  if (a.Has("--token") && a.Has("--token-file")) {
    return absl::InvalidArgumentError("give --token or --token-file, not both");
  }
  if (a.Has("--token-file")) {
    absl::StatusOr<std::string> token = ReadTokenFile(a.Last("--token-file"));
    if (!token.ok()) return token.status();
    a.service.token = *token;
  } else if (a.Has("--token")) {
    a.service.token = a.Last("--token");
  } else if (auto v = env("ELASTRUN_TOKEN"); v) {
    a.service.token = *v;
  }
  if (a.Has("--rpc-timeout")) {
    absl::StatusOr<absl::Duration> d =
        ParseDuration(a.Last("--rpc-timeout"), "--rpc-timeout");
    if (!d.ok()) return d.status();
    if (*d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--rpc-timeout must be greater than 0");
    }
    a.service.rpc_timeout = *d;
  }
  if (a.Has("--output")) {
    const std::string output = a.Last("--output");
    if (output != "text" && output != "json") {
      return absl::InvalidArgumentError(
          absl::StrFormat("--output: \"%s\" is not text or json", output));
    }
    a.json = output == "json";
  }
  return a;
}

}  // namespace

namespace internal {

std::string ParsedArgs::Last(const std::string& flag) const {
  auto it = flags.find(flag);
  return it == flags.end() || it->second.empty() ? "" : it->second.back();
}

}  // namespace internal

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitFailed;
  }
}

CliContext RealCliContext() {
  CliContext ctx;
  ctx.env = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  ctx.connect = [](const ServiceOptions& o) { return NewGrpcJobsClient(o); };
  ctx.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  ctx.out = &std::cout;
  ctx.err = &std::cerr;
  return ctx;
}

bool IsJobCommand(const std::string& command) { return FindCommand(command) != nullptr; }

std::string JobCommandsHelp() {
  std::string out;
  for (const CommandInfo& c : Commands()) {
    absl::StrAppendFormat(&out, "  %-9s %s\n", c.name, c.summary);
  }
  absl::StrAppend(&out,
                  "\nJob commands find the service from --rendezvous HOST:PORT or "
                  "$ELASTRUN_RENDEZVOUS\n(default 127.0.0.1:29400) and send "
                  "--token-file, --token or $ELASTRUN_TOKEN.\n\n",
                  kExitCodesHelp);
  return out;
}

int RunJobCommand(const std::string& command, const std::vector<std::string>& args,
                  const CliContext& ctx) {
  const CommandInfo* info = FindCommand(command);
  if (info == nullptr) {
    *ctx.err << "elastrun: unknown command '" << command << "'\n";
    return kExitUsage;
  }
  bool help = false;
  absl::StatusOr<ParsedArgs> a = Parse(*info, args, ctx, &help);
  if (help) {
    *ctx.out << info->help << "\n" << kServiceHelp << "\n" << kExitCodesHelp;
    return kExitOk;
  }
  if (!a.ok()) {
    *ctx.err << "elastrun " << command << ": " << a.status().message()
             << "\n(see elastrun " << command << " --help)\n";
    return kExitUsage;
  }
  if (command == "submit") return internal::Submit(*a, ctx);
  if (command == "status") return internal::Status(*a, ctx);
  if (command == "list") return internal::List(*a, ctx);
  if (command == "nodes") return internal::Nodes(*a, ctx);
  if (command == "cancel") return internal::Cancel(*a, ctx);
  if (command == "wait") return internal::Wait(*a, ctx);
  return internal::Logs(*a, ctx);
}

}  // namespace elastrun::launcher
