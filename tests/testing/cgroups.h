// For the tests that run the launcher on the real cgroup file system
// (they link elastrun_agent). Header-only.
#ifndef ELASTRUN_TESTS_TESTING_CGROUPS_H_
#define ELASTRUN_TESTS_TESTING_CGROUPS_H_

#include <unistd.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "launcher/agent/cgroup.h"

namespace elastrun::testing {

// The cgroup this process runs in, when cgroup v2 is usable here (a
// launcher's cgroup can be made beside it); else why not, for the test's
// skip message.
inline absl::StatusOr<std::string> UsableOwnCgroup() {
  auto probe =
      launcher::LauncherCgroup::Create(absl::StrCat("test-probe-", getpid()), false);
  if (!probe.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup v2 is not usable here (", probe.status().message(), ")"));
  }
  return launcher::FindOwnCgroup();
}

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_CGROUPS_H_
