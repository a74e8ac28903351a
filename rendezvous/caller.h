// Who is calling the service, and what they may do. gRPC-free: the server
// hands over the call's metadata values; the checks are plain functions.
//
// A cluster caller holds the token (daemons; the CLI of a user who can
// read the token file). A user caller presents a credential its node's
// daemon signed (common/auth.h). Daemon-facing RPCs need a cluster caller;
// a job's owner is the user who submitted it; cancelling a job or reading
// its logs needs its owner, uid 0 or a cluster caller.
#ifndef ELASTRUN_RENDEZVOUS_CALLER_H_
#define ELASTRUN_RENDEZVOUS_CALLER_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/auth.h"
#include "elastrun/v1/jobs.pb.h"

namespace elastrun::rendezvous {

struct Caller {
  // Holds the token.
  bool cluster = false;
  // The verified user: a user caller's credential, or the owner a cluster
  // caller stated. Unset for a cluster caller that stated none.
  std::optional<auth::Identity> user;
};

// The values of the call's metadata this needs (absent: nullopt).
struct CallMetadata {
  std::optional<std::string> authorization;  // "Bearer TOKEN"
  std::optional<std::string> credential;     // x-elastrun-credential
  std::optional<std::string> owner;          // auth::kOwnerKey
};

// Who the caller is. `token` empty: every caller is a cluster caller (only
// in-process tests build a server so; elastrun-rendezvous always has a
// token). Unauthenticated, naming what was missing or wrong: no token nor
// credential, a wrong token, a bad or expired credential, a malformed
// stated owner.
absl::StatusOr<Caller> Authenticate(const CallMetadata& md, const std::string& token,
                                    absl::Time now);

// PermissionDenied unless a cluster caller: `rpc` is for daemons.
absl::Status RequireCluster(const Caller& caller, absl::string_view rpc);

// The spec to store for a Submit: its owner replaced by the caller's
// identity (a user caller's own; a cluster caller's stated one, or none).
v1::JobSpec WithOwner(const Caller& caller, v1::JobSpec spec);

// PermissionDenied ("job J belongs to USER (uid U)") unless the caller may
// `action` (e.g. "cancel") the job: a cluster caller, uid 0, or the job's
// owner. A job without an owner (submitted before owners existed) only
// cluster callers and uid 0 may touch.
absl::Status CheckJobAccess(const Caller& caller, const v1::JobStatus& job,
                            absl::string_view action);

// What `caller` may see of a job: for anyone but a cluster caller, uid 0
// or the job's owner, the spec's environment is cleared and env_hidden
// set (an exported environment carries the submitter's secrets).
void RedactForCaller(const Caller& caller, v1::JobStatus* job);

// Whether `node_id` is or was one of the job's nodes: placed now, or in
// the assignment of any closed round.
bool NodeInJob(const v1::JobStatus& job, absl::string_view node_id);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_CALLER_H_
