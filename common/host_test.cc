#include "common/host.h"

#include <stdlib.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace elastrun {
namespace {

TEST(HostTest, HostnameIsTheKernelsName) {
  char name[256] = {0};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(Hostname(), name[0] != '\0' ? std::string(name) : "localhost");
}

TEST(HostTest, GetEnvTellsUnsetFromEmpty) {
  unsetenv("ELASTRUN_HOST_TEST_VAR");
  EXPECT_EQ(GetEnv("ELASTRUN_HOST_TEST_VAR"), std::nullopt);
  setenv("ELASTRUN_HOST_TEST_VAR", "", 1);
  EXPECT_EQ(GetEnv("ELASTRUN_HOST_TEST_VAR"), "");
  setenv("ELASTRUN_HOST_TEST_VAR", "a=b", 1);
  EXPECT_EQ(GetEnv("ELASTRUN_HOST_TEST_VAR"), "a=b");
  unsetenv("ELASTRUN_HOST_TEST_VAR");
}

}  // namespace
}  // namespace elastrun
