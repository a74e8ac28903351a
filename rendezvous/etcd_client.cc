#include "rendezvous/etcd_client.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc.h"
#include "common/status_macros.h"

namespace elastrun::rendezvous {
namespace {

// The longest one try of a call waits: etcd elects a new leader in about a
// second, so a try stuck on the old one is given up after a little more.
constexpr absl::Duration kAttempt = absl::Milliseconds(1500);

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      ++end.back();
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)),
      name_(absl::StrCat("etcd at ", absl::StrJoin(options_.endpoints, ","))) {}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint");
  std::unique_ptr<EtcdClient> c(new EtcdClient(std::move(options)));
  if (!c->options_.tls.ca.empty()) {
    ASSIGN_OR_RETURN(c->credentials_, tls::MakeChannelCredentials(c->options_.tls));
  }
  absl::MutexLock lock(&c->mu_);
  c->stubs_ = c->NewStubs();
  c->made_ = absl::Now();
  return c;
}

std::shared_ptr<const EtcdClient::Stubs> EtcdClient::NewStubs() const {
  rpc::ChannelOptions co{absl::StrJoin(options_.endpoints, ","), options_.tls,
                         credentials_};
  co.connect_timeout = absl::Seconds(2);
  // No keepalive pings: etcd refuses pings more often than every 5 s
  // (GOAWAY too_many_pings); a call's deadline finds a dead member.
  auto s = std::make_shared<Stubs>();
  s->channel = rpc::NewChannel(co);
  s->kv = etcdserverpb::KV::NewStub(s->channel);
  s->lease = etcdserverpb::Lease::NewStub(s->channel);
  s->auth = etcdserverpb::Auth::NewStub(s->channel);
  s->election = v3electionpb::Election::NewStub(s->channel);
  return s;
}

std::shared_ptr<const EtcdClient::Stubs> EtcdClient::stubs() {
  absl::MutexLock lock(&mu_);
  return stubs_;
}

absl::Status EtcdClient::Check(const grpc::Status& status, const char* what) {
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    failing_since_ = absl::InfinitePast();
    return absl::OkStatus();
  }
  const std::string message =
      absl::StrCat(name_, ": ", what, ": ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED: {
      // Out of reach for a while: a new channel (etcd's members may have
      // come back while this one's connection attempts are stuck).
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (failing_since_ == absl::InfinitePast()) failing_since_ = now;
      if (now - failing_since_ >= absl::Seconds(2) && now - made_ >= absl::Seconds(2)) {
        stubs_ = NewStubs();
        made_ = now;
      }
      return absl::UnavailableError(message);
    }
    case grpc::StatusCode::UNAUTHENTICATED: {
      absl::MutexLock lock(&mu_);
      token_.clear();  // expired or revoked: authenticate again
      return absl::UnauthenticatedError(message);
    }
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
  }
}

absl::Status EtcdClient::Prepare(grpc::ClientContext& ctx, const Stubs& stubs,
                                 absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (options_.user.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (token_.empty()) {
    etcdserverpb::AuthenticateRequest req;
    req.set_name(options_.user);
    req.set_password(options_.password);
    etcdserverpb::AuthenticateResponse resp;
    grpc::ClientContext auth_ctx;
    auth_ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    grpc::Status st = stubs.auth->Authenticate(&auth_ctx, req, &resp);
    if (!st.ok()) {
      return absl::Status(st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                              ? absl::StatusCode::kUnavailable
                              : static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat(name_, ": authenticating as \"", options_.user,
                                       "\": ", st.error_message()));
    }
    token_ = resp.token();
  }
  ctx.AddMetadata("token", token_);
  return absl::OkStatus();
}

absl::Status EtcdClient::Call(
    const char* what,
    const std::function<grpc::Status(grpc::ClientContext&, const Stubs&)>& call,
    absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  bool authenticated_again = false;
  while (true) {
    grpc::ClientContext ctx;
    const std::shared_ptr<const Stubs> s = stubs();
    RETURN_IF_ERROR(Prepare(ctx, *s, std::min(kAttempt, end - absl::Now())));
    // On a thread of our own: the service's store writes run on gRPC's
    // callback threads (its handlers), and a blocking gRPC call made on the
    // thread that polls gRPC's sockets stalls every call of the process
    // until its deadline (measured: 5 s; server.cc keeps the Watch streams'
    // ends off such threads too). A thread costs tens of microseconds, an
    // etcd write a millisecond or more.
    grpc::Status raw;
    try {
      std::thread([&] { raw = call(ctx, *s); }).join();
    } catch (const std::system_error& e) {
      // No thread now (the process is re-executing itself, or at its
      // limit): this try fails like an unreachable etcd.
      raw = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         std::string("cannot start a thread: ") + e.what());
    }
    absl::Status st = Check(raw, what);
    // A refused token is retried once with a new one; a refused password
    // fails in Prepare.
    if (absl::IsUnauthenticated(st) && !options_.user.empty() && !authenticated_again) {
      authenticated_again = true;
      continue;
    }
    // etcd drops a request whose proposal was with a leader that died: it
    // would answer only after its own timeout (seconds). Each attempt gets
    // kAttempt, and a write is sent again (every write here is idempotent:
    // a put of a value, a delete, fenced by the same compare).
    if (!absl::IsUnavailable(st) || end - absl::Now() < absl::Milliseconds(100))
      return st;
  }
}

absl::StatusOr<std::vector<mvccpb::KeyValue>> EtcdClient::GetPrefix(
    const std::string& prefix, int64_t page) {
  std::vector<mvccpb::KeyValue> out;
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(page);
  while (true) {
    etcdserverpb::RangeResponse resp;
    RETURN_IF_ERROR(Call(
        "reading",
        [&](grpc::ClientContext& ctx, const Stubs& s) {
          return s.kv->Range(&ctx, req, &resp);
        },
        options_.timeout));
    for (mvccpb::KeyValue& kv : *resp.mutable_kvs()) out.push_back(std::move(kv));
    if (!resp.more() || out.empty()) return out;
    // The next page from just after the last key, at the same revision.
    req.set_key(out.back().key() + std::string(1, '\0'));
    req.set_revision(resp.header().revision());
  }
}

absl::StatusOr<mvccpb::KeyValue> EtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest req;
  req.set_key(key);
  etcdserverpb::RangeResponse resp;
  RETURN_IF_ERROR(Call(
      "reading",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.kv->Range(&ctx, req, &resp);
      },
      options_.timeout));
  if (resp.kvs_size() == 0)
    return absl::NotFoundError(absl::StrCat(name_, ": no key ", key));
  return resp.kvs(0);
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(
    const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse resp;
  RETURN_IF_ERROR(Call(
      "writing",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.kv->Txn(&ctx, request, &resp);
      },
      options_.timeout));
  return resp;
}

absl::Status EtcdClient::Compact(int64_t revision) {
  etcdserverpb::CompactionRequest req;
  req.set_revision(revision);
  etcdserverpb::CompactionResponse resp;
  return Call(
      "compacting",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.kv->Compact(&ctx, req, &resp);
      },
      options_.timeout);
}

absl::StatusOr<int64_t> EtcdClient::Grant(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  etcdserverpb::LeaseGrantResponse resp;
  RETURN_IF_ERROR(Call(
      "granting a lease",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.lease->LeaseGrant(&ctx, req, &resp);
      },
      options_.timeout));
  if (!resp.error().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": granting a lease: ", resp.error()));
  }
  return resp.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease,
                                                     absl::Duration timeout) {
  etcdserverpb::LeaseKeepAliveResponse resp;
  bool answered = false;
  RETURN_IF_ERROR(Call(
      "renewing a lease",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                                 etcdserverpb::LeaseKeepAliveResponse>>
            stream = s.lease->LeaseKeepAlive(&ctx);
        etcdserverpb::LeaseKeepAliveRequest req;
        req.set_id(lease);
        if (stream->Write(req)) answered = stream->Read(&resp);
        stream->WritesDone();
        grpc::Status st = stream->Finish();
        if (st.ok() && !answered) {
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no answer");
        }
        return st;
      },
      timeout > absl::ZeroDuration() ? timeout : options_.timeout));
  return absl::Seconds(resp.ttl());
}

absl::Status EtcdClient::Revoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  return Call(
      "revoking a lease",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.lease->LeaseRevoke(&ctx, req, &resp);
      },
      options_.timeout);
}

absl::StatusOr<v3electionpb::LeaderKey> EtcdClient::Campaign(const std::string& name,
                                                             int64_t lease,
                                                             const std::string& value,
                                                             absl::Duration timeout) {
  v3electionpb::CampaignRequest req;
  req.set_name(name);
  req.set_lease(lease);
  req.set_value(value);
  v3electionpb::CampaignResponse resp;
  grpc::Status raw;
  absl::Status st = Call(
      "campaigning",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        raw = s.election->Campaign(&ctx, req, &resp);
        // Still a follower when the time is up: an answer, not a failure
        // (no new channel for it).
        return raw.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? grpc::Status::OK
                                                                       : raw;
      },
      timeout);
  if (raw.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat(name_, ": campaigning: not leading yet"));
  }
  RETURN_IF_ERROR(st);
  return resp.leader();
}

absl::StatusOr<std::string> EtcdClient::Leader(const std::string& name) {
  v3electionpb::LeaderRequest req;
  req.set_name(name);
  v3electionpb::LeaderResponse resp;
  absl::Status st = Call(
      "asking for the leader",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.election->Leader(&ctx, req, &resp);
      },
      options_.timeout);
  if (!st.ok() && absl::StrContains(st.message(), "no leader")) {
    return absl::NotFoundError(
        absl::StrCat(name_, ": election ", name, " has no leader"));
  }
  RETURN_IF_ERROR(st);
  return resp.kv().value();
}

absl::Status EtcdClient::Resign(const v3electionpb::LeaderKey& leader) {
  v3electionpb::ResignRequest req;
  *req.mutable_leader() = leader;
  v3electionpb::ResignResponse resp;
  return Call(
      "resigning",
      [&](grpc::ClientContext& ctx, const Stubs& s) {
        return s.election->Resign(&ctx, req, &resp);
      },
      options_.timeout);
}

}  // namespace elastrun::rendezvous
