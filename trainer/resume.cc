#include "trainer/resume.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "trainer/checkpoint_file.h"
#include "trainer/digest.h"
#include "worker/process_group.h"

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

int64_t CheckpointKey(const TrainPosition& p) { return p.epoch * 1000000 + p.iteration; }

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

// This rank's newest state of the run: its snapshots and its checkpoints.
struct Local {
  int64_t key = -1;
  Tier tier = Tier::kNone;
  std::string payload;
};

absl::StatusOr<Local> NewestLocal(const RunOptions& run, const RunIdentity& identity,
                                  const TrainerConfig& cfg, int rank,
                                  worker::SnapshotArea* area) {
  Local local;
  ASSIGN_OR_RETURN(CheckpointBlob disk,
                   LoadLocalCheckpoint(run, identity, cfg.train.output_dir, rank));
  if (disk.key >= 0) {
    local.key = disk.key;
    local.tier = run.resume->empty() ? Tier::kDisk : Tier::kFile;
    local.payload = std::move(disk.payload);
  }
  if (area == nullptr || !run.resume->empty()) return local;
  for (const worker::SnapshotSlot& slot : area->Valid()) {
    // Newest first; on a tie the snapshot wins: its loss sums are this
    // rank's own, and it needs no file read.
    if (!SnapshotOfRun(slot.meta, identity) || slot.key < local.key) continue;
    local.key = slot.key;
    local.tier = Tier::kMemory;
    local.payload.assign(slot.bytes.data(), slot.bytes.size());
    break;
  }
  return local;
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

}  // namespace

absl::StatusOr<Resumed> Resume(const RunOptions& run, const RunIdentity& identity,
                               const TrainerConfig& cfg, int world, int rank,
                               worker::ProcessGroup* group, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer,
                               worker::SnapshotArea* area) {
  const std::string& path = *run.resume;
  ASSIGN_OR_RETURN(Local local, NewestLocal(run, identity, cfg, rank, area));
  // Every rank's key + 1 (0: none) and tier, gathered by one sum.
  const size_t w = static_cast<size_t>(world);
  std::vector<double> all(2 * w, 0.0);
  all[static_cast<size_t>(rank)] = static_cast<double>(local.key + 1);
  all[w + static_cast<size_t>(rank)] = static_cast<double>(local.tier);
  RETURN_IF_ERROR(SumOverRanks(group, all));
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
  const int source = static_cast<int>(newest - all.begin());
  const bool everyone = std::count(all.begin(), all.begin() + world, *newest) == world;
  // Each rank's own copy when all hold it; otherwise the holder's bytes.
  if (!everyone) RETURN_IF_ERROR(BroadcastPayload(group, source, rank, &local.payload));
  RETURN_IF_ERROR(Restore(local.payload, model, optimizer, &out.extras));
  out.resumed = true;
  out.own_snapshots =
      everyone && std::all_of(all.begin() + world, all.end(), [](double t) {
        return t == static_cast<double>(Tier::kMemory);
      });
  TrainPosition& p = out.extras.position;
  if (p.world_size != world && p.iteration > 0) {
    // Shards depend on the world size: a partly done epoch cannot be
    // continued exactly, so it restarts.
    if (rank == 0) {
      std::fprintf(run.out,
                   "state taken on %lld ranks, now %d: epoch %lld restarts\n",
                   static_cast<long long>(p.world_size), world,
                   static_cast<long long>(p.epoch + 1));
    }
    p.iteration = 0;
  }
  if (rank == 0) {
    const Tier tier = static_cast<Tier>(static_cast<int>(all[w + static_cast<size_t>(source)]));
    std::fprintf(run.out,
                 "resumed at epoch %lld, iteration %lld from the %s of rank %d%s\n",
                 static_cast<long long>(p.epoch + 1), static_cast<long long>(p.iteration),
                 TierName(tier), source,
                 everyone ? " (every rank had it)" : ", broadcast to every rank");
    std::fflush(run.out);
  }
  return out;
}

}  // namespace elastrun::trainer
