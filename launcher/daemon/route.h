// Which local address other hosts reach this node at: the address of the
// route to a given peer. Shared by elastrund (--advertise-addr's default)
// and `elastrun run`'s multi-node form (--local-addr's default).
#ifndef ELASTRUN_LAUNCHER_DAEMON_ROUTE_H_
#define ELASTRUN_LAUNCHER_DAEMON_ROUTE_H_

#include <string>

#include "absl/status/statusor.h"

namespace elastrun::launcher {

// The local address of the route to host:port (a UDP connect: nothing is
// sent). InvalidArgument when `host` does not resolve, Unavailable when no
// route leads there; `what` names the flag in messages.
absl::StatusOr<std::string> RouteAddress(const std::string& host, int port,
                                         const std::string& what);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_DAEMON_ROUTE_H_
