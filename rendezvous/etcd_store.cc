#include "rendezvous/etcd_store.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "elastrun/v1/state.pb.h"

namespace elastrun::rendezvous {
namespace {

// etcd's default limits are 128 operations and 1.5 MiB a request.
constexpr size_t kMaxOps = 100;
constexpr size_t kMaxBytes = 1 << 20;

etcdserverpb::RequestOp PutOp(const std::string& key, const std::string& value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(key);
  op.mutable_request_put()->set_value(value);
  return op;
}

etcdserverpb::RequestOp DeleteOp(const std::string& key,
                                 const std::string& range_end = "") {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(key);
  if (!range_end.empty()) op.mutable_request_delete_range()->set_range_end(range_end);
  return op;
}

// A log chunk's seq as a key part that sorts as the number does.
std::string SeqKey(int64_t seq) { return absl::StrFormat("%020d", seq); }

// Runs `ops` in fenced transactions of at most kMaxOps operations and
// about kMaxBytes each, in order.
absl::Status RunInOrder(const EtcdPlace& place,
                        std::vector<etcdserverpb::RequestOp> ops) {
  etcdserverpb::TxnRequest txn;
  size_t bytes = 0;
  for (etcdserverpb::RequestOp& op : ops) {
    const size_t size = op.ByteSizeLong();
    if (txn.success_size() > 0 && (static_cast<size_t>(txn.success_size()) >= kMaxOps ||
                                   bytes + size > kMaxBytes)) {
      RETURN_IF_ERROR(FencedTxn(place, std::move(txn)));
      txn = etcdserverpb::TxnRequest();
      bytes = 0;
    }
    *txn.add_success() = std::move(op);
    bytes += size;
  }
  if (txn.success_size() > 0) RETURN_IF_ERROR(FencedTxn(place, std::move(txn)));
  return absl::OkStatus();
}

}  // namespace

absl::Status FencedTxn(const EtcdPlace& place, etcdserverpb::TxnRequest txn) {
  if (!place.fence.key.empty()) {
    etcdserverpb::Compare* c = txn.add_compare();
    c->set_key(place.fence.key);
    c->set_target(etcdserverpb::Compare::CREATE);
    c->set_result(etcdserverpb::Compare::EQUAL);
    c->set_create_revision(place.fence.revision);
  }
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse resp, place.client->Txn(txn));
  if (!resp.succeeded()) {
    const std::string why =
        absl::StrCat(place.client->name(),
                     ": a write was refused: this replica no longer leads (its "
                     "leader key ",
                     place.fence.key, " is gone)");
    if (place.fence.on_refused) place.fence.on_refused(why);
    return absl::FailedPreconditionError(why);
  }
  if (++*place.writes % EtcdPlace::kCompactEvery == 0) {
    // Best effort: a failure leaves more history, compacted next time.
    place.client->Compact(resp.header().revision()).IgnoreError();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(EtcdPlace place) {
  std::unique_ptr<EtcdStore> store(new EtcdStore(std::move(place)));
  const std::string key = store->place_.prefix + "/meta/cluster_id";
  // Made once, by whichever replica first finds none (a transaction that
  // puts only when the key has never been written).
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* missing = txn.add_compare();
  missing->set_key(key);
  missing->set_target(etcdserverpb::Compare::VERSION);
  missing->set_result(etcdserverpb::Compare::EQUAL);
  missing->set_version(0);
  absl::BitGen gen;
  *txn.add_success() = PutOp(key, absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen)));
  txn.add_failure()->mutable_request_range()->set_key(key);
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse resp, store->place_.client->Txn(txn));
  if (resp.succeeded()) {
    store->cluster_id_ = txn.success(0).request_put().value();
  } else if (resp.responses_size() == 1 &&
             resp.responses(0).response_range().kvs_size() == 1) {
    store->cluster_id_ = resp.responses(0).response_range().kvs(0).value();
  } else {
    return absl::InternalError(absl::StrCat(store->where(), ": cannot read ", key));
  }
  return store;
}

std::string EtcdStore::where() const {
  return absl::StrCat("state in ", place_.client->name(), " under ", place_.prefix);
}

absl::Status EtcdStore::Put(const std::string& key, const std::string& value) {
  etcdserverpb::TxnRequest txn;
  *txn.add_success() = PutOp(key, value);
  return FencedTxn(place_, std::move(txn));
}

absl::Status EtcdStore::PutNode(const v1::StoredNode& node) {
  ++writes_.nodes;
  return Put(absl::StrCat(place_.prefix, "/nodes/", node.node_id()),
             node.SerializeAsString());
}

absl::Status EtcdStore::PutNodes(const std::vector<const v1::StoredNode*>& nodes) {
  std::vector<etcdserverpb::RequestOp> ops;
  ops.reserve(nodes.size());
  for (const v1::StoredNode* node : nodes) {
    ops.push_back(PutOp(absl::StrCat(place_.prefix, "/nodes/", node->node_id()),
                        node->SerializeAsString()));
  }
  RETURN_IF_ERROR(RunInOrder(place_, std::move(ops)));
  writes_.nodes += static_cast<int64_t>(nodes.size());
  return absl::OkStatus();
}

absl::Status EtcdStore::PutJob(const v1::StoredJob& job) {
  ++writes_.jobs;
  return Put(absl::StrCat(place_.prefix, "/jobs/", job.job_id()),
             job.SerializeAsString());
}

absl::Status EtcdStore::PutProgress(const std::string& job_id,
                                    const v1::Progress& progress) {
  ++writes_.progress;
  return Put(absl::StrCat(place_.prefix, "/progress/", job_id),
             progress.SerializeAsString());
}

absl::Status EtcdStore::DeleteNodes(const std::vector<std::string>& node_ids) {
  std::vector<etcdserverpb::RequestOp> ops;
  for (const std::string& id : node_ids) {
    ops.push_back(DeleteOp(absl::StrCat(place_.prefix, "/nodes/", id)));
  }
  RETURN_IF_ERROR(RunInOrder(place_, std::move(ops)));
  writes_.node_deletes += static_cast<int64_t>(node_ids.size());
  return absl::OkStatus();
}

absl::StatusOr<Store::Contents> EtcdStore::Load() {
  Contents out;
  auto scan = [&](const char* kind, auto add) -> absl::Status {
    const std::string prefix = absl::StrCat(place_.prefix, "/", kind, "/");
    ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs, place_.client->GetPrefix(prefix));
    for (const mvccpb::KeyValue& kv : kvs) {
      if (!add(kv.key().substr(prefix.size()), kv.value())) {
        return absl::DataLossError(
            absl::StrFormat("%s: key %s does not parse (%d bytes): restore etcd from a "
                            "snapshot or delete "
                            "the key",
                            where(), kv.key(), kv.value().size()));
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(scan("nodes", [&](const std::string&, const std::string& v) {
    return out.nodes.emplace_back().ParseFromString(v);
  }));
  RETURN_IF_ERROR(scan("jobs", [&](const std::string&, const std::string& v) {
    return out.jobs.emplace_back().ParseFromString(v);
  }));
  std::stable_sort(
      out.jobs.begin(), out.jobs.end(),
      [](const v1::StoredJob& a, const v1::StoredJob& b) { return a.seq() < b.seq(); });
  RETURN_IF_ERROR(scan("progress", [&](const std::string& id, const std::string& v) {
    return out.progress[id].ParseFromString(v);
  }));
  return out;
}

std::string EtcdLogDb::where() const {
  return absl::StrCat("logs in ", place_.client->name(), " under ", place_.prefix);
}

std::string EtcdLogDb::JobPrefix(const std::string& job) const {
  return absl::StrCat(place_.prefix, "/logs/", job, "/");
}

absl::Status EtcdLogDb::Write(const Batch& batch) {
  stored_.reset();  // what was read is no longer what is stored
  std::vector<etcdserverpb::RequestOp> ops;
  for (const std::string& job : batch.dropped_jobs) {
    const std::string p = JobPrefix(job);
    ops.push_back(DeleteOp(p, PrefixEnd(p)));
  }
  for (const auto& [job, below] : batch.trim_below) {
    const std::string c = JobPrefix(job) + "c/";
    // The writes whose last chunk is below it; a write that straddles it
    // stays, its older chunks skipped by Load.
    ops.push_back(DeleteOp(c, c + SeqKey(below)));
    ops.push_back(PutOp(JobPrefix(job) + "trim", absl::StrCat(below)));
  }
  // The chunks, one record per job, named by its last chunk's seq.
  std::map<std::string, v1::StoredLogChunks> by_job;
  for (const auto& [job, chunk] : batch.chunks) *by_job[job].add_chunks() = chunk;
  for (const auto& [job, chunks] : by_job) {
    const int64_t last = chunks.chunks(chunks.chunks_size() - 1).seq();
    ops.push_back(
        PutOp(JobPrefix(job) + "c/" + SeqKey(last), chunks.SerializeAsString()));
  }
  for (const auto& [job, nodes] : batch.senders) {
    for (const auto& [node, sender] : nodes) {
      v1::StoredLogSender s;
      s.set_incarnation(sender.incarnation);
      s.set_chunk(sender.chunk);
      ops.push_back(PutOp(JobPrefix(job) + "s/" + node, s.SerializeAsString()));
    }
  }
  return RunInOrder(place_, std::move(ops));
}

namespace {

// A log key's parts after P/logs/: the job, and what follows it ("c/SEQ",
// "s/NODE", "trim"). Job ids hold no '/'.
bool SplitLogKey(absl::string_view rest, std::string* job, absl::string_view* what) {
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos) return false;
  *job = std::string(rest.substr(0, slash));
  *what = rest.substr(slash + 1);
  return true;
}

}  // namespace

absl::StatusOr<const EtcdLogDb::Stored*> EtcdLogDb::ReadStored() {
  if (stored_.has_value()) return &*stored_;
  const std::string prefix = place_.prefix + "/logs/";
  ASSIGN_OR_RETURN(std::vector<mvccpb::KeyValue> kvs, place_.client->GetPrefix(prefix));
  Stored out;
  std::map<std::string, std::vector<v1::LogChunk>> chunks;
  for (const mvccpb::KeyValue& kv : kvs) {
    std::string job;
    absl::string_view what;
    if (!SplitLogKey(absl::string_view(kv.key()).substr(prefix.size()), &job, &what))
      continue;
    bool parsed = true;
    if (absl::StartsWith(what, "c/")) {
      v1::StoredLogChunks c;
      parsed = c.ParseFromString(kv.value());
      for (v1::LogChunk& chunk : *c.mutable_chunks())
        chunks[job].push_back(std::move(chunk));
    } else if (absl::StartsWith(what, "s/")) {
      v1::StoredLogSender sender;
      parsed = sender.ParseFromString(kv.value());
      out.senders[job][std::string(what.substr(2))] =
          Sender{sender.incarnation(), sender.chunk()};
    } else if (what == "trim") {
      parsed = absl::SimpleAtoi(kv.value(), &out.trims[job]);
    }
    if (!parsed) {
      return absl::DataLossError(
          absl::StrFormat("%s: key %s does not parse: delete it", where(), kv.key()));
    }
  }
  // Chunks below a job's trim are gone (a write that straddled it stays).
  for (auto& [job, list] : chunks) {
    const int64_t trim = out.trims.count(job) != 0 ? out.trims[job] : 0;
    for (v1::LogChunk& c : list) {
      if (c.seq() >= trim) out.chunks[job].push_back(std::move(c));
    }
  }
  stored_ = std::move(out);
  return &*stored_;
}

absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> EtcdLogDb::Load() {
  ASSIGN_OR_RETURN(const Stored* stored, ReadStored());
  return stored->chunks;
}

absl::StatusOr<LogDb::Senders> EtcdLogDb::LoadSenders() {
  ASSIGN_OR_RETURN(const Stored* stored, ReadStored());
  return stored->senders;
}

absl::StatusOr<std::map<std::string, int64_t>> EtcdLogDb::LoadTrims() {
  ASSIGN_OR_RETURN(const Stored* stored, ReadStored());
  return stored->trims;
}

}  // namespace elastrun::rendezvous
