// Checkpoint files on disk, torch-free: an envelope with a checksum around
// the serialized state (checkpoint.h makes the payload), atomic writes, and
// the run's list of checkpoints, newest first.
//
// Envelope: one text line "ELASTRUN-CKPT 1 <key> <payload bytes> <sha256>\n"
// then the payload. `key` orders checkpoints of a run (the global iteration
// at which it was taken); a reader checks length and checksum, so a
// truncated or corrupt file is detected, never half-loaded.
#ifndef ELASTRUN_TRAINER_CHECKPOINT_FILE_H_
#define ELASTRUN_TRAINER_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::trainer {

struct CheckpointBlob {
  int64_t key = -1;
  std::string payload;
};

// Writes the envelope atomically (temporary file, fsync, rename).
absl::Status WriteCheckpointFile(const std::string& path, const CheckpointBlob& blob);

// Reads and verifies a file. NotFound when missing; DataLoss naming the
// path when the header is malformed, the file is truncated or longer than
// its header says, or the checksum does not match.
absl::StatusOr<CheckpointBlob> ReadCheckpointFile(const std::string& path);

// Where a run keeps its checkpoints: <output_dir>/checkpoints.
std::string CheckpointDir(const std::string& output_dir);
// Name of the numbered checkpoint for `key`: ckpt_<key, 10 digits>.ckpt.
std::string NumberedCheckpointPath(const std::string& dir, int64_t key);

// Numbered checkpoints in `dir`, newest (highest key) first; empty when the
// folder does not exist.
std::vector<std::string> ListCheckpoints(const std::string& dir);

// Writes `blob` as the numbered checkpoint and as last.ckpt (and best.ckpt
// when `best`), then deletes numbered ones beyond the newest `keep`.
absl::Status SaveCheckpoint(const std::string& dir, const CheckpointBlob& blob, bool best,
                            int keep = 2);

// The newest numbered checkpoint of `dir` that verifies; corrupt ones are
// skipped and described in `*skipped` (one line each). NotFound when none.
absl::StatusOr<CheckpointBlob> LoadNewestCheckpoint(const std::string& dir,
                                                    std::vector<std::string>* skipped);

// A fresh run in a folder that holds another run's checkpoints must not
// resume (or prune) them on its first restart: moves `dir` to `dir`.prev
// (replacing an older one) when it holds any checkpoint. Returns whether it
// moved anything; errors name the folders.
absl::StatusOr<bool> SetAsideOldCheckpoints(const std::string& dir);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_CHECKPOINT_FILE_H_
