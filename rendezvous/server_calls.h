// How the service's gRPC handlers check their callers and answer unary
// calls: shared by server.cc (the daemons' Rendezvous service) and
// server_jobs.cc (the users' Jobs service). Internal to those two files.
#ifndef ELASTRUN_RENDEZVOUS_SERVER_CALLS_H_
#define ELASTRUN_RENDEZVOUS_SERVER_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/rpc.h"
#include "rendezvous/caller.h"

namespace elastrun::rendezvous::calls {

// The value of the call's metadata `key`, if it was sent.
inline std::optional<std::string> Metadata(const grpc::CallbackServerContext* ctx,
                                           const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

// Who may call, as the services check it: the token and the clock that
// credentials expire by.
struct AuthPolicy {
  std::string token;
  const Clock* clock = &RealClock();

  absl::StatusOr<Caller> CallerOf(const grpc::CallbackServerContext* ctx) const {
    CallMetadata md;
    md.authorization = Metadata(ctx, auth::kAuthorizationKey);
    md.credential = Metadata(ctx, auth::kCredentialKey);
    md.owner = Metadata(ctx, auth::kOwnerKey);
    return Authenticate(md, token, clock->Now());
  }
};

// Whom an RPC serves: node daemons only, or every identified caller.
enum class Audience { kCluster, kAnyone };

// Nodes are the cluster's, not a user's: only a holder of the token or
// root may drain or remove one.
inline absl::Status RequireNodeAdmin(const Caller& caller, const char* action) {
  if (caller.cluster || (caller.user && caller.user->uid == 0)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("only root or a holder of the cluster token may ", action, " a node"));
}

// Runs a unary handler: the caller's identity and audience checked, then
// `f(caller)` (StatusOr<Resp> or Status).
template <typename Resp, typename F>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx,
                                const AuthPolicy& policy, Audience audience,
                                const char* rpc, Resp* resp, F f) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<Caller> caller = policy.CallerOf(ctx);
  absl::Status st = caller.status();
  if (st.ok() && audience == Audience::kCluster) st = RequireCluster(*caller, rpc);
  if (st.ok()) {
    auto result = f(*caller);
    if constexpr (std::is_same_v<decltype(result), absl::Status>) {
      st = result;
    } else {
      st = result.status();
      if (st.ok()) *resp = *std::move(result);
    }
  }
  reactor->Finish(rpc::ToGrpcStatus(st));
  return reactor;
}

// The caller of a daemon-facing stream or barrier: OK only for a cluster
// caller.
inline absl::Status CheckCluster(grpc::CallbackServerContext* ctx,
                                 const AuthPolicy& policy, const char* rpc) {
  absl::StatusOr<Caller> caller = policy.CallerOf(ctx);
  if (!caller.ok()) return caller.status();
  return RequireCluster(*caller, rpc);
}

}  // namespace elastrun::rendezvous::calls

#endif  // ELASTRUN_RENDEZVOUS_SERVER_CALLS_H_
