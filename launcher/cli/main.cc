// elastrun: the command-line client. `elastrun run` is the single-node
// launcher (torchrun's replacement); the job commands talk to the service.
// The command line is parsed in cli.cc.
#include <string>
#include <vector>

#include "launcher/cli/cli.h"

int main(int argc, char** argv) {
  return elastrun::launcher::RunCli(std::vector<std::string>(argv + 1, argv + argc),
                                    elastrun::launcher::RealCliContext());
}
