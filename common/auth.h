// Who may call the service: the cluster token kept in an owner-only file,
// and short-lived user credentials signed with it (munge-like, as Slurm
// does). Torch-free and gRPC-free, shared by the service, the daemon and
// the CLI.
//
// A "cluster" caller holds the token itself (the service's user, root, the
// daemons). Any other local user gets a credential from its node's daemon,
// which learns the user's uid from the kernel (SO_PEERCRED) and signs
//   v1:UID:GID:NAME:EXPIRY:HMAC
// with HMAC-SHA256 keyed by the token over everything before the last ':'.
// The service, holding the token, verifies it; nobody without the token can
// make one, and one made for a uid names that uid only.
#ifndef ELASTRUN_COMMON_AUTH_H_
#define ELASTRUN_COMMON_AUTH_H_

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace elastrun::auth {

// Call metadata (gRPC keys are lower case).
inline constexpr char kAuthorizationKey[] = "authorization";  // "Bearer TOKEN"
inline constexpr char kCredentialKey[] = "x-elastrun-credential";
// Sent by a cluster caller with Submit: the job's owner, "UID:GID:NAME"
// (the CLI sends its own user's).
inline constexpr char kOwnerKey[] = "x-elastrun-owner";

// How long a credential from the daemon is valid.
inline constexpr absl::Duration kCredentialLife = absl::Minutes(5);

// A local user, as the kernel names it.
struct Identity {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string name;  // the user's name, or "uid<N>" when it has none
};

// The calling process's effective identity.
Identity Self();

// The name of `uid` from the password database, else "uid<N>".
std::string UserName(uint32_t uid);

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Where the token file lives when none is named: /var/lib/elastrun/token
// for root (euid 0); else $XDG_STATE_HOME/elastrun/token, else
// $HOME/.local/state/elastrun/token. Empty when neither variable is set.
std::string DefaultTokenFile(const EnvLookup& env, uid_t euid);

// Reads the token in `path` (surrounding whitespace stripped). The file
// must be a regular file (not a symlink) owned by this process's effective
// user, with no access for group or others. Errors name the file and the
// fix: NotFound (missing), PermissionDenied (unreadable: EACCES),
// FailedPrecondition (symlink, not a regular file, another owner, mode open
// to group/others, empty).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The cluster token a caller names, by one rule for every binary (the
// daemon, the CLI, `elastrun run`): the first given of `token_flag`,
// `token_file_flag` (read with ReadTokenFile), $ELASTRUN_TOKEN and
// $ELASTRUN_TOKEN_FILE, surrounding whitespace stripped. Empty when none is
// given (the caller's default applies). InvalidArgument naming the flag
// (`file_flag_name`) or variable when its file cannot be used.
absl::StatusOr<std::string> NamedToken(const EnvLookup& env,
                                       const std::string& token_flag,
                                       const std::string& token_file_flag,
                                       absl::string_view file_flag_name = "--token-file");

// The service's token file: ReadTokenFile, or when `path` does not exist,
// a new one: 32 random bytes as hex, created 0600 (O_CREAT|O_EXCL|
// O_NOFOLLOW) in a folder created 0700 if missing. *created tells which.
absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path, bool* created);

// A signed credential for `who`, valid until `expiry` (whole seconds).
// InvalidArgument for an empty token or a name with ':' or a newline.
absl::StatusOr<std::string> SignCredential(absl::string_view token, const Identity& who,
                                           absl::Time expiry);

// The identity a credential vouches for. Unauthenticated, saying why: not
// a v1 credential, malformed, a bad signature (forged, or signed with
// another token), or expired at `now`.
absl::StatusOr<Identity> VerifyCredential(absl::string_view token,
                                          absl::string_view credential, absl::Time now);

// Compares two secrets in time independent of where they differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace elastrun::auth

#endif  // ELASTRUN_COMMON_AUTH_H_
