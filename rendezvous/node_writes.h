// The node records' side of the store (the Coordinator's persistence of
// nodes, as JobTable is of jobs): writes a node's record after it changed,
// keeps the writes that failed and retries them with backoff, and, over a
// store that prefers batches (etcd: every write a round trip to other
// machines), writes registrations and losses behind the call, up to 1000
// in one Store::PutNodes a timer tick.
#ifndef ELASTRUN_RENDEZVOUS_NODE_WRITES_H_
#define ELASTRUN_RENDEZVOUS_NODE_WRITES_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rendezvous/job_table.h"
#include "rendezvous/outbox.h"
#include "rendezvous/registry.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {

// Not thread-safe: the Coordinator serializes calls under its mutex. The
// store and registry are not owned and must outlive this object.
class NodeWrites {
 public:
  // Failed writes are retried after options.retry_backoff, doubling up to
  // options.max_retry_backoff (as failed job writes).
  NodeWrites(Store* store, const NodeRegistry& registry, const JobTableOptions& options)
      : store_(store), registry_(registry), options_(options) {}

  // The node's record changed: written now (SaveNow), or, when the store
  // batches node writes, at the next Retry with the others waiting.
  void Save(Outbox& out, const std::string& node_id);
  // Writes the node's record now; a failure is kept in `out` and the node
  // is written again by Retry. A node no longer registered is not written.
  void SaveNow(Outbox& out, const std::string& node_id);
  // Writes the nodes waiting (failed, or batched) when their retry is due.
  void Retry(Outbox& out, absl::Time now);
  // Every node waiting, batch after batch, until one fails (at shutdown).
  void SaveAll(Outbox& out, absl::Time now);
  // When Retry has work, if it has any.
  std::optional<absl::Time> NextRetry() const;
  // Deletes the nodes' records (the registry forgot them already); a
  // failure is kept in `out` (the next start reloads them as LOST nodes,
  // which expire again).
  void Delete(Outbox& out, const std::vector<std::string>& node_ids);

 private:
  // Up to 1000 of the nodes waiting, in one Store::PutNodes.
  void WriteBatch(Outbox& out, absl::Time now);
  void BackOff(absl::Time now);

  Store* const store_;
  const NodeRegistry& registry_;
  const JobTableOptions options_;
  // Nodes whose last write failed, or waiting for their batch.
  std::set<std::string> unsaved_;
  absl::Time retry_at_ = absl::InfinitePast();
  absl::Duration backoff_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_NODE_WRITES_H_
