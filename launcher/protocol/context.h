// Where this node stands in a closed round of the rendezvous: the bridge
// between the rendezvous core's assignment (group rank, global rank offset,
// master address) and the agent's torch-free AttemptContext. Shared by
// `elastrun run` and elastrund.
#ifndef ELASTRUN_LAUNCHER_PROTOCOL_CONTEXT_H_
#define ELASTRUN_LAUNCHER_PROTOCOL_CONTEXT_H_

#include <string>

#include "launcher/agent/attempt.h"
#include "rendezvous/types.h"

namespace elastrun::launcher {

// Where `node` stands in the closed round `a` (which must include it), with
// logs under `attempt_dir`.
AttemptContext ContextFor(const std::string& run_id, const rendezvous::RoundAssignment& a,
                          const rendezvous::NodeAssignment& node,
                          const std::string& attempt_dir);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_PROTOCOL_CONTEXT_H_
