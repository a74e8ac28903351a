// One leader among the service's replicas: an etcd lease (--leader-lease)
// and etcd's election (v3election) under P/leader. The leader renews its
// lease a few times per lease; when it cannot for a whole lease (etcd out of
// reach, the process paused), or etcd says the lease is gone, or a fenced
// write was refused, the leadership is lost and `on_lost` is called once:
// the replica must stop serving at once (elastrun-rendezvous re-executes
// itself as a follower). A follower becomes leader only after the old
// leader's key is gone, so two replicas never both write (the fence).
#ifndef ELASTRUN_RENDEZVOUS_LEADERSHIP_H_
#define ELASTRUN_RENDEZVOUS_LEADERSHIP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/etcd_store.h"

namespace elastrun::rendezvous {

struct LeadershipOptions {
  EtcdClient* client = nullptr;  // not owned; outlives the Leadership
  std::string prefix;            // the cluster's keys' prefix
  // This replica's address for clients (the leader key's value).
  std::string value;
  absl::Duration lease = absl::Seconds(2);
  // Called once, from the renewing thread or a writer's, when the
  // leadership is lost; says why.
  std::function<void(const std::string& why)> on_lost;
  // Called while waiting to lead: etcd could not be reached (Unavailable,
  // saying why), or who leads now (OK, the leader's value).
  std::function<void(const absl::Status& etcd, const std::string& leader)> on_waiting;
};

class Leadership {
 public:
  // Blocks until this replica leads, or `stop` turns true (Cancelled). While
  // etcd cannot be reached it keeps trying, telling on_waiting.
  static absl::StatusOr<std::unique_ptr<Leadership>> Campaign(
      LeadershipOptions options, const std::atomic<bool>& stop);
  // Stops renewing and resigns (a follower leads at once, not after the
  // lease).
  ~Leadership();

  // The fence of this leadership, for the stores: refused writes call Lose.
  EtcdPlace Place() const;
  // The leadership ended: calls on_lost once (later calls do nothing).
  void Lose(const std::string& why);
  bool lost() const { return lost_.load(); }
  const v3electionpb::LeaderKey& key() const { return key_; }

 private:
  Leadership(LeadershipOptions options, int64_t lease, v3electionpb::LeaderKey key);
  void RenewLoop();

  LeadershipOptions options_;
  int64_t lease_;
  v3electionpb::LeaderKey key_;
  std::atomic<bool> lost_{false};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_LEADERSHIP_H_
