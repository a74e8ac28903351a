// What the user reads when a run fails: the root cause (rank, exit code or
// signal, the worker's own error message and traceback from its error file)
// and the other failures, in the spirit of torchrun's ChildFailedError.
#ifndef ELASTRUN_LAUNCHER_PROTOCOL_FAILURE_H_
#define ELASTRUN_LAUNCHER_PROTOCOL_FAILURE_H_

#include <string>

#include "launcher/agent/agent.h"
#include "rendezvous/core.h"

namespace elastrun::launcher {

// The rendezvous failure report for a worker exit of the attempt whose log
// folder is `attempt_dir`: the exit plus message and traceback from the
// worker's error file when it wrote one.
rendezvous::Failure MakeFailure(const std::string& node, int64_t round,
                                const WorkerExit& exit, const std::string& attempt_dir);

// The report for the workers of `node` that never started in `round`, with
// exit code 127 as a shell gives: `cannot_start` when restarting cannot help
// (the program is missing or not executable, no log folder; the core then
// fails the job at once), false when a later round may do better (no free
// slots on the node now).
rendezvous::Failure NotStartedFailure(const std::string& node, int64_t round,
                                      std::string message, bool cannot_start);

// torchrun's root-cause block (its ChildFailedError's layout), one layout
// for every form: `elastrun run` on one node, its multi-node form, and
// `elastrun wait` of a failed job:
//   Root cause (first observed failure):
//     time       : 2026-11-27 20:30:33.048 UTC
//     host       : NODE
//     rank       : 1 (local_rank: 1)
//     exit       : exit code 3
//     error_file : PATH | <N/A> (the worker wrote none)   (or hang : ...)
//     message    : ...       (when the worker wrote one)
//     traceback  :           (indented, when it wrote one)
//     logs       : FOLDER
// for failure `f` of a worker on `host` whose attempt's log folder there is
// `attempt_dir`.
std::string FormatRootCause(const rendezvous::Failure& f, const std::string& host,
                            const std::string& attempt_dir);

// The multi-line summary of a failed run.
std::string FormatFailureSummary(const std::string& run_id, const std::string& node,
                                 const rendezvous::RendezvousCore& core,
                                 const AttemptOutcome& last_attempt,
                                 const std::string& attempt_dir);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_PROTOCOL_FAILURE_H_
