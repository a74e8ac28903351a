// What each program links, as `ldd` shows it: the node daemon and the CLI
// are clients of the service, so neither carries the service's SQLite, and
// none of the launcher's programs carries LibTorch (they start in
// milliseconds). Guards the split of launcher/ and rendezvous/codec.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace elastrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Ldd(const std::string& binary) {
  const std::string path = testing::BinDir() + "/" + binary;
  absl::StatusOr<testing::RunResult> r = testing::Run({"ldd", path});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return "";
  EXPECT_EQ(r->exit_code, 0) << r->output;
  // Sanity: ldd really listed this program's libraries.
  EXPECT_THAT(r->output, HasSubstr("libc.so"));
  return r->output;
}

TEST(LinkTest, DaemonLinksNoSqliteAndNoTorch) {
  const std::string libs = Ldd("elastrund");
  EXPECT_THAT(libs, Not(HasSubstr("libsqlite3")));
  EXPECT_THAT(libs, Not(HasSubstr("libtorch")));
  EXPECT_THAT(libs, HasSubstr("libgrpc++"));  // it is a gRPC client
}

TEST(LinkTest, CliLinksNoTorch) {
  // `elastrun run`'s multi-node form hosts the rendezvous service in
  // process (its state in memory), so the CLI links the service's library,
  // SQLite included; never LibTorch.
  const std::string libs = Ldd("elastrun");
  EXPECT_THAT(libs, Not(HasSubstr("libtorch")));
  EXPECT_THAT(libs, HasSubstr("libgrpc++"));
}

TEST(LinkTest, ServiceLinksSqlite) {
  // The other side of the split: the state lives with the service.
  EXPECT_THAT(Ldd("elastrun-rendezvous"), HasSubstr("libsqlite3"));
}

}  // namespace
}  // namespace elastrun
