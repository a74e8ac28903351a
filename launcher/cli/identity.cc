#include "launcher/cli/identity.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "launcher/daemon/cred_socket.h"

namespace elastrun::launcher {

absl::Status ResolveIdentity(const auth::EnvLookup& env,
                             const std::string& token_file_flag,
                             const std::string& token_flag, uid_t euid,
                             ServiceOptions& service) {
  auto get = [&](const char* name) -> std::string {
    std::optional<std::string> v = env ? env(name) : std::nullopt;
    return v ? *v : "";
  };
  std::string file = token_file_flag;
  const char* from = "--token-file";
  if (file.empty()) {
    if (!token_flag.empty()) {
      service.token = token_flag;
      return absl::OkStatus();
    }
    if (std::string token = get("ELASTRUN_TOKEN"); !token.empty()) {
      service.token = token;
      return absl::OkStatus();
    }
    file = get("ELASTRUN_TOKEN_FILE");
    from = "$ELASTRUN_TOKEN_FILE";
  }
  if (!file.empty()) {
    absl::StatusOr<std::string> token = auth::ReadTokenFile(file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(from, ": ", token.status().message()));
    }
    service.token = *token;
    return absl::OkStatus();
  }
  service.token_file = auth::DefaultTokenFile(env, euid);
  service.cred_socket = get("ELASTRUN_CRED_SOCKET");
  if (service.cred_socket.empty()) {
    // The root daemon serves every user of the node; a user's own daemon
    // only where there is none.
    service.cred_socket = DefaultCredSocket(env, 0);
    if (euid != 0 && access(service.cred_socket.c_str(), F_OK) != 0) {
      service.cred_socket = DefaultCredSocket(env, euid);
    }
  }
  return absl::OkStatus();
}

}  // namespace elastrun::launcher
