// Checkpoint files on disk, torch-free: an envelope with a checksum around
// the serialized state (checkpoint.h makes the payload), atomic writes, and
// the run's list of checkpoints, newest first.
//
// Envelope: one text line
//   "ELASTRUN-CKPT 2 <key> <payload bytes> <sha256> <run id> <config digest>\n"
// then the payload. `key` orders checkpoints of a run (the global iteration
// at which it was taken); the run id (EncodeRunIdField) and config digest
// say which run wrote it (run_identity.h), readable without the payload.
// Version 1 files (no identity) are still read, with an empty identity: they
// belong to no run of this build. A reader checks length and checksum, so a
// truncated or corrupt file is detected, never half-loaded.
#ifndef ELASTRUN_TRAINER_CHECKPOINT_FILE_H_
#define ELASTRUN_TRAINER_CHECKPOINT_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/run_identity.h"

namespace elastrun::trainer {

struct CheckpointBlob {
  int64_t key = -1;
  RunIdentity run;  // Who wrote it.
  std::string payload;
};

// Writes the envelope atomically (temporary file, fsync, rename).
absl::Status WriteCheckpointFile(const std::string& path, const CheckpointBlob& blob);

// Reads and verifies a file. NotFound when missing; DataLoss naming the
// path when the header is malformed, the file is truncated or longer than
// its header says, or the checksum does not match.
absl::StatusOr<CheckpointBlob> ReadCheckpointFile(const std::string& path);

// Reads only the header line: key and run, payload empty and unverified.
// Errors as ReadCheckpointFile's for the header.
absl::StatusOr<CheckpointBlob> ReadCheckpointHeader(const std::string& path);

// Where a run keeps its checkpoints: <output_dir>/checkpoints.
std::string CheckpointDir(const std::string& output_dir);
// Name of the numbered checkpoint for `key` of the run tagged `tag`
// (RunIdentity::Tag): ckpt_<key, 10 digits>_<tag>.ckpt, or
// ckpt_<key, 10 digits>.ckpt when `tag` is empty. Runs sharing a folder
// thus never overwrite each other's files.
std::string NumberedCheckpointPath(const std::string& dir, int64_t key,
                                   const std::string& tag = "");

// Numbered checkpoints in `dir` of every run, newest (highest key) first;
// empty when the folder does not exist.
std::vector<std::string> ListCheckpoints(const std::string& dir);

// Writes `blob` as its run's numbered checkpoint and as last.ckpt (and
// best.ckpt when `best`), then deletes that run's numbered ones beyond its
// newest `keep`. Another run's files are never removed or overwritten:
// when last.ckpt or best.ckpt is another run's, this run's copy is skipped
// (its numbered files remain).
absl::Status SaveCheckpoint(const std::string& dir, const CheckpointBlob& blob, bool best,
                            int keep = 2);

// The newest numbered checkpoint of `dir` written by `run` that verifies.
// Corrupt ones are skipped and described in `*skipped`; other runs' are
// left alone and described in `*foreign` as "<path> (<its run>: <why>)"
// (either may be null). NotFound when none.
absl::StatusOr<CheckpointBlob> LoadNewestCheckpoint(const std::string& dir,
                                                    const RunIdentity& run,
                                                    std::vector<std::string>* skipped,
                                                    std::vector<std::string>* foreign = nullptr);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_CHECKPOINT_FILE_H_
