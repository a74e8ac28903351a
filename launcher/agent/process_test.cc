// The real ProcessControl's user and folder switch: a root launcher runs a
// child as another user; failures name the user or the folder.
#include "launcher/agent/process.h"

#include <poll.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

// Everything the child writes to stdout, once it exited; and its status.
std::string OutputOf(const SpawnedProcess& p, int* status) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd pfd{p.stdout_fd, POLLIN, 0};
    if (poll(&pfd, 1, 60000) <= 0) break;  // generous: nothing came in a minute
    const ssize_t n = read(p.stdout_fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(p.stdout_fd);
  close(p.stderr_fd);
  waitpid(p.pid, status, 0);
  return out;
}

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = {"PATH=/usr/bin:/bin"};
  return spec;
}

TEST(ProcessControlTest, RootRunsTheChildAsAnotherUserWithItsGroups) {
  if (geteuid() != 0 || getpwuid(65534) == nullptr) {
    GTEST_SKIP() << "needs root and the user nobody (uid 65534)";
  }
  std::unique_ptr<ProcessControl> processes = NewPosixProcessControl();
  ProcessSpec spec = Shell("id -u; id -g; id -G; pwd");
  spec.run_as = ProcessCredentials{65534, 65534, {65534, 4242}};
  spec.cwd = "/";
  absl::StatusOr<SpawnedProcess> p = processes->Spawn(spec);
  ASSERT_TRUE(p.ok()) << p.status();
  int status = 0;
  EXPECT_EQ(OutputOf(*p, &status), "65534\n65534\n65534 4242\n/\n");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ProcessControlTest, MissingWorkingFolderIsNamed) {
  std::unique_ptr<ProcessControl> processes = NewPosixProcessControl();
  ProcessSpec spec = Shell("true");
  spec.cwd = "/nonexistent/project";
  absl::StatusOr<SpawnedProcess> p = processes->Spawn(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("in working folder '/nonexistent/project': No such file"));
}

TEST(ProcessControlTest, NonRootCannotSwitchUserAndSaysWhich) {
  if (geteuid() == 0) GTEST_SKIP() << "as root the switch succeeds (see above)";
  std::unique_ptr<ProcessControl> processes = NewPosixProcessControl();
  ProcessSpec spec = Shell("true");
  spec.run_as = ProcessCredentials{geteuid() + 1, getegid(), {}};
  absl::StatusOr<SpawnedProcess> p = processes->Spawn(spec);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("as uid "));
}

}  // namespace
}  // namespace elastrun::launcher
