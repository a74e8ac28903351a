// `elastrun run`: one node, composed in one process from the two pieces the
// multi-node service and daemon reuse — the rendezvous core (rounds, ranks,
// restart accounting, root cause) and the agent (processes).
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_H_

#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// Runs the workers until they succeed, fail past --max-restarts, or the
// launcher is signalled. Returns the process exit code: 0 on success, the
// failing worker's own code (128+signal when killed) otherwise, 128+signal
// when the launcher itself was stopped, 2 for a usage error.
// Prints progress and the root-cause summary to stderr.
int RunStandalone(const RunOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_H_
