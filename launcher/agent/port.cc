#include "launcher/agent/port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

namespace elastrun::launcher {
namespace {

// Whether `port` can be bound on the wildcard address of `family`.
bool CanBind(int family, int port) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return family == AF_INET6;  // no IPv6 here: nothing to clash with
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (family == AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  close(fd);
  return rc == 0;
}

// The low end of the kernel's ephemeral port range.
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  if (!(f >> low >> high)) low = 32768;
  return low;
}

}  // namespace

absl::StatusOr<int> PickFreePort(const std::set<int>& avoid) {
  int high = EphemeralLow() - 1;
  int low = 20000;
  if (high - low < 1000) {  // an unusual kernel setting: use a fixed band
    low = 10000;
    high = 19999;
  }
  std::random_device rd;
  std::mt19937 gen(rd());
  std::uniform_int_distribution<int> pick(low, high);
  for (int tries = 0; tries < 200; ++tries) {
    int port = pick(gen);
    if (avoid.count(port)) continue;
    if (CanBind(AF_INET, port) && CanBind(AF_INET6, port)) return port;
  }
  return absl::ResourceExhaustedError(
      "no free TCP port found for MASTER_PORT after 200 tries; pass --master-port");
}

bool IsListening(int port) {
  constexpr int kListen = 0x0A;  // TCP_LISTEN in the "st" column
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      // "  sl  local_address rem_address   st ...", addresses as HEX:PORT.
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state)) continue;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port &&
          std::strtol(state.c_str(), nullptr, 16) == kListen) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace elastrun::launcher
