#include "launcher/cli/this_host.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "common/strings.h"

namespace elastrun::launcher {
namespace {

// "fe80::1%eth0" -> "fe80::1"; "[::1]" -> "::1".
std::string Bare(std::string address) {
  address = address.substr(0, address.find('%'));
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  return address;
}

std::string Numeric(const sockaddr* addr) {
  const socklen_t len = addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  char text[NI_MAXHOST] = {0};
  if (getnameinfo(addr, len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return Bare(text);
}

std::vector<std::string> Resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    std::string address = Numeric(a->ai_addr);
    if (!address.empty()) out.push_back(std::move(address));
  }
  freeaddrinfo(found);
  return out;
}

bool IsLoopbackAddress(const std::string& address) {
  return IsLoopbackHost(address) || address == "::ffff:127.0.0.1" ||
         absl::StartsWith(address, "::ffff:127.");
}

}  // namespace

HostFacts RealHostFacts() {
  HostFacts facts;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) facts.hostname = name;
  ifaddrs* addrs = nullptr;
  if (getifaddrs(&addrs) == 0) {
    for (ifaddrs* a = addrs; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      if (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6) continue;
      std::string address = Numeric(a->ifa_addr);
      if (!address.empty()) facts.addresses.push_back(std::move(address));
    }
    freeifaddrs(addrs);
  }
  facts.resolve = Resolve;
  return facts;
}

bool MatchesThisHost(const std::string& host_text, const HostFacts& facts) {
  const std::string host = Bare(host_text);
  if (host.empty()) return false;
  if (IsLoopbackAddress(host) || host == "localhost") return true;
  const std::string& self = facts.hostname;
  if (!self.empty() && (host == self || host == self.substr(0, self.find('.')))) return true;
  auto mine = [&](const std::string& address) {
    return IsLoopbackAddress(address) ||
           std::find(facts.addresses.begin(), facts.addresses.end(), address) !=
               facts.addresses.end();
  };
  if (mine(host)) return true;
  // A name: this node when it resolves to one of this node's addresses (or,
  // as Debian maps a host's own name to 127.0.1.1, to loopback). A name
  // that resolves to addresses of this node and of others (round-robin DNS)
  // is not ours alone: every node would host.
  if (!facts.resolve) return false;
  const std::vector<std::string> resolved = facts.resolve(host);
  return !resolved.empty() && std::all_of(resolved.begin(), resolved.end(), mine);
}

bool IsThisHost(const std::string& host) { return MatchesThisHost(host, RealHostFacts()); }

}  // namespace elastrun::launcher
