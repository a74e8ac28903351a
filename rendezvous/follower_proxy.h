// A follower replica's port. While another replica leads, every call that
// reaches this one — any service, unary or streaming — goes on to the
// leader as it came (its messages, its metadata: the token, a user's
// credential, a stated owner; its deadline), and the leader's answer, status
// and trailing metadata come back. So a client, a daemon or a Kubernetes
// Service may reach any replica: the leader alone decides and writes.
//
// Where the leader is comes from the election (SetLeader, from the
// campaign's wait); while the leader's port takes no calls, or a call to it
// failed UNAVAILABLE, the proxy asks again every 100 ms (`find_leader`), so
// that it follows a new leader within a poll of its election. A call waits
// (within its deadline) for the leader's port, as a client that knows the
// leader does; when another leader is elected the calls still passed to the
// old one end UNAVAILABLE and their callers come again. A call that comes
// while no leader is known fails UNAVAILABLE, which clients retry.
#ifndef ELASTRUN_RENDEZVOUS_FOLLOWER_PROXY_H_
#define ELASTRUN_RENDEZVOUS_FOLLOWER_PROXY_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tls.h"

namespace elastrun::rendezvous {

struct FollowerProxyOptions {
  // Where to serve ("HOST:PORT"): the replica's --listen.
  std::string listen;
  // The replica's --tls-* files: served with them, and the leader (which
  // has the same) reached with them: its CA checks the leader's
  // certificate, and the replica's own certificate is the client's where
  // the leader asks for one (mutual TLS).
  tls::TlsFiles tls;
  // The leader's address as the election holds it now ("" when none);
  // called from the proxy's own thread. Null: only SetLeader tells.
  std::function<absl::StatusOr<std::string>()> find_leader;
};

class FollowerProxy {
 public:
  // Serves on options.listen. InvalidArgument for bad TLS files,
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<FollowerProxy>> Start(
      FollowerProxyOptions options);
  // Shutdown().
  ~FollowerProxy();

  // The bound address (HOST:PORT, the port chosen when 0 was asked).
  const std::string& address() const { return address_; }
  // Calls that start from now on go to `leader` ("HOST:PORT"; empty: none
  // known). Calls in flight stay with the leader they reached. The proxy
  // itself only ever replaces a leader by another (an election it cannot
  // read names none: the last one may still serve).
  void SetLeader(const std::string& leader);
  // Ends every call in flight (UNAVAILABLE: the replica takes over) and
  // frees the port. Idempotent.
  void Shutdown();

  // Calls passed on so far (for tests and logs).
  uint64_t calls() const;

  class Call;  // one call passed on (follower_proxy.cc)

 private:
  explicit FollowerProxy(FollowerProxyOptions options) : options_(std::move(options)) {}
  // Files a new call among those in flight and counts it; returns the
  // channel to the leader now (null when none is known), its address, and
  // whether Shutdown began.
  std::shared_ptr<grpc::Channel> Track(Call* call, std::string* leader, bool* stopping);
  void Forget(Call* call);
  // A call to the leader failed UNAVAILABLE: ask the election again.
  void LeaderFailed(const std::string& leader);
  void PollLoop();

  const FollowerProxyOptions options_;
  std::string address_;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  std::unique_ptr<grpc::CallbackGenericService> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable absl::Mutex mu_;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  // The leader a call could not reach: polled until the election names
  // another ("" : nothing to poll).
  std::string failed_leader_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls in flight (a call removes itself when done).
  std::set<Call*> active_ ABSL_GUARDED_BY(mu_);
  std::thread poller_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_FOLLOWER_PROXY_H_
