#include "common/rpc.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

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

namespace {

// The addresses of `host` ("1.2.3.4", "::1", a name), as they go into an
// ipv4:/ipv6: target with `port`: IPv4 ones into *v4, IPv6 into *v6.
void Addresses(const std::string& host, int port, std::vector<std::string>* v4,
               std::vector<std::string>* v6) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof text);
      v4->push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof text);
      v6->push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(found);
}

}  // namespace

std::string ChannelTarget(const std::string& endpoints) {
  if (endpoints.find(',') == std::string::npos) return endpoints;
  std::vector<std::string> v4, v6;
  for (absl::string_view e : absl::StrSplit(endpoints, ',', absl::SkipWhitespace())) {
    std::string host;
    int port = 0;
    if (!SplitHostPort(absl::StripAsciiWhitespace(e), "endpoint", &host, &port).ok())
      continue;
    Addresses(host, port, &v4, &v6);
  }
  // One family per target (gRPC's ipv4: and ipv6: schemes); IPv4 first.
  if (!v4.empty()) return absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
  if (!v6.empty()) return absl::StrCat("ipv6:", absl::StrJoin(v6, ","));
  return endpoints;  // nothing resolved: gRPC's error names the target
}

void ConfigureServicePort(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.SetMaxReceiveMessageSize(16 * 1024 * 1024);
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
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.connect_timeout)));
  const std::string target = ChannelTarget(options.target);
  if (target != options.target) {
    // The authority (and TLS's name) of a list is its first endpoint's.
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY,
                   std::string(options.target.substr(0, options.target.find(','))));
  }
  tls::AddChannelArgs(options.tls, &args);
  return grpc::CreateCustomChannel(
      target,
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
