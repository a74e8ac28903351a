#include "common/rpc.h"

#include <string>
#include <utility>

namespace elastrun::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::shared_ptr<grpc::Channel> NewChannel(const ChannelOptions& options) {
  // A ping a second, a dead peer noticed in two more (the service allows
  // pings this often).
  static constexpr std::pair<const char*, int> kKeepalive[] = {
      {GRPC_ARG_KEEPALIVE_TIME_MS, 1000},
      {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000},
      {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
      {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
  };
  // Reconnect within a second of the service's return.
  static constexpr std::pair<const char*, int> kBackoff[] = {
      {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100},
      {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100},
      {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000},
  };
  grpc::ChannelArguments args;
  if (options.keepalive) {
    for (const auto& [key, value] : kKeepalive) args.SetInt(key, value);
  }
  for (const auto& [key, value] : kBackoff) args.SetInt(key, value);
  tls::AddChannelArgs(options.tls, &args);
  return grpc::CreateCustomChannel(
      options.target,
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
}

void AddToken(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
}

void PrepareCall(grpc::ClientContext& ctx, absl::Duration timeout,
                 const std::string& token) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AddToken(ctx, token);
}

std::optional<absl::Status> TlsFailure(const absl::Status& failed,
                                       const std::string& target,
                                       const tls::TlsFiles& tls) {
  if (!absl::IsUnavailable(failed) && !absl::IsDeadlineExceeded(failed))
    return std::nullopt;
  if (!tls::ClientWantsTls(tls)) {
    // gRPC's text ("Socket closed", a timeout) names neither TLS nor the
    // fix.
    if (!tls::SpeaksTls(target, kTlsProbeTimeout)) return std::nullopt;
    return absl::UnauthenticatedError(tls::SpeaksTlsMessage(target));
  }
  absl::Status handshake = tls::CheckHandshake(target, tls, kTlsProbeTimeout);
  if (absl::IsUnauthenticated(handshake)) return handshake;
  return std::nullopt;
}

}  // namespace elastrun::rpc
