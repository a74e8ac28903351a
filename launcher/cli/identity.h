// How the job commands say who is calling (common/auth.h): the cluster
// token when one is named or readable, else a credential for this user from
// the node's elastrund.
#ifndef ELASTRUN_LAUNCHER_CLI_IDENTITY_H_
#define ELASTRUN_LAUNCHER_CLI_IDENTITY_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "common/auth.h"
#include "launcher/cli/client.h"

namespace elastrun::launcher {

// Fills service.token, or service.token_file and service.cred_socket.
// A token named by --token, --token-file, $ELASTRUN_TOKEN or
// $ELASTRUN_TOKEN_FILE (auth::NamedToken) is read now: InvalidArgument naming
// the source when the file cannot be used (missing, a symlink, another
// user's, open to group or others). Otherwise the default token file
// (auth::DefaultTokenFile for `euid`) and the credential socket
// ($ELASTRUN_CRED_SOCKET, else the root daemon's, else for a user without
// one their own daemon's) are left for the client to try at its first call:
// this user may not be allowed to read the token, and that is no error.
absl::Status ResolveIdentity(const auth::EnvLookup& env,
                             const std::string& token_file_flag,
                             const std::string& token_flag, uid_t euid,
                             ServiceOptions& service);

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_CLI_IDENTITY_H_
