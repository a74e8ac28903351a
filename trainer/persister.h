// Tier 2 of where training state lives: a background thread that writes
// snapshots to checkpoint files (checkpoint_file.h: envelope, checksum,
// temporary file, fsync, rename), so the training thread's part of a
// checkpoint is a memcpy. One per node (the local rank 0 of each), so
// losing any one node loses no checkpoint. Torch-free.
//
// The snapshot memory is never held while a file is written: a slow disk
// (a write and its fsync may take many steps) must not keep the training
// thread from snapshotting every step, or a failure in that time would lose
// the steps since the checkpoint.
#ifndef ELASTRUN_TRAINER_PERSISTER_H_
#define ELASTRUN_TRAINER_PERSISTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trainer/checkpoint_file.h"
#include "trainer/run_identity.h"
#include "worker/snapshot_area.h"

namespace elastrun::trainer {

class CheckpointPersister {
 public:
  // How a checkpoint is written: SaveCheckpoint (tests slow it down).
  using Writer = std::function<absl::Status(
      const std::string& dir, const CheckpointBlob& blob, bool best, int keep)>;

  // Writes into `dir` as `run`'s checkpoints, keeping its `keep` newest
  // numbered files. `area` must outlive this object.
  CheckpointPersister(worker::SnapshotArea* area, std::string dir, RunIdentity run,
                      int keep = 2, Writer write = SaveCheckpoint);
  // Finishes the write in progress, then stops the thread.
  ~CheckpointPersister();
  CheckpointPersister(const CheckpointPersister&) = delete;
  CheckpointPersister& operator=(const CheckpointPersister&) = delete;

  // Persists the area's newest snapshot (also as best.ckpt when `best`):
  // copies it now, on the caller's thread (the area's writer), and the
  // thread writes the file; the area's slots are free again on return.
  // Waits first while an earlier request has not been taken up by the
  // thread (one file is written while one more waits). FailedPrecondition
  // when the area holds no valid snapshot.
  absl::Status Persist(bool best);

  // Waits until every request so far is on disk. Returns the first write
  // error since the previous call (the files already written stay).
  absl::Status Flush();

  // The first write error since the last call (or Flush), without waiting.
  absl::Status PollError();

  // The number of files written, for tests and logs.
  int64_t written() const;

 private:
  void Loop();

  worker::SnapshotArea* const area_;
  const std::string dir_;
  const RunIdentity run_;
  const int keep_;
  const Writer write_;

  mutable absl::Mutex mu_;
  // A copy the thread has not taken up yet; its buffer is reused.
  bool has_request_ ABSL_GUARDED_BY(mu_) = false;
  CheckpointBlob request_ ABSL_GUARDED_BY(mu_);
  bool request_best_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // Last: starts once the members exist.
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_PERSISTER_H_
