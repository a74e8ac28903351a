// Which run a checkpoint belongs to. A checkpoint names its run (the
// launcher's run id, or train.run_name when the user sets one to resume
// across submissions) and a digest of the resolved config without the keys
// that may change on resume, so a job never continues another run's
// weights: another seed, model or optimizer is another run even in the
// same folder.
#ifndef ELASTRUN_TRAINER_RUN_IDENTITY_H_
#define ELASTRUN_TRAINER_RUN_IDENTITY_H_

#include <string>
#include <vector>

#include "common/config/node.h"

namespace elastrun::trainer {

struct RunIdentity {
  // train.run_name, else TORCHELASTIC_RUN_ID, else "" (a process started by
  // hand: its checkpoints are resumed only when --resume asks).
  std::string run_id;
  // ConfigDigest of the run's config; "" in checkpoints written before runs
  // were recorded.
  std::string config_digest;

  // Short hex tag naming this identity in file names ("" when both fields
  // are empty), so two runs sharing a folder never overwrite each other.
  std::string Tag() const;
  // "run 'x', config 0123abcd..." for messages.
  std::string Describe() const;
  // What differs from `other`, e.g. "run 'a' vs 'b'; config digest ...";
  // empty when equal.
  std::string DiffersFrom(const RunIdentity& other) const;

  friend bool operator==(const RunIdentity& a, const RunIdentity& b) {
    return a.run_id == b.run_id && a.config_digest == b.config_digest;
  }
  friend bool operator!=(const RunIdentity& a, const RunIdentity& b) { return !(a == b); }
};

// Keys of the resolved config that may change when a run resumes, so they
// are left out of its digest: how long it runs, where it writes, how often
// it logs and checkpoints, how many threads it uses, where the dataset
// files live, the device it trains on, how DDP communicates (train.ddp:
// bucket sizes, graph options; none changes the mathematics) and the run
// name itself; also `scheduler.epochs`, the schedule's length, which follows train.epochs in
// the base config (${train.epochs}) and so changes with it. Everything
// else (seed, model, optimizer, schedule, batch size, data, precision) is
// the run.
const std::vector<std::string>& ResumableKeys();

// Hex SHA-256 (first 16 bytes) of the resolved config with the `data` and
// `train` sections' defaults filled in (so an explicit default digests as
// an omitted one) and ResumableKeys() removed, and keys newer than the
// format (train.amp_dtype) removed at their default, so that runs
// checkpointed before them keep their digest. Sections that fail their
// schema are digested as written.
std::string ConfigDigest(const config::Node& resolved);

// The run id a checkpoint records: `run_name` when set, else the launcher's
// TORCHELASTIC_RUN_ID (`launcher_run_id`, may be "").
std::string ChooseRunId(const std::string& run_name, const std::string& launcher_run_id);

// Escapes a run id for one header field: bytes outside [A-Za-z0-9._:@+-]
// become %XX; "" becomes "%". DecodeRunIdField undoes it (false when
// malformed).
std::string EncodeRunIdField(const std::string& run_id);
bool DecodeRunIdField(const std::string& field, std::string* run_id);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_RUN_IDENTITY_H_
