#include "rendezvous/caller.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace elastrun::rendezvous {
namespace {

absl::StatusOr<auth::Identity> ParseOwner(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(':', 2));
  auth::Identity who;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &who.uid) ||
      !absl::SimpleAtoi(parts[1], &who.gid) || parts[2].empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(auth::kOwnerKey, ": \"", text, "\" is not UID:GID:NAME"));
  }
  who.name = std::string(parts[2]);
  return who;
}

std::string OwnerText(const v1::JobOwner& owner) {
  return absl::StrFormat("%s (uid %d)", owner.user().empty() ? "?" : owner.user(),
                         owner.uid());
}

}  // namespace

absl::StatusOr<Caller> Authenticate(const CallMetadata& md, const std::string& token,
                                    absl::Time now) {
  Caller caller;
  if (token.empty()) {
    caller.cluster = true;
  } else if (md.authorization) {
    absl::string_view given = *md.authorization;
    if (!absl::ConsumePrefix(&given, "Bearer ") ||
        !auth::ConstantTimeEquals(given, token)) {
      return absl::UnauthenticatedError(
          "wrong token in \"authorization: Bearer <token>\"");
    }
    caller.cluster = true;
  } else if (md.credential) {
    absl::StatusOr<auth::Identity> who =
        auth::VerifyCredential(token, *md.credential, now);
    if (!who.ok()) return who.status();
    caller.user = *std::move(who);
    return caller;
  } else {
    return absl::UnauthenticatedError(
        "no \"authorization: Bearer <token>\" and no x-elastrun-credential: the service "
        "accepts only callers it can identify (the cluster token, or a credential from "
        "the node's elastrund)");
  }
  if (md.owner) {
    absl::StatusOr<auth::Identity> who = ParseOwner(*md.owner);
    if (!who.ok()) return who.status();
    caller.user = *std::move(who);
  }
  return caller;
}

absl::Status RequireCluster(const Caller& caller, absl::string_view rpc) {
  if (caller.cluster) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, " is for node daemons holding the cluster token, not for user credentials"));
}

v1::JobSpec WithOwner(const Caller& caller, v1::JobSpec spec) {
  spec.clear_owner();
  if (caller.user) {
    v1::JobOwner* owner = spec.mutable_owner();
    owner->set_uid(caller.user->uid);
    owner->set_gid(caller.user->gid);
    owner->set_user(caller.user->name);
  }
  return spec;
}

absl::Status CheckJobAccess(const Caller& caller, const v1::JobStatus& job,
                            absl::string_view action) {
  if (caller.cluster) return absl::OkStatus();
  if (caller.user && caller.user->uid == 0) return absl::OkStatus();
  if (!job.spec().has_owner()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot %s job %s: it has no recorded owner (submitted before owners were kept); "
        "only root or a holder of the cluster token may",
        action, job.job_id()));
  }
  if (caller.user && caller.user->uid == job.spec().owner().uid())
    return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "cannot %s job %s: job %s belongs to %s; only its owner or root may", action,
      job.job_id(), job.job_id(), OwnerText(job.spec().owner())));
}

void RedactForCaller(const Caller& caller, v1::JobStatus* job) {
  if (CheckJobAccess(caller, *job, "read").ok()) return;
  v1::JobSpec* spec = job->mutable_spec();
  if (spec->env().empty()) return;
  spec->mutable_env()->clear();
  spec->set_env_hidden(true);
}

bool NodeInJob(const v1::JobStatus& job, absl::string_view node_id) {
  for (const v1::JobNode& n : job.nodes()) {
    if (n.node_id() == node_id) return true;
  }
  for (const v1::RoundRecord& r : job.history()) {
    for (const v1::NodeAssignment& a : r.assignment().nodes()) {
      if (a.node_id() == node_id) return true;
    }
  }
  return false;
}

}  // namespace elastrun::rendezvous
