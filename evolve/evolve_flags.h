// The flags of `elastrun evolve` (CLI11, common/flags.h's layout) and their
// check into EvolveOptions. launcher/cli/cli.cc parses the command with
// these, as it parses `run` alone.
#ifndef ELASTRUN_EVOLVE_EVOLVE_FLAGS_H_
#define ELASTRUN_EVOLVE_EVOLVE_FLAGS_H_

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "evolve/evolve_run.h"

namespace elastrun::evolve {

// `elastrun evolve --help`: usage and description, and its footer.
extern const char kEvolveIntro[];
extern const char kEvolveFooter[];

// The raw values of the flags, bound by AddEvolveFlags.
struct EvolveFlags {
  EvolveOptions options;
  std::vector<std::string> fitness;  // COLUMN=WEIGHT, repeatable
  std::string output = "text";       // --output text|json
};

// Adds every flag of `elastrun evolve` to `app`, bound to `flags` (which
// must outlive the parse).
void AddEvolveFlags(CLI::App* app, EvolveFlags* flags);

// The options once parsed, with the PROGRAM ARGS after "--". InvalidArgument
// naming the flag: a count out of range, a --fitness that is not
// COLUMN=WEIGHT, no program. `cluster`: a service is configured (--nnodes
// above 1 needs one).
absl::StatusOr<EvolveOptions> EvolveOptionsFrom(EvolveFlags flags,
                                                std::vector<std::string> program,
                                                bool cluster);

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_FLAGS_H_
