// Tier 2 of where training state lives: background threads that write
// snapshots to checkpoint files (checkpoint_file.h: envelope, checksum,
// temporary file, fsync, rename), so the training thread's part of a
// checkpoint is the snapshot's memcpy. One per node (the local rank 0 of
// each), so losing any one node loses no checkpoint. Torch-free.
//
// A copier thread copies the snapshot out of its pinned slot at once, and
// a writer thread writes it: the copy never waits for a file in progress.
// A slow disk (a write and its fsync may take many steps) would otherwise
// hold the slot pinned all that time, every snapshot meanwhile would be
// skipped, and a failure then would lose the steps since the checkpoint.
#ifndef ELASTRUN_TRAINER_PERSISTER_H_
#define ELASTRUN_TRAINER_PERSISTER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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
  // Finishes what was asked for (copies and writes), then stops.
  ~CheckpointPersister();
  CheckpointPersister(const CheckpointPersister&) = delete;
  CheckpointPersister& operator=(const CheckpointPersister&) = delete;

  // Persists the area's newest snapshot (also as best.ckpt when `best`):
  // pins it now, on the caller's thread, so a later snapshot cannot take
  // its place; the copier copies it out and unpins it, the writer writes
  // the file. Waits first for an earlier request still being copied (the
  // memory has one pin). FailedPrecondition when the area holds no valid
  // snapshot.
  absl::Status Persist(bool best);

  // Waits until the snapshot of the last Persist is copied out (its memory
  // free for the next snapshot), at most `timeout`; the file may still be
  // being written. False when the timeout came first.
  bool WaitUnpinned(absl::Duration timeout = absl::InfiniteDuration());

  // Waits until every request so far is on disk. Returns the first write
  // error since the previous call (the files already written stay).
  absl::Status Flush();

  // The first write error since the last call (or Flush), without waiting.
  absl::Status PollError();

  // The number of files written, for tests and logs.
  int64_t written() const;

 private:
  void CopyLoop();
  void WriteLoop();

  worker::SnapshotArea* const area_;
  const std::string dir_;
  const RunIdentity run_;
  const int keep_;
  const Writer write_;

  mutable absl::Mutex mu_;
  // Pinned by Persist, not yet copied out.
  bool has_request_ ABSL_GUARDED_BY(mu_) = false;
  worker::SnapshotSlot request_ ABSL_GUARDED_BY(mu_);
  bool request_best_ ABSL_GUARDED_BY(mu_) = false;
  // Copied out, waiting for the writer (one at most).
  bool has_copy_ ABSL_GUARDED_BY(mu_) = false;
  CheckpointBlob copy_ ABSL_GUARDED_BY(mu_);
  bool copy_best_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  // Last: they start once the members exist.
  std::thread copier_;
  std::thread writer_;
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_PERSISTER_H_
