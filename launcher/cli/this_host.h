// Whether a host named in --rdzv-endpoint is this node: the test torchrun's
// c10d backend makes to decide which node hosts the rendezvous.
#ifndef ELASTRUN_LAUNCHER_CLI_THIS_HOST_H_
#define ELASTRUN_LAUNCHER_CLI_THIS_HOST_H_

#include <functional>
#include <string>
#include <vector>

namespace elastrun::launcher {

// What the check needs to know about this node, so tests can give their own.
struct HostFacts {
  // gethostname().
  std::string hostname;
  // Numeric addresses of this node's interfaces ("10.0.0.2", "fe80::1").
  std::vector<std::string> addresses;
  // Numeric addresses a name resolves to (getaddrinfo); empty when it does
  // not resolve.
  std::function<std::vector<std::string>(const std::string&)> resolve;
};

// This node's facts, from the system.
HostFacts RealHostFacts();

// True when `host` (a name or a numeric address) is this node: loopback,
// this node's name (short or fully qualified), one of its addresses, or a
// name that resolves to one of them or to loopback. The last one is what
// Kubernetes' headless Services and Slurm's NodeAddr need: the endpoint is
// "pod-0.service", while the pod calls itself "pod-0".
bool MatchesThisHost(const std::string& host, const HostFacts& facts);

// MatchesThisHost with RealHostFacts(): the HostCheck `elastrun run` uses.
bool IsThisHost(const std::string& host);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_THIS_HOST_H_
