// Tier 2 of where training state lives: a background thread that writes
// snapshots to checkpoint files (checkpoint_file.h: envelope, checksum,
// temporary file, fsync, rename), so the training thread's part of a
// checkpoint is the snapshot's memcpy. One per node (the local rank 0 of
// each), so losing any one node loses no checkpoint. Torch-free.
#ifndef ELASTRUN_TRAINER_PERSISTER_H_
#define ELASTRUN_TRAINER_PERSISTER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "trainer/run_identity.h"
#include "worker/snapshot_area.h"

namespace elastrun::trainer {

class CheckpointPersister {
 public:
  // Writes into `dir` as `run`'s checkpoints, keeping its `keep` newest
  // numbered files. `area` must outlive this object.
  CheckpointPersister(worker::SnapshotArea* area, std::string dir, RunIdentity run,
                      int keep = 2);
  // Finishes the write in progress, then stops the thread.
  ~CheckpointPersister();
  CheckpointPersister(const CheckpointPersister&) = delete;
  CheckpointPersister& operator=(const CheckpointPersister&) = delete;

  // Persists the area's newest snapshot (also as best.ckpt when `best`):
  // pins it now, on the caller's thread, so a later snapshot cannot take
  // its place; the thread copies it out, unpins it and writes the file.
  // Waits first for an earlier request still being copied (the memory has
  // one pin). FailedPrecondition when the area holds no valid snapshot.
  absl::Status Persist(bool best);

  // Waits until every request so far is on disk. Returns the first write
  // error since the previous call (the files already written stay).
  absl::Status Flush();

  // Waits until the snapshot of the last Persist is copied out (its memory
  // free for the next snapshot); the file may still be being written.
  void WaitUnpinned();

  // The first write error since the last call (or Flush), without waiting.
  absl::Status PollError();

  // The number of files written, for tests and logs.
  int64_t written() const;

 private:
  struct Request {
    worker::SnapshotSlot slot;
    bool best = false;
  };
  void Loop();

  worker::SnapshotArea* const area_;
  const std::string dir_;
  const RunIdentity run_;
  const int keep_;

  mutable absl::Mutex mu_;
  bool has_request_ ABSL_GUARDED_BY(mu_) = false;  // Pinned, not yet copied out.
  Request request_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // Last: starts once the members exist.
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_PERSISTER_H_
