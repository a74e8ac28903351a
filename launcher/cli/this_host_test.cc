// Which node hosts the rendezvous of `elastrun run`'s multi-node form.
// The facts are given (a fake resolver) where the check must see names this
// machine's resolver does not know; the real ones are checked too.
#include "launcher/cli/this_host.h"

#include <unistd.h>

#include <map>

#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

HostFacts PodZero() {
  HostFacts facts;
  facts.hostname = "trainer-0";
  facts.addresses = {"127.0.0.1", "::1", "10.244.1.7", "fe80::a8bb:ccff:fedd:eeff"};
  facts.resolve = [](const std::string& name) -> std::vector<std::string> {
    static const std::map<std::string, std::vector<std::string>> dns = {
        {"trainer-0.trainer", {"10.244.1.7"}},
        {"trainer-1.trainer", {"10.244.2.9"}},
        {"trainer-0.trainer.default.svc.cluster.local", {"10.244.1.7"}},
        {"debian-style-self", {"127.0.1.1"}},
        {"round-robin", {"10.244.1.7", "10.244.2.9"}},
    };
    auto it = dns.find(name);
    return it == dns.end() ? std::vector<std::string>{} : it->second;
  };
  return facts;
}

TEST(ThisHostTest, NamesAndAddressesOfThisNodeAreThisHost) {
  const HostFacts facts = PodZero();
  for (const char* host : {"localhost", "127.0.0.1", "127.0.1.1", "::1", "[::1]", "trainer-0",
                           "10.244.1.7", "fe80::a8bb:ccff:fedd:eeff%eth0"}) {
    EXPECT_TRUE(MatchesThisHost(host, facts)) << host;
  }
}

TEST(ThisHostTest, ANameThatResolvesToThisNodeIsThisHost) {
  // A Kubernetes headless Service's pod name is not the pod's hostname.
  const HostFacts facts = PodZero();
  EXPECT_TRUE(MatchesThisHost("trainer-0.trainer", facts));
  EXPECT_TRUE(MatchesThisHost("trainer-0.trainer.default.svc.cluster.local", facts));
  EXPECT_TRUE(MatchesThisHost("debian-style-self", facts));
}

TEST(ThisHostTest, OtherNodesNamesAndAddressesAreNot) {
  const HostFacts facts = PodZero();
  for (const char* host : {"trainer-1.trainer", "10.244.2.9", "no-such-name", "", "trainer",
                           "round-robin"}) {
    EXPECT_FALSE(MatchesThisHost(host, facts)) << host;
  }
}

TEST(ThisHostTest, ThisMachinesOwnNameAndAddressesAreThisHost) {
  char name[256] = {0};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  EXPECT_TRUE(IsThisHost(name));
  EXPECT_TRUE(IsThisHost("localhost"));
  const HostFacts real = RealHostFacts();
  ASSERT_FALSE(real.addresses.empty());
  for (const std::string& address : real.addresses) EXPECT_TRUE(IsThisHost(address)) << address;
  // TEST-NET-1 (RFC 5737): never a machine's address.
  EXPECT_FALSE(IsThisHost("192.0.2.1"));
}

}  // namespace
}  // namespace elastrun::launcher
