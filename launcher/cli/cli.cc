// The command line of `elastrun` (CLI11 through common/flags): the job
// commands' tables (command_table.h) made into CLI11 commands, `help`,
// `--version`, dispatch. The job commands themselves are in commands.cc;
// `run`'s flags in run_options.cc.
#include "launcher/cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/flags.h"
#include "common/strings.h"
#include "common/tls.h"
#include "evolve/evolve_flags.h"
#include "launcher/cli/command_table.h"
#include "launcher/cli/commands.h"
#include "launcher/cli/evolve_cluster.h"
#include "launcher/cli/identity.h"
#include "launcher/cli/run.h"
#include "launcher/cli/run_multinode.h"
#include "launcher/cli/spec.h"

extern char** environ;

namespace elastrun::launcher {
namespace {

using internal::CommandInfo;
using internal::FlagInfo;
using internal::ParsedArgs;

void AddFlag(CLI::App* app, const FlagInfo& f, const std::string& group) {
  const std::string names = flags::WithUnderscores(f.names);
  CLI::Option* opt = f.value[0] == '\0'
                         ? app->add_flag(names, f.help)
                         : app->add_option(names, f.help)->type_name(f.value);
  opt->group(group);
  if (f.repeatable) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void AddJobCommand(CLI::App* app, const CommandInfo& info) {
  CLI::App* sub = flags::AddCommand(app, info.name, info.summary, info.intro,
                                     internal::kExitCodesHelp);
  for (const FlagInfo& f : info.flags) AddFlag(sub, f, "Flags");
  for (const FlagInfo& f : internal::ServiceFlags()) AddFlag(sub, f, "Service flags (every job command)");
  // The JOB id, job file and overrides; not listed among the flags.
  if (info.takes_words) sub->add_option("words")->expected(-1)->group("");
}

// `elastrun evolve`'s flags, with the service flags of the job commands.
void AddEvolveCommandFlags(CLI::App* app, evolve::EvolveFlags* values) {
  AddEvolveFlags(app, values);
  const std::string group = "Service flags (with a service, each individual is a job)";
  for (const FlagInfo& f : internal::ServiceFlags()) {
    if (std::string(f.names) != "--rendezvous") {
      AddFlag(app, f, group);
      continue;
    }
    AddFlag(app,
            FlagInfo{"--rendezvous", "HOST:PORT",
                     "the elastrun-rendezvous service (default\n"
                     "$ELASTRUN_RENDEZVOUS; neither: every individual\n"
                     "runs on this machine)"},
            group);
  }
}

constexpr char kLaunchIntro[] =
    "usage: elastrun launch [--use-env] [elastrun run's flags] PROGRAM ARGS...\n"
    "\n"
    "The legacy launcher's contract (python -m torch.distributed.launch, as in\n"
    "seed 002: --nproc_per_node 7 --master_port 34231 train.py ...): `elastrun\n"
    "run` with every flag and default of it, and each worker given\n"
    "--local_rank=N (its local rank) after its arguments, unless --use_env\n"
    "(--use-env) says the script reads $LOCAL_RANK instead (set either way).\n"
    "Workers whose arguments name their rank start fresh on a restart (no\n"
    "--standby: a standby is started before its rank is known).\n";

// `elastrun run`'s flags and --use-env.
void AddLaunchFlags(CLI::App* app) {
  AddRunFlags(app);
  app->add_flag("--use-env,--use_env",
                "the program reads $LOCAL_RANK: give it no --local_rank=N");
}

// A parsed job command's words and flags (by their first long name).
ParsedArgs FromApp(const CLI::App& sub) {
  ParsedArgs a;
  a.command = sub.get_name();
  for (const CLI::Option* opt : sub.get_options()) {
    if (opt == sub.get_help_ptr() || opt->count() == 0) continue;
    if (opt->get_lnames().empty()) {
      a.positional = opt->results();
    } else {
      a.flags["--" + opt->get_lnames()[0]] = opt->results();
    }
  }
  return a;
}

// The TLS flags, else $ELASTRUN_TLS_*; their files are read and checked
// here, so that a bad one is a usage error before any call.
template <typename Env>
absl::Status FinishTlsFlags(const Env& env, ParsedArgs& a) {
  tls::TlsFiles& t = a.service.tls;
  for (auto [field, flag, var] :
       {std::tuple{&t.ca, "--tls-ca", "ELASTRUN_TLS_CA"},
        std::tuple{&t.cert, "--tls-cert", "ELASTRUN_TLS_CERT"},
        std::tuple{&t.key, "--tls-key", "ELASTRUN_TLS_KEY"},
        std::tuple{&t.server_name, "--tls-server-name", "ELASTRUN_TLS_SERVER_NAME"}}) {
    if (a.Has(flag)) {
      *field = a.Last(flag);
    } else if (auto v = env(var); v) {
      *field = *v;
    }
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      tls::MakeChannelCredentials(t);
  if (!credentials.ok()) return credentials.status();
  a.service.credentials = *std::move(credentials);
  return absl::OkStatus();
}

// Service flags, then the environment, then the defaults; --output.
absl::Status FinishJobFlags(const CliContext& ctx, ParsedArgs& a) {
  auto env = [&](const char* name) { return ctx.env ? ctx.env(name) : std::nullopt; };
  if (a.Has("--rendezvous")) {
    a.service.address = a.Last("--rendezvous");
  } else if (auto v = env("ELASTRUN_RENDEZVOUS"); v && !v->empty()) {
    a.service.address = *v;
  }
  if (a.service.address.empty()) return absl::InvalidArgumentError("--rendezvous is empty");
  if (a.Has("--token") && a.Has("--token-file")) {
    return absl::InvalidArgumentError("give --token or --token-file, not both");
  }
  if (absl::Status st =
          ResolveIdentity(ctx.env, a.Has("--token-file") ? a.Last("--token-file") : "",
                          a.Has("--token") ? a.Last("--token") : "", geteuid(), a.service);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = FinishTlsFlags(env, a); !st.ok()) return st;
  if (a.Has("--rpc-timeout")) {
    absl::StatusOr<absl::Duration> d = ParseDuration(a.Last("--rpc-timeout"), "--rpc-timeout");
    if (!d.ok()) return d.status();
    if (*d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--rpc-timeout must be greater than 0");
    }
    a.service.rpc_timeout = *d;
  }
  if (a.Has("--retry-for")) {
    absl::StatusOr<absl::Duration> d = ParseDuration(a.Last("--retry-for"), "--retry-for");
    if (!d.ok()) return d.status();
    if (*d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--retry-for must not be negative");
    }
    a.service.retry_for = *d;
  }
  if (a.Has("--output")) {
    const std::string output = a.Last("--output");
    if (output != "text" && output != "json") {
      return absl::InvalidArgumentError(
          absl::StrFormat("--output: \"%s\" is not text or json", output));
    }
    a.json = output == "json";
  }
  return absl::OkStatus();
}

// The whole command line: every command, `help`, --version.
struct Cli {
  std::unique_ptr<CLI::App> app;
  CLI::App* run = nullptr;  // for its help: `elastrun run ...` is parsed alone
  CLI::App* help = nullptr;
  std::string help_topic;
  evolve::EvolveFlags evolve_flags;  // for its help: `elastrun evolve ...` is parsed alone
};

std::unique_ptr<Cli> NewCli() {
  auto cli = std::make_unique<Cli>();
  cli->app = flags::NewApp(
      "elastrun", internal::kIntro,
      absl::StrCat(internal::kServiceNote, "\n", internal::kExitCodesHelp, "\n",
                   internal::kMoreHelp));
  cli->run = flags::AddCommand(cli->app.get(), "run",
                               "run a program as an elastic worker group on this node\n"
                               "(torchrun's flags)",
                               kRunIntro, kRunFooter);
  AddRunFlags(cli->run);
  AddLaunchFlags(flags::AddCommand(cli->app.get(), "launch",
                                   "torch.distributed.launch's form of run: each worker gets\n"
                                   "--local_rank=N (unless --use-env)",
                                   kLaunchIntro, kRunFooter));
  AddEvolveCommandFlags(flags::AddCommand(cli->app.get(), "evolve",
                                          "evolve hyperparameters: YOLOv5's genetic algorithm,\n"
                                          "each individual a job (or `elastrun run` here)",
                                          evolve::kEvolveIntro, evolve::kEvolveFooter),
                        &cli->evolve_flags);
  for (const CommandInfo& c : internal::JobCommands()) AddJobCommand(cli->app.get(), c);
  cli->help = flags::AddCommand(cli->app.get(), "help", "describe a command",
                                "usage: elastrun help [COMMAND]\n\n"
                                "Prints the help of COMMAND (as COMMAND --help), or the\n"
                                "list of commands.\n");
  cli->help->add_option("command", cli->help_topic)->group("");
  return cli;
}

// The command called `name`, or null.
const CLI::App* FindCommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// The help text of `app` itself (CLI::App::help would describe the
// subcommand that was parsed, here `help`).
std::string HelpOf(const CLI::App* app) {
  return app->get_formatter()->make_help(app, app->get_name(), CLI::AppFormatMode::Normal);
}

int Usage(const CliContext& ctx, const std::string& where, const std::string& message) {
  *ctx.err << flags::UsageError(where, message);
  return kExitUsage;
}

int Help(const Cli& cli, const CliContext& ctx) {
  if (cli.help_topic.empty()) {
    *ctx.out << HelpOf(cli.app.get());
    return kExitOk;
  }
  const CLI::App* sub = FindCommand(*cli.app, cli.help_topic);
  if (sub == nullptr) {
    return Usage(ctx, "elastrun help", absl::StrCat("unknown command ", cli.help_topic));
  }
  *ctx.out << HelpOf(sub);
  return kExitOk;
}

// `elastrun run ARGS`, parsed alone: in the tree of commands CLI11 would
// hand the words after a "--" to `elastrun` itself, not to `run`.
int Run(const std::vector<std::string>& args, const CliContext& ctx) {
  std::unique_ptr<CLI::App> app =
      flags::NewApp("elastrun run", kRunIntro, kRunFooter, /*version=*/false);
  AddRunFlags(app.get());
  absl::StatusOr<std::vector<std::string>> expanded = ExpandRunAbbreviations(args);
  if (!expanded.ok()) return Usage(ctx, "elastrun run", std::string(expanded.status().message()));
  const flags::Outcome parsed = flags::TryParse(*app, *expanded);
  if (parsed.kind == flags::Outcome::kHelp) {
    *ctx.out << app->help();
    return kExitOk;
  }
  if (parsed.kind != flags::Outcome::kOk) return Usage(ctx, parsed.where, parsed.message);
  absl::StatusOr<RunOptions> options = RunOptionsFrom(*app, ctx.env, ctx.is_this_host);
  if (!options.ok()) return Usage(ctx, "elastrun run", std::string(options.status().message()));
  for (const std::string& w : options->warnings) *ctx.err << "elastrun run: warning: " << w << "\n";
  return ctx.run(*options);
}

// `elastrun evolve [FLAGS] -- PROGRAM ARGS`, parsed alone as `run` is. A
// service given by --rendezvous or $ELASTRUN_RENDEZVOUS makes each
// individual a job of it.
int Evolve(const std::vector<std::string>& args, const CliContext& ctx) {
  std::unique_ptr<CLI::App> app = flags::NewApp("elastrun evolve", evolve::kEvolveIntro,
                                                evolve::kEvolveFooter, /*version=*/false);
  evolve::EvolveFlags values;
  AddEvolveCommandFlags(app.get(), &values);
  std::vector<std::string> words = args, program;
  if (auto dash = std::find(words.begin(), words.end(), "--"); dash != words.end()) {
    program.assign(dash + 1, words.end());
    words.erase(dash, words.end());
  }
  const flags::Outcome parsed = flags::TryParse(*app, words);
  if (parsed.kind == flags::Outcome::kHelp) {
    *ctx.out << app->help();
    return kExitOk;
  }
  if (parsed.kind != flags::Outcome::kOk) return Usage(ctx, parsed.where, parsed.message);
  ParsedArgs a = FromApp(*app);
  a.command = "evolve";
  std::optional<std::string> env_service = ctx.env ? ctx.env("ELASTRUN_RENDEZVOUS") : std::nullopt;
  const bool cluster = a.Has("--rendezvous") || (env_service && !env_service->empty());
  absl::StatusOr<evolve::EvolveOptions> options =
      evolve::EvolveOptionsFrom(std::move(values), std::move(program), cluster);
  if (!options.ok()) return Usage(ctx, "elastrun evolve", std::string(options.status().message()));
  if (cluster) {
    if (absl::Status st = FinishJobFlags(ctx, a); !st.ok()) {
      return Usage(ctx, "elastrun evolve", std::string(st.message()));
    }
    v1::JobSpec base = DefaultJobSpec();
    const std::vector<std::string> nodes = absl::StrSplit(options->nnodes, ':');
    base.set_min_nodes(std::stoi(nodes.front()));
    base.set_max_nodes(std::stoi(nodes.back()));
    base.set_nproc_per_node(options->nproc_per_node);
    base.set_max_restarts(options->max_restarts);
    // As `submit`: the workers run where evolve stands, with its environment.
    if (absl::Status st = ApplyExport(
            "ALL", ctx.environment ? ctx.environment() : std::vector<std::string>(), &base);
        !st.ok()) {
      return Usage(ctx, "elastrun evolve", std::string(st.message()));
    }
    if (ctx.cwd) base.set_working_dir(ctx.cwd());
    options->cluster = [service = a.service, base, connect = ctx.connect](
                           const evolve::EvolveOptions& o)
        -> absl::StatusOr<std::unique_ptr<evolve::TrialBackend>> {
      EvolveClusterOptions c;
      c.client = connect(service);
      c.base = base;
      c.output_dir = o.output_dir;
      c.retry_for = service.retry_for;
      return NewClusterBackend(std::move(c));
    };
  }
  return ctx.evolve(*options);
}

int Dispatch(const ParsedArgs& a, const CliContext& ctx) {
  const std::string& c = a.command;
  if (c == "submit") return internal::Submit(a, ctx);
  if (c == "status") return internal::Status(a, ctx);
  if (c == "list") return internal::List(a, ctx);
  if (c == "nodes") return internal::Nodes(a, ctx);
  if (c == "cancel") return internal::Cancel(a, ctx);
  if (c == "wait") return internal::Wait(a, ctx);
  if (c == "events") return internal::Events(a, ctx);
  return internal::Logs(a, ctx);
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
  ctx.environment = [] {
    std::vector<std::string> all;
    for (char** e = environ; *e != nullptr; ++e) all.emplace_back(*e);
    return all;
  };
  ctx.cwd = []() -> std::string {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::current_path(ec);
    return ec ? std::string() : p.string();
  };
  ctx.connect = [](const ServiceOptions& o) { return NewGrpcJobsClient(o); };
  ctx.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  ctx.out = &std::cout;
  ctx.err = &std::cerr;
  ctx.run = [](const RunOptions& o) { return o.multinode ? RunMultinode(o) : RunStandalone(o); };
  ctx.evolve = [](const evolve::EvolveOptions& o) {
    return evolve::RunEvolve(o, std::cout, std::cerr);
  };
  return ctx;
}

int RunCli(const std::vector<std::string>& args, const CliContext& ctx) {
  std::unique_ptr<Cli> cli = NewCli();
  if (args.empty()) {
    *ctx.err << HelpOf(cli->app.get());
    return kExitUsage;
  }
  if (args[0].empty() || (args[0][0] != '-' && !FindCommand(*cli->app, args[0]))) {
    return Usage(ctx, "elastrun", absl::StrCat("unknown command ", args[0]));
  }
  // `help COMMAND`: CLI11 would take COMMAND for that command itself.
  if (args[0] == "help" && args.size() > 1 && !absl::StartsWith(args[1], "-")) {
    if (args.size() > 2) {
      return Usage(ctx, "elastrun help", absl::StrCat("unexpected argument ", args[2]));
    }
    cli->help_topic = args[1];
    return Help(*cli, ctx);
  }
  if (args[0] == "run") return Run(std::vector<std::string>(args.begin() + 1, args.end()), ctx);
  if (args[0] == "launch") {
    absl::StatusOr<std::vector<std::string>> words =
        LegacyLaunchArgs(std::vector<std::string>(args.begin() + 1, args.end()));
    if (!words.ok()) return Usage(ctx, "elastrun launch", std::string(words.status().message()));
    for (const std::string& w : *words) {
      if (w.empty() || w[0] != '-' || w == "--") break;  // the program's own words
      if (w == "-h" || w == "--help") {
        *ctx.out << HelpOf(FindCommand(*cli->app, "launch"));
        return kExitOk;
      }
    }
    return Run(*words, ctx);
  }
  if (args[0] == "evolve") {
    return Evolve(std::vector<std::string>(args.begin() + 1, args.end()), ctx);
  }
  // submit: the words after "--" are the program's, flags or not.
  std::vector<std::string> words = args, program;
  if (args[0] == "submit") {
    if (auto dash = std::find(words.begin(), words.end(), "--"); dash != words.end()) {
      program.assign(dash + 1, words.end());
      words.erase(dash, words.end());
      if (program.empty()) {
        return Usage(ctx, "elastrun submit", "\"--\" must be followed by the program to run");
      }
    }
  }
  const flags::Outcome parsed = flags::TryParse(*cli->app, words);
  switch (parsed.kind) {
    case flags::Outcome::kHelp:
      *ctx.out << cli->app->help();  // of the command asked about
      return kExitOk;
    case flags::Outcome::kVersion:
      *ctx.out << parsed.message << "\n";
      return kExitOk;
    case flags::Outcome::kError:
      return Usage(ctx, parsed.where, parsed.message);
    case flags::Outcome::kOk:
      break;
  }
  if (cli->help->parsed() > 0) return Help(*cli, ctx);
  std::vector<CLI::App*> chosen = cli->app->get_subcommands();
  if (chosen.empty()) return Usage(ctx, "elastrun", "no command given");
  ParsedArgs a = FromApp(*chosen[0]);
  a.program = std::move(program);
  if (absl::Status st = FinishJobFlags(ctx, a); !st.ok()) {
    return Usage(ctx, "elastrun " + a.command, std::string(st.message()));
  }
  return Dispatch(a, ctx);
}

}  // namespace elastrun::launcher
