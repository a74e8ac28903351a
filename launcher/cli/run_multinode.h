// `elastrun run`'s multi-node form, torchrun's: the same command on every
// node (--nnodes MIN:MAX --rdzv-endpoint HOST:PORT --rdzv-id ID). One node
// hosts the rendezvous service in-process (run_host.h); every node, the
// host too, takes part through it as an elastrund does, with the daemon's
// own pieces in-process (Daemon, DaemonSession, AgentRunner): rounds,
// elastic re-forming within MIN:MAX, restarts counted per run, the root
// cause. Workers run this node's own command line and print here with
// [rankN]: prefixes. With the static backend each node asks for its
// --node-rank as its group rank.
//
// When the host is lost, the other nodes stop their workers and exit
// non-zero naming the endpoint: the rendezvous state lived there.
#ifndef ELASTRUN_LAUNCHER_CLI_RUN_MULTINODE_H_
#define ELASTRUN_LAUNCHER_CLI_RUN_MULTINODE_H_

#include "launcher/cli/run_options.h"

namespace elastrun::launcher {

// Runs this node's part until the run ends. Returns the process exit code:
// 0 when the run succeeded; when it failed, the root cause's exit code
// (128+signal when killed; 1 when it has none), printed with the cause on
// every node; 1 when the host was lost or the rendezvous refused this
// node; 128+signal when this launcher was stopped; 2 for a usage error.
// `options.multinode` must be set.
int RunMultinode(const RunOptions& options);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_RUN_MULTINODE_H_
