// The rendezvous flags of `elastrun run` (run_options.h): the endpoint,
// --rdzv-conf, and which form the flags make (this node alone, several
// nodes with the c10d or the static backend). Parsing helpers of
// run_options.cc, in a file of their own.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_RDZV_OPTIONS_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_RDZV_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// "SHOWN is ignored: WHY", a line of RunOptions::warnings.
std::string IgnoredWarning(const std::string& shown, const std::string& why);

// --rdzv-endpoint HOST[:PORT] (`shown`: the flag or PET_ variable, for
// messages): sets rdzv_endpoint to HOST:PORT (port 29400 when not given)
// and endpoint_is_this_host. InvalidArgument for a bad HOST:PORT.
absl::Status ParseRdzvEndpoint(const std::string& value, const std::string& shown,
                               const HostCheck& is_this_host, RunOptions& o);

// --rdzv-conf K=V,... into rdzv_conf (run_options.h's RendezvousConf).
// InvalidArgument naming the key for a bad value or an item without '=';
// an unknown key adds a warning.
absl::Status ParseRdzvConf(const std::string& value, const std::string& shown,
                           RunOptions& o);

// Whether the flags parsed so far make this node run alone: --nnodes 1 and
// no endpoint on another host.
bool IsOneNode(const RunOptions& o);

// Once every flag is in: sets `multinode` and checks what the form needs
// (several nodes: an endpoint, or the static backend's fixed --nnodes N,
// --node-rank and master address; one node: --node-rank 0 at most).
// InvalidArgument saying what is missing or wrong.
absl::Status CheckNodesForm(RunOptions& o, const HostCheck& is_this_host);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_RDZV_OPTIONS_H_
