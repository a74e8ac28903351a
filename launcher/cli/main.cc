// elastrun: the command-line client. `elastrun run` is the single-node
// launcher (torchrun's replacement); the job commands talk to the service.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/cli/cli.h"
#include "launcher/cli/run_options.h"
#include "launcher/cli/run.h"

namespace {

constexpr char kUsage[] = R"(usage: elastrun COMMAND [ARGS...]

Commands:
  run       run a program as an elastic worker group on this node
            (torchrun's flags; see `elastrun run --help`)
)";

constexpr char kUsageEnd[] = R"(
`elastrun COMMAND --help` describes a command.
)";

std::string Usage() {
  return std::string(kUsage) + elastrun::launcher::JobCommandsHelp() + kUsageEnd;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(Usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "run") {
    auto options = elastrun::launcher::ParseRunOptions(
        args, [](const std::string& name) -> std::optional<std::string> {
          const char* v = std::getenv(name.c_str());
          if (v == nullptr) return std::nullopt;
          return std::string(v);
        });
    if (!options.ok()) {
      std::fprintf(stderr, "elastrun run: %s\n", std::string(options.status().message()).c_str());
      return 2;
    }
    if (options->help) {
      std::fputs(elastrun::launcher::RunUsage().c_str(), stdout);
      return 0;
    }
    return elastrun::launcher::RunStandalone(*options);
  }
  if (elastrun::launcher::IsJobCommand(command)) {
    return elastrun::launcher::RunJobCommand(command, args,
                                             elastrun::launcher::RealCliContext());
  }
  std::fprintf(stderr, "elastrun: unknown command '%s'\n\n%s", command.c_str(),
               Usage().c_str());
  return 2;
}
