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
  absl::StatusOr<std::string> named = auth::NamedToken(env, token_flag, token_file_flag);
  if (!named.ok()) return named.status();
  if (!named->empty()) {
    service.token = *std::move(named);
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
