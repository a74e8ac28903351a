#include "trainer/resume.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "trainer/checkpoint_file.h"
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

// The rank holding the newest checkpoint, or -1 when no rank holds one.
absl::StatusOr<int> NewestHolder(worker::ProcessGroup* group, int world, int rank,
                                 int64_t local_key) {
  // Slot r holds rank r's key + 1 (0: none); a sum gathers them.
  std::vector<double> keys(static_cast<size_t>(world), 0.0);
  keys[static_cast<size_t>(rank)] = static_cast<double>(local_key + 1);
  RETURN_IF_ERROR(SumOverRanks(group, keys));
  const int source =
      static_cast<int>(std::max_element(keys.begin(), keys.end()) - keys.begin());
  if (keys[static_cast<size_t>(source)] == 0) return -1;
  return source;
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

absl::StatusOr<bool> Resume(const RunOptions& run, const RunIdentity& identity,
                            const TrainerConfig& cfg, int world, int rank,
                            worker::ProcessGroup* group, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, TrainPosition* position) {
  const std::string& path = *run.resume;
  ASSIGN_OR_RETURN(CheckpointBlob local,
                   LoadLocalCheckpoint(run, identity, cfg.train.output_dir, rank));
  ASSIGN_OR_RETURN(const int source, NewestHolder(group, world, rank, local.key));
  if (source < 0) {
    if (!path.empty()) {
      return absl::NotFoundError(
          absl::StrCat("--resume ", path, ": no rank has this file"));
    }
    if (rank == 0) {
      std::fprintf(run.out, "no checkpoint of this run in %s; starting fresh\n",
                   CheckpointDir(cfg.train.output_dir).c_str());
    }
    return false;
  }
  std::string payload = std::move(local.payload);
  RETURN_IF_ERROR(BroadcastPayload(group, source, rank, &payload));
  RETURN_IF_ERROR(RestoreState(payload, model, optimizer, position, nullptr));
  if (position->world_size != world && position->iteration > 0) {
    // Shards depend on the world size: a partly done epoch cannot be
    // continued exactly, so it restarts.
    if (rank == 0) {
      std::fprintf(run.out,
                   "checkpoint taken on %lld ranks, now %d: epoch %lld restarts\n",
                   static_cast<long long>(position->world_size), world,
                   static_cast<long long>(position->epoch + 1));
    }
    position->iteration = 0;
  }
  if (rank == 0) {
    std::fprintf(run.out,
                 "resumed from rank %d's checkpoint: epoch %lld, iteration %lld\n",
                 source, static_cast<long long>(position->epoch + 1),
                 static_cast<long long>(position->iteration));
  }
  return true;
}

}  // namespace elastrun::trainer
