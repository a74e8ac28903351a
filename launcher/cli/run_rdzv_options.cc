#include "launcher/cli/run_rdzv_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace elastrun::launcher {
namespace {

// One --rdzv-conf K=V; an unknown key is warned about.
absl::Status ApplyConfKey(const std::string& key, const std::string& value,
                          const std::string& shown, RunOptions& o) {
  RendezvousConf& c = o.rdzv_conf;
  const std::string what = absl::StrCat(shown, " ", key);
  if (key == "is_host") {
    ASSIGN_OR_RETURN(bool b, ParseBool(value, what));
    c.is_host = b;
  } else if (key == "join_timeout") {
    ASSIGN_OR_RETURN(c.join_timeout, ParseDuration(value, what));
  } else if (key == "last_call_timeout") {
    ASSIGN_OR_RETURN(c.last_call_timeout, ParseDuration(value, what));
  } else if (key == "keep_alive_interval") {
    ASSIGN_OR_RETURN(c.keep_alive_interval, ParseDuration(value, what));
    if (c.keep_alive_interval <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": must be above 0"));
    }
  } else if (key == "keep_alive_max_attempt") {
    ASSIGN_OR_RETURN(int64_t n, ParseInt(value, what, 2, 1000));
    c.keep_alive_max_attempt = static_cast<int>(n);
  } else if (key == "token_file") {
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty"));
    c.token_file = value;
  } else {
    o.warnings.push_back(
        IgnoredWarning(absl::StrCat(shown, " ", key), "elastrun does not use it"));
  }
  return absl::OkStatus();
}

// The static backend (torchrun's): a fixed node count, node R is group rank
// R, and the rendezvous is at --master-addr:--master-port (unless
// --rdzv-endpoint says otherwise), hosted by node rank 0.
absl::Status CheckStatic(RunOptions& o, const HostCheck& is_this_host) {
  const int n = o.nnodes.max;
  if (o.nnodes.min != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-backend static needs a fixed --nnodes N, not ", o.nnodes.min,
                     ":", n, " (use --rdzv-backend c10d to re-form within MIN:MAX)"));
  }
  if (o.node_rank < 0 || o.node_rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-backend static with --nnodes ", n,
                     " needs --node-rank R (0 <= R < ", n, "): this node's group rank",
                     o.node_rank >= n ? absl::StrCat(", not ", o.node_rank) : ""));
  }
  if (o.rdzv_endpoint.empty()) {
    const int port = o.master_port != 0 ? o.master_port : 29500;  // torchrun's default
    o.rdzv_endpoint = absl::StrContains(o.master_addr, ':')
                          ? absl::StrCat("[", o.master_addr, "]:", port)
                          : absl::StrCat(o.master_addr, ":", port);
    o.endpoint_is_this_host = is_this_host(o.master_addr);
  }
  if (!o.rdzv_conf.is_host) o.rdzv_conf.is_host = o.node_rank == 0;
  return absl::OkStatus();
}

// The elastrun backend: a service that runs apart, named by the endpoint.
absl::Status CheckExternal(RunOptions& o) {
  if (o.rdzv_endpoint.empty()) {
    return absl::InvalidArgumentError(
        "--rdzv-backend elastrun needs --rdzv-endpoint HOST:PORT[,HOST:PORT...]: the "
        "running elastrun-rendezvous service (each of its replicas), the same on every "
        "node");
  }
  if (o.rdzv_conf.is_host.has_value()) {
    o.warnings.push_back(
        IgnoredWarning("--rdzv-conf is_host",
                       "with --rdzv-backend elastrun no node hosts the rendezvous"));
    o.rdzv_conf.is_host.reset();
  }
  return absl::OkStatus();
}

}  // namespace

std::string IgnoredWarning(const std::string& shown, const std::string& why) {
  return absl::StrCat(shown, " is ignored: ", why);
}

namespace {

// One HOST[:PORT] as HOST:PORT (torchrun's default port 29400); sets *host.
absl::StatusOr<std::string> OneEndpoint(absl::string_view value, const std::string& shown,
                                        std::string* host) {
  *host = std::string(value);
  int port = 29400;
  if (absl::StartsWith(value, "[") && absl::EndsWith(value, "]")) {
    *host = std::string(value.substr(1, value.size() - 2));  // [v6] without a port
  } else if (absl::StrContains(value, ':')) {
    RETURN_IF_ERROR(SplitHostPort(value, shown, host, &port));
  }
  if (host->empty()) return std::string();
  return absl::StrContains(*host, ':') ? absl::StrCat("[", *host, "]:", port)
                                       : absl::StrCat(*host, ":", port);
}

}  // namespace

// --rdzv-endpoint HOST[:PORT]: kept as HOST:PORT (torchrun's default port
// 29400), with whether HOST is this node. The elastrun backend's may list
// several, the service's replicas.
absl::Status ParseRdzvEndpoint(const std::string& value, const std::string& shown,
                               const HostCheck& is_this_host, RunOptions& o) {
  if (absl::StrContains(value, ',')) {
    if (!o.external_rendezvous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, " ", value, ": several endpoints are the replicas of a running ",
          "elastrun-rendezvous service: add --rdzv-backend elastrun (c10d and static ",
          "take one, the node that hosts the rendezvous)"));
    }
    std::vector<std::string> endpoints;
    for (absl::string_view e : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      std::string host;
      ASSIGN_OR_RETURN(std::string endpoint,
                       OneEndpoint(absl::StripAsciiWhitespace(e), shown, &host));
      if (endpoint.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(shown, " ", value, ": '", e, "' names no host"));
      }
      endpoints.push_back(std::move(endpoint));
    }
    o.rdzv_endpoint = absl::StrJoin(endpoints, ",");
    o.endpoint_is_this_host = false;
    return absl::OkStatus();
  }
  std::string host;
  ASSIGN_OR_RETURN(std::string endpoint, OneEndpoint(value, shown, &host));
  if (endpoint.empty()) return absl::OkStatus();
  o.rdzv_endpoint = std::move(endpoint);
  o.endpoint_is_this_host = !o.external_rendezvous() && is_this_host(host);
  return absl::OkStatus();
}

absl::Status ParseRdzvConf(const std::string& value, const std::string& shown,
                           RunOptions& o) {
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": '", item, "' is not KEY=VALUE"));
    }
    const std::string key(absl::StripAsciiWhitespace(item.substr(0, eq)));
    const std::string v(absl::StripAsciiWhitespace(item.substr(eq + 1)));
    RETURN_IF_ERROR(ApplyConfKey(key, v, shown, o));
  }
  return absl::OkStatus();
}

bool IsOneNode(const RunOptions& o) {
  return o.nnodes.max <= 1 && o.endpoint_is_this_host && !o.external_rendezvous();
}

absl::Status CheckNodesForm(RunOptions& o, const HostCheck& is_this_host) {
  o.multinode = !IsOneNode(o);
  if (!o.multinode) {
    if (o.node_rank > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--node-rank ", o.node_rank, ": with one node the only node rank is 0"));
    }
    return absl::OkStatus();
  }
  const std::string nnodes = o.nnodes.min == o.nnodes.max
                                 ? absl::StrCat(o.nnodes.max)
                                 : absl::StrCat(o.nnodes.min, ":", o.nnodes.max);
  if (o.rdzv_backend == "static") RETURN_IF_ERROR(CheckStatic(o, is_this_host));
  if (o.external_rendezvous()) RETURN_IF_ERROR(CheckExternal(o));
  if (o.rdzv_endpoint.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes ", nnodes, " needs --rdzv-endpoint HOST:PORT, the same on every node: ",
        "the node whose address HOST is hosts the rendezvous"));
  }
  if (o.standalone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--standalone runs this node alone; it cannot be used with --nnodes ", nnodes));
  }
  // torchrun's default run id: every node must name the same one.
  if (o.run_id.empty()) o.run_id = "none";
  if (o.rdzv_backend != "static" && (o.master_addr_given || o.master_port != 0)) {
    o.warnings.push_back(
        IgnoredWarning("--master-addr/--master-port",
                       "with several nodes MASTER_ADDR is rank 0's node address "
                       "(--local-addr there) and MASTER_PORT a free port of it"));
  }
  return absl::OkStatus();
}

}  // namespace elastrun::launcher
