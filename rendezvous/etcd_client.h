// The service's own client of etcd's v3 API (KV, Lease, Auth and the
// v3election service), over the project's gRPC and the .proto files that
// Debian's golang-etcd-server-dev ships (proto/etcd). Only what the
// service's store and its leadership need: ranges by prefix, transactions,
// leases and an election.
#ifndef ELASTRUN_RENDEZVOUS_ETCD_CLIENT_H_
#define ELASTRUN_RENDEZVOUS_ETCD_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace elastrun::rendezvous {

struct EtcdOptions {
  // "HOST:PORT" of each member; a call goes to the first that answers and
  // moves on when it is lost.
  std::vector<std::string> endpoints;
  // TLS to etcd (ca; cert+key for mutual TLS); all empty: plaintext.
  tls::TlsFiles tls;
  // etcd's authentication; empty user: none.
  std::string user;
  std::string password;
  // The deadline of every call but Campaign's.
  absl::Duration timeout = absl::Seconds(5);
};

// The end of the key range that holds every key starting with `prefix`
// (etcd's range_end for a prefix).
std::string PrefixEnd(const std::string& prefix);

// Thread-safe. Every error names etcd's endpoints; etcd that cannot be
// reached (or answers too late) is Unavailable, whatever gRPC said.
class EtcdClient {
 public:
  // Connects lazily: the first call finds out whether etcd is there. With a
  // user, authenticates at the first call and again when etcd says the
  // token expired. Errors: the TLS files.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  // The endpoints, for messages: "etcd at a:1,b:2".
  const std::string& name() const { return name_; }

  // Every key-value pair under `prefix`, in key order, read at one
  // revision, page by page (`page` pairs per call).
  absl::StatusOr<std::vector<mvccpb::KeyValue>> GetPrefix(const std::string& prefix,
                                                          int64_t page = 1000);
  // One key; NotFound when it is not there.
  absl::StatusOr<mvccpb::KeyValue> Get(const std::string& key);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  // Compacts the history before `revision` (frees etcd's space).
  absl::Status Compact(int64_t revision);

  // A new lease of `ttl` (etcd may grant more); its id.
  absl::StatusOr<int64_t> Grant(absl::Duration ttl);
  // Renews `lease` within `timeout` (0: the options' timeout); returns the
  // time it has left (zero: it is gone).
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease,
                                           absl::Duration timeout = absl::ZeroDuration());
  absl::Status Revoke(int64_t lease);

  // Campaigns in election `name` with `lease` and `value`: blocks until
  // this is the leader (its key), or `timeout` passed (DeadlineExceeded;
  // etcd then withdraws the candidacy).
  absl::StatusOr<v3electionpb::LeaderKey> Campaign(const std::string& name, int64_t lease,
                                                   const std::string& value,
                                                   absl::Duration timeout);
  // The leader's value in election `name`; NotFound when there is none.
  absl::StatusOr<std::string> Leader(const std::string& name);
  absl::Status Resign(const v3electionpb::LeaderKey& leader);

 private:
  // A channel to etcd and its stubs, made anew when etcd stays out of reach
  // (a gRPC channel that first connected while etcd was starting can keep
  // failing its handshakes after etcd is ready).
  struct Stubs {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
    std::unique_ptr<v3electionpb::Election::Stub> election;
  };

  explicit EtcdClient(EtcdOptions options);
  std::shared_ptr<const Stubs> NewStubs() const;
  std::shared_ptr<const Stubs> stubs();
  // Sets the deadline and the auth token; authenticates first when needed.
  absl::Status Prepare(grpc::ClientContext& ctx, const Stubs& stubs,
                       absl::Duration timeout);
  // The call's status as absl's, naming etcd. An expired auth token is
  // forgotten (the next Prepare authenticates).
  absl::Status Check(const grpc::Status& status, const char* what);
  // Runs `call` (which prepares its own context), once more after a
  // refused auth token.
  absl::Status Call(
      const char* what,
      const std::function<grpc::Status(grpc::ClientContext&, const Stubs&)>& call,
      absl::Duration timeout);

  EtcdOptions options_;
  std::string name_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;

  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Stubs> stubs_ ABSL_GUARDED_BY(mu_);
  // Since when calls fail Unavailable (InfinitePast: they do not), and
  // when the stubs were last made.
  absl::Time failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time made_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_ETCD_CLIENT_H_
