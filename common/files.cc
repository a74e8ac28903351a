#include "common/files.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"

namespace elastrun {

absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string partial = dir.substr(0, i);
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create folder ", partial, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace elastrun
