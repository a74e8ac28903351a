// The rendezvous of `elastrun run`'s multi-node form: the node whose
// address --rdzv-endpoint names hosts the real service (RendezvousServer:
// the Coordinator, leases, rounds, restarts, root cause) in its own
// process, in memory, for this one run, as torchrun's c10d backend hosts
// its store on that node. Every node, the host too, then takes part
// through that service as an elastrund would (run_multinode.h). With the
// elastrun backend no node hosts it: the run is a job of a service that
// runs apart.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_HOST_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_HOST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "elastrun/v1/types.pb.h"
#include "launcher/cli/run_options.h"
#include "rendezvous/server.h"

namespace elastrun::launcher {

// The rendezvous token: the file of --rdzv-conf token_file, else
// $ELASTRUN_TOKEN_FILE's, else $ELASTRUN_TOKEN, else one derived from the
// run id (`*derived` set): then whoever reaches the endpoint and knows the
// id may join, as with torchrun. InvalidArgument naming the file or
// variable when it cannot be read or is empty.
absl::StatusOr<std::string> RendezvousToken(const RunOptions& options,
                                            const EnvLookup& env, bool* derived);

// The embedded service's settings: listening on a loopback endpoint, else
// on every address of the endpoint's port, state in
// memory, leases of keep_alive_interval x keep_alive_max_attempt, lost
// nodes forgotten after a minute.
rendezvous::ServerOptions EmbeddedServerOptions(const RunOptions& options,
                                                const std::string& token);

// The pool of run `run_id`'s nodes at a running service (the elastrun
// backend), also its SubmitRequest.request_id: "run.<run id>", or for a run
// id the service does not take as a name, "run.<16 hex digits>" of it.
std::string RunPool(const std::string& run_id);

// The run as a job of the embedded service (or, with the elastrun backend,
// of the running one, in RunPool's pool): the nodes, workers, restarts
// and timeouts of the flags; `argv` the host's program (every node runs
// its own command line: run_multinode.cc). Waits for nodes: the others
// register after the host.
v1::JobSpec MultinodeJobSpec(const RunOptions& options, int nproc,
                             const std::vector<std::string>& argv);

// Starts the service here when this node hosts the rendezvous: is_host=1,
// or, without is_host, when the endpoint is this node and its port is
// free (the first node to bind it hosts; the others find it taken). Null
// (OK) when another node hosts it. Errors: the service's (with is_host=1, a
// port that cannot be bound).
absl::StatusOr<std::unique_ptr<rendezvous::RendezvousServer>> MaybeHostRendezvous(
    const RunOptions& options, const std::string& token);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_HOST_H_
