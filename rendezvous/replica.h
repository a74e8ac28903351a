// elastrun-rendezvous as one replica over etcd (--store etcd://...): waits
// to lead (leadership.h), then serves with its state and logs in etcd
// (etcd_store.h). A follower does not listen, so clients given every
// replica's address reach the leader, the one that accepts a connection.
// When the leadership is lost the process re-executes itself: it stops
// serving at once and comes back as a follower with nothing held over.
#ifndef ELASTRUN_RENDEZVOUS_REPLICA_H_
#define ELASTRUN_RENDEZVOUS_REPLICA_H_

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/flags.h"
#include "rendezvous/leadership.h"
#include "rendezvous/server.h"

namespace elastrun::rendezvous {

class Replica {
 public:
  // Connects to etcd and blocks until this replica leads (Cancelled once
  // `stop` turned true first). While it waits it logs who leads, or that
  // etcd cannot be reached and why. `argv` is what it re-executes when the
  // leadership is lost (or exits 0, when `stop` turned true meanwhile:
  // `stop` must outlive the Replica). Errors: the password file, the TLS
  // files.
  static absl::StatusOr<std::unique_ptr<Replica>> Lead(const ServiceFlags& flags,
                                                       char** argv,
                                                       const std::atomic<bool>& stop);
  // Points `options` at the state and logs in etcd, fenced by this
  // leadership.
  void Configure(ServerOptions& options) const;
  // Resigns (another replica leads at once).
  ~Replica();

 private:
  Replica() = default;

  std::unique_ptr<EtcdClient> client_;
  std::unique_ptr<Leadership> leadership_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_REPLICA_H_
