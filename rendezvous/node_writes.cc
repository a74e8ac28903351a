#include "rendezvous/node_writes.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace elastrun::rendezvous {

void NodeWrites::Save(Outbox& out, const std::string& node_id) {
  if (!store_->batches_node_writes()) {
    SaveNow(out, node_id);
    return;
  }
  // With the writes already waiting (after their backoff when they
  // failed), else at the next tick.
  if (unsaved_.empty()) {
    retry_at_ = absl::InfinitePast();
    backoff_ = options_.retry_backoff;
  }
  unsaved_.insert(node_id);
}

void NodeWrites::SaveNow(Outbox& out, const std::string& node_id) {
  const NodeRecord* n = registry_.Find(node_id);
  if (n == nullptr) {  // Forgotten: nothing to write.
    unsaved_.erase(node_id);
    return;
  }
  if (absl::Status st = store_->PutNode(n->stored); !st.ok()) {
    LOG(ERROR) << "node " << node_id << " not saved (retried): " << st;
    out.StoreFailed(std::move(st));
    if (unsaved_.empty()) {
      retry_at_ = absl::InfinitePast();  // once more at the next tick
      backoff_ = options_.retry_backoff;
    }
    unsaved_.insert(node_id);
    return;
  }
  unsaved_.erase(node_id);
}

void NodeWrites::Retry(Outbox& out, absl::Time now) {
  if (unsaved_.empty() || retry_at_ > now) return;
  if (store_->batches_node_writes()) {
    WriteBatch(out, now);
    return;
  }
  const std::set<std::string> due = unsaved_;
  for (const std::string& id : due) SaveNow(out, id);
  if (!unsaved_.empty()) BackOff(now);
}

void NodeWrites::SaveAll(Outbox& out, absl::Time now) {
  retry_at_ = absl::InfinitePast();
  // Until every one is written or a write fails (its retry is then later).
  while (!unsaved_.empty() && retry_at_ <= now) Retry(out, now);
}

std::optional<absl::Time> NodeWrites::NextRetry() const {
  if (unsaved_.empty()) return std::nullopt;
  return retry_at_;
}

void NodeWrites::Delete(Outbox& out, const std::vector<std::string>& node_ids) {
  for (const std::string& id : node_ids) unsaved_.erase(id);
  if (absl::Status st = store_->DeleteNodes(node_ids); !st.ok()) {
    LOG(ERROR) << st;
    out.StoreFailed(std::move(st));
  }
}

void NodeWrites::WriteBatch(Outbox& out, absl::Time now) {
  // A bounded batch a tick: the lock is not held for long, and heartbeats
  // and calls go on between batches.
  constexpr size_t kBatch = 1000;
  std::vector<const v1::StoredNode*> batch;
  std::vector<std::string> ids;
  for (auto it = unsaved_.begin(); it != unsaved_.end() && batch.size() < kBatch;) {
    const NodeRecord* n = registry_.Find(*it);
    if (n == nullptr) {  // Forgotten meanwhile: nothing to write.
      it = unsaved_.erase(it);
      continue;
    }
    batch.push_back(&n->stored);
    ids.push_back(*it);
    ++it;
  }
  if (!batch.empty()) {
    if (absl::Status st = store_->PutNodes(batch); !st.ok()) {
      LOG(ERROR) << batch.size() << " node record(s) not saved (retried): " << st;
      out.StoreFailed(std::move(st));
      BackOff(now);
      return;
    }
    for (const std::string& id : ids) unsaved_.erase(id);
  }
  retry_at_ = absl::InfinitePast();  // The rest, if any, at the next tick.
  backoff_ = options_.retry_backoff;
}

void NodeWrites::BackOff(absl::Time now) {
  retry_at_ = now + backoff_;
  backoff_ = std::min(backoff_ * 2, options_.max_retry_backoff);
}

}  // namespace elastrun::rendezvous
