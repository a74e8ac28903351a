#include "trainer/resume.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "trainer/checkpoint_file.h"
#include "trainer/digest.h"
#include "worker/process_group.h"
#include "worker/progress.h"

namespace elastrun::trainer {
namespace {

// Where this rank's messages go: rank 0's to the run's output, the others'
// to stderr (their launcher logs it).
std::FILE* MessagesOf(const RunOptions& run, int rank) {
  return rank == 0 ? run.out : stderr;
}

// This rank's candidate: the named file, or the newest checkpoint of this
// run that verifies. A blob with key -1 when this rank has none; only a
// named file that exists but cannot be read is an error. Other runs'
// checkpoints are named in one message and left alone.
absl::StatusOr<CheckpointBlob> LoadLocalCheckpoint(const RunOptions& run,
                                                   const RunIdentity& identity,
                                                   const std::string& output_dir,
                                                   int rank) {
  const std::string& path = *run.resume;
  if (!path.empty()) {
    absl::StatusOr<CheckpointBlob> blob = ReadCheckpointFile(path);
    if (blob.ok() && blob->run != identity) {
      std::fprintf(MessagesOf(run, rank),
                   "warning: rank %d: --resume %s is not a checkpoint of this run (%s); "
                   "resuming from it as asked\n",
                   rank, path.c_str(), blob->run.DiffersFrom(identity).c_str());
    }
    if (blob.ok() || !absl::IsNotFound(blob.status())) return blob;
    return CheckpointBlob{};
  }
  std::vector<std::string> skipped;
  std::vector<std::string> foreign;
  absl::StatusOr<CheckpointBlob> blob =
      LoadNewestCheckpoint(CheckpointDir(output_dir), identity, &skipped, &foreign);
  for (const std::string& why : skipped) {
    std::fprintf(stderr, "rank %d: skipping checkpoint: %s\n", rank, why.c_str());
  }
  if (!foreign.empty()) {
    std::fprintf(MessagesOf(run, rank),
                 "rank %d: not resuming from checkpoints of another run (this is %s); "
                 "left in place: %s\n",
                 rank, identity.Describe().c_str(), absl::StrJoin(foreign, "; ").c_str());
  }
  if (!blob.ok()) return CheckpointBlob{};
  return blob;
}

// Replaces `*payload` on every rank with `source`'s (no-op without a group).
absl::Status BroadcastPayload(worker::ProcessGroup* group, int source, int rank,
                              std::string* payload) {
  if (group == nullptr) return absl::OkStatus();
  // The size first, so every rank can allocate the receiving tensor.
  at::Tensor size = at::tensor({static_cast<int64_t>(payload->size())}, at::kLong);
  RETURN_IF_ERROR(group->Broadcast(size, source));
  at::Tensor bytes = at::empty({size.item<int64_t>()}, at::kByte);
  if (rank == source) std::memcpy(bytes.data_ptr(), payload->data(), payload->size());
  RETURN_IF_ERROR(group->Broadcast(bytes, source));
  payload->assign(static_cast<const char*>(bytes.data_ptr()),
                  static_cast<size_t>(bytes.numel()));
  return absl::OkStatus();
}

}  // namespace

absl::Status SumOverRanks(worker::ProcessGroup* group, std::vector<double>& values) {
  if (group == nullptr) return absl::OkStatus();
  at::Tensor t = at::tensor(values, at::kDouble);
  RETURN_IF_ERROR(group->AllReduce(t));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = t[static_cast<int64_t>(i)].item<double>();
  }
  return absl::OkStatus();
}

int64_t CheckpointKey(const TrainPosition& p) {
  constexpr int64_t kMask = (int64_t{1} << kLineageBits) - 1;
  return (p.branch << kLineageBits) | (p.lineage & kMask);
}

// The run id hashed: any length of id fits the slot's meta.
std::string SnapshotMeta(const RunIdentity& identity, int world) {
  return absl::StrCat(Sha256Hex(identity.run_id), " ",
                      identity.config_digest.empty() ? "%" : identity.config_digest, " ",
                      world);
}

bool SnapshotOfRun(const std::string& meta, const RunIdentity& identity) {
  std::vector<std::string> f = absl::StrSplit(meta, ' ');
  return f.size() == 3 && !identity.run_id.empty() && f[0] == Sha256Hex(identity.run_id) &&
         (f[1] == "%" ? "" : f[1]) == identity.config_digest;
}

namespace {

enum class Tier { kNone = 0, kMemory = 1, kDisk = 2, kFile = 3 };

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kMemory: return "snapshot in memory";
    case Tier::kDisk: return "checkpoint on disk";
    case Tier::kFile: return "named file";
    case Tier::kNone: break;
  }
  return "nothing";
}

// One state this rank could restore.
struct Local {
  int64_t key = -1;
  Tier tier = Tier::kNone;
  std::string payload;
  uint64_t digest = 0;
};

// The payload's ContentDigest (an older build's torch archive: its bytes').
absl::StatusOr<uint64_t> DigestOf(const std::string& payload) {
  if (IsStateImage(payload)) return ContentDigest(payload);
  return static_cast<uint64_t>(std::hash<std::string>()(payload));
}

// This rank's newest usable state of the run: its snapshots and its
// checkpoints, newest first; a malformed one is named and skipped.
absl::StatusOr<Local> NewestLocal(const RunOptions& run, const RunIdentity& identity,
                                  const TrainerConfig& cfg, int rank,
                                  worker::SnapshotArea* area) {
  std::vector<Local> candidates;
  worker::ReportBusy();
  ASSIGN_OR_RETURN(CheckpointBlob disk,
                   LoadLocalCheckpoint(run, identity, cfg.train.output_dir, rank));
  worker::ReportBusy();
  if (disk.key >= 0) {
    candidates.push_back(
        {disk.key, run.resume->empty() ? Tier::kDisk : Tier::kFile, std::move(disk.payload)});
  }
  if (area != nullptr && run.resume->empty()) {
    for (const worker::SnapshotSlot& slot : area->Valid()) {
      if (!SnapshotOfRun(slot.meta, identity)) continue;
      candidates.push_back(
          {slot.key, Tier::kMemory, std::string(slot.bytes.data(), slot.bytes.size())});
    }
  }
  // Newest first; on a tie the snapshot wins: its loss sums are this
  // rank's own, and it needs no file read.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Local& a, const Local& b) {
    return a.key != b.key ? a.key > b.key : a.tier == Tier::kMemory && b.tier != Tier::kMemory;
  });
  for (Local& c : candidates) {
    absl::StatusOr<uint64_t> digest = DigestOf(c.payload);
    worker::ReportBusy();
    if (digest.ok()) {
      c.digest = *digest;
      return std::move(c);
    }
    if (c.tier == Tier::kFile) return digest.status();
    std::fprintf(stderr, "rank %d: skipping the %s of key %lld: %s\n", rank, TierName(c.tier),
                 static_cast<long long>(c.key), std::string(digest.status().message()).c_str());
  }
  return Local{};
}

// Restores `payload` (an image, or a torch archive of an older build).
absl::Status Restore(const std::string& payload, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, StateExtras* extras) {
  if (IsStateImage(payload)) return RestoreImage(payload, model, optimizer, extras);
  RETURN_IF_ERROR(RestoreState(payload, model, optimizer, &extras->position,
                               &extras->config_yaml));
  extras->position.sums_global = true;  // Older checkpoints summed over ranks.
  extras->rows_carried = false;
  return absl::OkStatus();
}

// Every rank's (key + 1, digest, tier), gathered by one sum of int64s
// (each rank fills its own columns).
absl::StatusOr<std::vector<int64_t>> Gather(worker::ProcessGroup* group, int world, int rank,
                                            const Local& local) {
  const int64_t w = world;
  std::vector<int64_t> all(static_cast<size_t>(3 * w), 0);
  all[static_cast<size_t>(rank)] = local.key + 1;
  all[static_cast<size_t>(w + rank)] = static_cast<int64_t>(local.digest);
  all[static_cast<size_t>(2 * w + rank)] = static_cast<int64_t>(local.tier);
  if (group == nullptr) return all;
  at::Tensor t = at::tensor(all, at::kLong);
  RETURN_IF_ERROR(group->AllReduce(t));
  std::memcpy(all.data(), t.data_ptr<int64_t>(), all.size() * sizeof(int64_t));
  return all;
}

}  // namespace

absl::StatusOr<Resumed> Resume(const RunOptions& run, const RunIdentity& identity,
                               const TrainerConfig& cfg, int world, int rank,
                               worker::ProcessGroup* group, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               worker::SnapshotArea* area) {
  const std::string& path = *run.resume;
  ASSIGN_OR_RETURN(Local local, NewestLocal(run, identity, cfg, rank, area));
  ASSIGN_OR_RETURN(std::vector<int64_t> all, Gather(group, world, rank, local));
  const size_t w = static_cast<size_t>(world);
  const auto newest = std::max_element(all.begin(), all.begin() + world);
  Resumed out;
  if (*newest == 0) {
    if (!path.empty()) {
      return absl::NotFoundError(
          absl::StrCat("--resume ", path, ": no rank has this file"));
    }
    if (rank == 0) {
      std::fprintf(run.out, "no checkpoint of this run in %s; starting fresh\n",
                   CheckpointDir(cfg.train.output_dir).c_str());
    }
    return out;
  }
  const size_t source = static_cast<size_t>(newest - all.begin());
  // A rank holds the state when its candidate has the newest key and the
  // source's content: equal keys alone could name different states.
  std::vector<bool> holds(w);
  for (size_t r = 0; r < w; ++r) {
    holds[r] = all[r] == *newest && all[w + r] == all[w + source];
    if (rank == 0 && all[r] == *newest && !holds[r]) {
      std::fprintf(run.out,
                   "warning: rank %zu's state of key %lld differs from rank %zu's (digest "
                   "%016llx vs %016llx); it takes rank %zu's\n",
                   r, static_cast<long long>(*newest - 1), source,
                   static_cast<unsigned long long>(all[w + r]),
                   static_cast<unsigned long long>(all[w + source]), source);
    }
  }
  out.everyone = std::all_of(holds.begin(), holds.end(), [](bool h) { return h; });
  if (!out.everyone) {
    // The holder's bytes to every rank; a rank that holds the same state
    // keeps its own copy (its own loss sums).
    std::string received;
    std::string* into = rank == static_cast<int>(source) ? &local.payload : &received;
    RETURN_IF_ERROR(BroadcastPayload(group, static_cast<int>(source), rank, into));
    if (!holds[static_cast<size_t>(rank)]) local.payload = std::move(received);
  }
  worker::ReportBusy();
  RETURN_IF_ERROR(Restore(local.payload, model, optimizer, &out.extras));
  worker::ReportBusy();
  out.resumed = true;
  out.source = static_cast<int>(source);
  out.source_tier = TierName(static_cast<Tier>(all[2 * w + source]));
  out.own_snapshots = out.everyone && std::all_of(all.begin() + 2 * world, all.end(), [](int64_t t) {
                        return t == static_cast<int64_t>(Tier::kMemory);
                      });
  return out;
}

}  // namespace elastrun::trainer
