#include "rendezvous/follower_proxy.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc.h"
#include "glog/logging.h"

namespace elastrun::rendezvous {
namespace {

constexpr char kTakesOver[] = "this replica takes over as the leader; call again";
constexpr char kLeaderChanged[] = "the leader changed; call again";

// How often the election is asked while the leader a call reached fails.
constexpr absl::Duration kLeaderPoll = absl::Milliseconds(100);

// Metadata that gRPC itself sets on a call, which must not be passed on
// as the application's.
bool OwnedByGrpc(absl::string_view key) {
  return absl::StartsWith(key, ":") || absl::StartsWith(key, "grpc-") ||
         key == "user-agent" || key == "content-type" || key == "te" || key == "host";
}

}  // namespace

// One call passed on: the server side (the caller's call to this replica)
// and the upstream side (the same call made to the leader). Messages go one
// at a time each way: the next is read only once the last was written.
// Deleted when both sides are done.
class FollowerProxy::Call : public grpc::ServerGenericBidiReactor {
 public:
  Call(FollowerProxy* proxy, grpc::GenericCallbackServerContext* ctx)
      : proxy_(proxy), server_ctx_(ctx) {
    bool stopping = false;
    // leader_ is written under the proxy's lock, which SetLeader takes
    // before it reads it.
    std::shared_ptr<grpc::Channel> channel = proxy->Track(this, &leader_, &stopping);
    if (stopping) {
      // Came after Shutdown looked at the calls in flight: as those end.
      refs_.store(1);  // no upstream side
      Claim();
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kTakesOver));
      return;
    }
    if (channel == nullptr) {
      refs_.store(1);  // no upstream side
      Claim();
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "this replica follows and no leader is elected yet; retry"));
      return;
    }
    for (const auto& [key, value] : ctx->client_metadata()) {
      const std::string k(key.data(), key.size());
      if (OwnedByGrpc(k)) continue;
      upstream_.ctx.AddMetadata(k, std::string(value.data(), value.size()));
    }
    // As a client that knows the leader: the call waits (within its
    // deadline) for the leader's port to take it, instead of failing while
    // the leader starts; a leader that is replaced meanwhile ends it
    // (SetLeader).
    upstream_.ctx.set_wait_for_ready(true);
    if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
      upstream_.ctx.set_deadline(ctx->deadline());
    }
    upstream_.call = this;
    stub_ = std::make_unique<grpc::GenericStub>(std::move(channel));
    stub_->PrepareBidiStreamingCall(&upstream_.ctx, ctx->method(), grpc::StubOptions(),
                                    &upstream_);
    // Held until the caller has sent all it sends: the upstream side stays
    // open for its writes until then.
    upstream_.AddHold();
    upstream_.StartRead(&response_);
    upstream_.StartCall();
    StartRead(&request_);
  }

  // The replica takes over, or another leader was elected: the call ends
  // UNAVAILABLE (`why`), as a call whose leader went away does. Finished
  // here, not through the upstream side's end: neither waits on the old
  // leader (calls left at Shutdown's deadline would end CANCELLED).
  void Abort(const char* why) {
    if (Claim()) FinishClaimed(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
    upstream_.ctx.TryCancel();
  }

  // The leader it was passed to ("" : none).
  const std::string& leader() const { return leader_; }
  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  // The server side.
  void OnReadDone(bool ok) override {
    if (ok) {
      upstream_.StartWrite(&request_);
      return;
    }
    // The caller sent all (or went away): so does the upstream side.
    upstream_.StartWritesDone();
    upstream_.RemoveHold();
  }
  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      server_writing_ = false;
      finish.swap(finish_);
    }
    if (finish) return Finish(*finish);
    if (ok) {
      upstream_.StartRead(&response_);
    } else {
      upstream_.ctx.TryCancel();  // the caller is gone
    }
  }
  // The caller cancelled, or its deadline passed: so does the upstream side.
  void OnCancel() override { upstream_.ctx.TryCancel(); }
  void OnDone() override {
    proxy_->Forget(this);
    Unref();
  }

 private:
  // The upstream side.
  struct Upstream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
    void OnReadDone(bool ok) override { call->UpstreamRead(ok); }
    void OnWriteDone(bool ok) override { call->UpstreamWritten(ok); }
    void OnDone(const grpc::Status& status) override { call->UpstreamDone(status); }
    grpc::ClientContext ctx;
    Call* call = nullptr;
  };

  void UpstreamRead(bool ok) {
    if (!ok) return;  // the stream ended: its status comes in UpstreamDone
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;  // aborted: the upstream side is cancelled
      server_writing_ = true;
    }
    StartWrite(&response_);
  }
  void UpstreamWritten(bool ok) {
    if (ok) return StartRead(&request_);
    // The call upstream is over (UpstreamDone says how): nothing more is
    // read from the caller for it.
    upstream_.RemoveHold();
  }
  void UpstreamDone(const grpc::Status& status) {
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE)
      proxy_->LeaderFailed(leader_);
    if (Claim()) {
      for (const auto& [key, value] : upstream_.ctx.GetServerTrailingMetadata()) {
        const std::string k(key.data(), key.size());
        if (OwnedByGrpc(k)) continue;
        server_ctx_->AddTrailingMetadata(k, std::string(value.data(), value.size()));
      }
      FinishClaimed(status);
    }
    Unref();
  }

  // Whether this caller takes the one Finish of the call.
  bool Claim() {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    ended_ = true;
    return true;
  }
  // Finishes the call now, or, while a message is still being written to
  // the caller, once it is.
  void FinishClaimed(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (server_writing_) {
        finish_ = status;
        return;
      }
    }
    Finish(status);
  }

  FollowerProxy* const proxy_;
  grpc::GenericCallbackServerContext* const server_ctx_;
  std::string leader_;
  std::unique_ptr<grpc::GenericStub> stub_;
  Upstream upstream_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  // The server side's OnDone and the upstream side's each drop one; Shutdown
  // holds one while it aborts.
  std::atomic<int> refs_{2};
  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // Finish is called or due
  bool server_writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
};

namespace {

class ProxyService : public grpc::CallbackGenericService {
 public:
  explicit ProxyService(FollowerProxy* proxy) : proxy_(proxy) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* ctx) override {
    return new FollowerProxy::Call(proxy_, ctx);
  }

 private:
  FollowerProxy* const proxy_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FollowerProxy>> FollowerProxy::Start(
    FollowerProxyOptions options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      tls::MakeServerCredentials(options.tls);
  if (!server_credentials.ok()) return server_credentials.status();
  // To the leader as a client: its CA, and this replica's certificate as
  // the client's (the leader asks for one when it has --tls-ca).
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  if (tls::ServerWantsTls(options.tls)) {
    tls::TlsFiles client = options.tls;
    if (client.ca.empty()) {
      // TLS without a CA of ours: the leader's certificate is checked
      // against the system's roots.
      client.cert.clear();
      client.key.clear();
      channel_credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
    } else {
      absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> c =
          tls::MakeChannelCredentials(client);
      if (!c.ok()) return c.status();
      channel_credentials = *std::move(c);
    }
  }
  std::unique_ptr<FollowerProxy> p(new FollowerProxy(std::move(options)));
  p->channel_credentials_ = std::move(channel_credentials);
  p->service_ = std::make_unique<ProxyService>(p.get());
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(p->options_.listen, *std::move(server_credentials), &bound);
  builder.RegisterCallbackGenericService(p->service_.get());
  // As the service's own port: daemons' Watch streams live through it.
  rpc::ConfigureServicePort(builder);
  p->server_ = builder.BuildAndStart();
  if (p->server_ == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", p->options_.listen,
                                               " (in use, or not this host's)"));
  }
  const size_t colon = p->options_.listen.rfind(':');
  p->address_ = absl::StrCat(p->options_.listen.substr(0, colon), ":", bound);
  p->poller_ = std::thread([raw = p.get()] { raw->PollLoop(); });
  return p;
}

FollowerProxy::~FollowerProxy() { Shutdown(); }

void FollowerProxy::SetLeader(const std::string& leader) {
  std::vector<Call*> stale;
  {
    absl::MutexLock lock(&mu_);
    if (leader == leader_) return;
    leader_ = leader;
    failed_leader_.clear();
    channel_.reset();
    if (!leader.empty()) {
      rpc::ChannelOptions co;
      co.target = leader;
      co.credentials = channel_credentials_;
      co.tls = options_.tls;
      co.keepalive = true;
      channel_ = rpc::NewChannel(co);
      LOG(INFO) << "passing calls to the leader at " << leader;
    }
    // Calls wait for their leader (wait_for_ready): those of the one
    // replaced end, and their callers come again to the new one.
    for (Call* c : active_) {
      c->Ref();
      stale.push_back(c);
    }
  }
  for (Call* c : stale) {
    if (c->leader() != leader) c->Abort(kLeaderChanged);
    c->Unref();
  }
}

std::shared_ptr<grpc::Channel> FollowerProxy::Track(Call* call, std::string* leader,
                                                    bool* stopping) {
  absl::MutexLock lock(&mu_);
  active_.insert(call);
  ++calls_;
  *leader = leader_;
  *stopping = stopping_;
  return channel_;
}

void FollowerProxy::LeaderFailed(const std::string& leader) {
  absl::MutexLock lock(&mu_);
  if (leader.empty() || leader != leader_) return;
  failed_leader_ = leader;
}

void FollowerProxy::Forget(Call* call) {
  absl::MutexLock lock(&mu_);
  active_.erase(call);
}

uint64_t FollowerProxy::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

void FollowerProxy::PollLoop() {
  for (;;) {
    std::string asked_about;  // the leader the election is asked past
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), kLeaderPoll);
      if (stopping_) return;
      // A call to the leader failed, or its port does not take calls
      // (calls wait for it): is another one elected?
      const bool unreachable =
          channel_ != nullptr &&
          channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
      if (failed_leader_.empty() && !unreachable) continue;
      asked_about = leader_;
    }
    if (!options_.find_leader) continue;
    absl::StatusOr<std::string> now = options_.find_leader();
    if (now.ok() && !now->empty() && *now != asked_about) {
      SetLeader(*now);
    } else if (now.ok() && *now == asked_about) {
      // Still elected: once it takes calls again, nothing to ask about.
      absl::MutexLock lock(&mu_);
      if (channel_ != nullptr &&
          channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
        failed_leader_.clear();
      }
    }
  }
}

void FollowerProxy::Shutdown() {
  std::vector<Call*> calls;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (Call* c : active_) {
      c->Ref();
      calls.push_back(c);
    }
  }
  for (Call* c : calls) {
    c->Abort(kTakesOver);
    c->Unref();
  }
  if (server_ != nullptr)
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (poller_.joinable()) poller_.join();
  if (server_ != nullptr) server_->Wait();
}

}  // namespace elastrun::rendezvous
