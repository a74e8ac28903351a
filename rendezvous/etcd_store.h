// The service's state and its worker-log tail in etcd, for replicas of the
// service of which one leads at a time (leadership.h). Every write is one
// etcd transaction fenced by the leadership: it compares the leader key's
// creation revision, so a replica that no longer leads (deposed, paused
// past its lease, cut off) can never write, whatever it believes.
//
// Keys, under the cluster's prefix P (--etcd-prefix):
//   P/meta/cluster_id            the cluster id (16 hex digits)
//   P/nodes/ID, P/jobs/ID        StoredNode, StoredJob
//   P/progress/ID                a job's last Progress
//   P/logs/JOB/c/SEQ             StoredLogChunks: one write's chunks of JOB,
//                                named by the last one's seq (20 digits)
//   P/logs/JOB/s/NODE            a node's Sender (incarnation, chunk)
//   P/logs/JOB/trim              the seq below which JOB's chunks are gone
//   P/leader/...                 the election (leadership.h)
#ifndef ELASTRUN_RENDEZVOUS_ETCD_STORE_H_
#define ELASTRUN_RENDEZVOUS_ETCD_STORE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/log_db.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {

// What makes a write the leader's: the leader key and its creation revision
// (v3electionpb::LeaderKey), and whom to tell when etcd refused a write
// because that key is gone (the caller steps down). A fence with an empty
// key writes unfenced (one service alone on etcd, and tests).
struct EtcdFence {
  std::string key;
  int64_t revision = 0;
  std::function<void(const std::string& why)> on_refused;
};

// Shared by the store and the log store of one replica.
struct EtcdPlace {
  EtcdClient* client = nullptr;  // not owned; outlives the stores
  std::string prefix;            // "/elastrun", without a trailing slash
  EtcdFence fence;
  // Writes made through this place (by every copy of it): every
  // kCompactEvery-th one compacts etcd's history, which no one reads (etcd
  // keeps every old value until compacted: worker logs would fill its
  // quota).
  std::shared_ptr<std::atomic<int64_t>> writes =
      std::make_shared<std::atomic<int64_t>>(0);
  static constexpr int64_t kCompactEvery = 1000;
};

// Runs `ops` as one fenced transaction. FailedPrecondition when the fence
// refused it (after telling fence.on_refused), else the client's errors.
absl::Status FencedTxn(const EtcdPlace& place, etcdserverpb::TxnRequest txn);

class EtcdStore final : public Store {
 public:
  // Reads (or, on a new cluster, writes) the cluster id. Errors: etcd's.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(EtcdPlace place);

  absl::Status PutNode(const v1::StoredNode& node) override;
  absl::Status PutJob(const v1::StoredJob& job) override;
  absl::Status PutProgress(const std::string& job_id,
                           const v1::Progress& progress) override;
  // In transactions of at most 100 deletes each (etcd's limit of operations
  // per transaction is 128): a failure may leave some deleted, which a
  // retry finishes.
  absl::Status DeleteNodes(const std::vector<std::string>& node_ids) override;
  // In fenced transactions of up to 100 nodes each.
  absl::Status PutNodes(const std::vector<const v1::StoredNode*>& nodes) override;
  bool batches_node_writes() const override { return true; }
  absl::StatusOr<Contents> Load() override;
  std::string where() const override;

 private:
  explicit EtcdStore(EtcdPlace place) : place_(std::move(place)) {}
  absl::Status Put(const std::string& key, const std::string& value);

  EtcdPlace place_;
};

class EtcdLogDb final : public LogDb {
 public:
  explicit EtcdLogDb(EtcdPlace place) : place_(std::move(place)) {}

  // One fenced transaction when it fits etcd's limits (128 operations,
  // about 1 MiB), else several in order: deletions, then the chunks, then
  // the senders, so that a failure between them stores chunks the senders
  // do not yet count (a resend stores them again) rather than senders
  // that count chunks never stored.
  absl::Status Write(const Batch& batch) override;
  absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> Load() override;
  absl::StatusOr<Senders> LoadSenders() override;
  absl::StatusOr<std::map<std::string, int64_t>> LoadTrims() override;
  std::string where() const override;

 private:
  std::string JobPrefix(const std::string& job) const;
  // Every log key read and parsed once (the LogStore asks for chunks,
  // senders and trims in turn at start-up), kept until the next Write.
  struct Stored {
    std::map<std::string, std::vector<v1::LogChunk>> chunks;
    Senders senders;
    std::map<std::string, int64_t> trims;
  };
  absl::StatusOr<const Stored*> ReadStored();

  EtcdPlace place_;
  std::optional<Stored> stored_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_ETCD_STORE_H_
