// Choosing MASTER_PORT for an attempt, and seeing when it is served.
#ifndef ELASTRUN_LAUNCHER_AGENT_PORT_H_
#define ELASTRUN_LAUNCHER_AGENT_PORT_H_

#include <set>

#include "absl/status/statusor.h"

namespace elastrun::launcher {

// A TCP port that nothing listens on now, on any address (IPv4 and IPv6).
// Ports come from below the kernel's ephemeral range, which the kernel never
// hands out by itself for outgoing connections, so the port stays free
// between this check and the worker's bind; ports in `avoid` (those of
// earlier attempts, whose sockets may linger) are skipped. This is what
// lets many back-to-back restarts never hit EADDRINUSE.
absl::StatusOr<int> PickFreePort(const std::set<int>& avoid);

// Whether a TCP socket of this network namespace listens on `port` (any
// address, IPv4 or IPv6), from /proc/net/tcp{,6}: it only looks, so a c10d
// store is not disturbed by a probing connection.
bool IsListening(int port);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_PORT_H_
