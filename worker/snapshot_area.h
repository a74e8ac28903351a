// Tier 1 of "where training state lives" (DESIGN.md): one rank's snapshot
// memory. Every optimizer step the trainer copies its whole state, a flat byte
// image this class never interprets, into shared memory that outlives the
// worker process, so a restarted worker on the same node resumes from it and a
// persister thread can write it to disk without stalling training.
#ifndef ELASTRUN_WORKER_SNAPSHOT_AREA_H_
#define ELASTRUN_WORKER_SNAPSHOT_AREA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace elastrun::worker {

// What a reader learns about one valid slot.
struct SnapshotSlot {
  int index = -1;         // 0 or 1
  int64_t key = -1;       // caller's ordering key (the trainer's step key)
  uint64_t sequence = 0;  // increases with every Commit in this area, across processes
  std::string meta;  // caller's small text (run id, digest, world size), <= 1024 bytes
  // The payload, valid while the area lives and the slot is not rewritten
  // (a pinned slot is not rewritten until Unpin).
  absl::string_view bytes;
};

// One rank's snapshot memory: two slots, each its own file
// `<dir>/<name>.slot0` / `.slot1` (mmap MAP_SHARED) when `dir` is not empty,
// else anonymous memory (a memfd: a restarted process cannot see it, but a
// background persister in this process can). Double-buffered: a write goes to
// a slot that is neither the newest valid one nor pinned, so a process killed
// mid-write (SIGKILL during the memcpy) leaves the previous snapshot valid.
//
// Slot file layout: a 4096-byte header (magic "ELASTRUN-SNAP", version, a
// 32-bit state 0 empty / 1 writing / 2 valid stored atomically, key,
// sequence, payload size, meta length, meta), then the payload. A file only
// grows; the memory stays allocated between writes, so a write is one memcpy.
// The mappings are not inherited by a child this process forks
// (MADV_DONTFORK): in the child the slots' addresses are unmapped.
//
// Thread-safety: one writer thread (BeginWrite, Commit, Abort, Clear) and any
// number of reader threads (Valid, PinNewest, Unpin). The caller's memcpy
// into the slot runs outside the lock. Several processes must not open the
// same area at once: a process reads what an earlier one left behind.
class SnapshotArea {
 public:
  // Size of a slot file's header; the payload starts at this offset.
  static constexpr size_t kHeaderBytes = 4096;
  // The longest `meta` Commit accepts.
  static constexpr size_t kMaxMetaBytes = 1024;

  // Opens (creating if missing) the slot files; existing valid slots from an
  // earlier process stay readable, and the sequence continues from the
  // highest found. Files are opened O_NOFOLLOW|O_CLOEXEC, mode 0600. `name`
  // e.g. "rank0" (no '/').
  // Errors: FailedPrecondition naming the path for a symlink, a file that is
  // not a regular file or is owned by another uid, or a folder that cannot be
  // opened; InvalidArgument for a bad `name`; ResourceExhausted naming the
  // folder when even the headers cannot be allocated; Internal when the
  // mapping cannot be kept from forked children.
  static absl::StatusOr<std::unique_ptr<SnapshotArea>> Open(const std::string& dir,
                                                            const std::string& name);
  ~SnapshotArea();
  SnapshotArea(const SnapshotArea&) = delete;
  SnapshotArea& operator=(const SnapshotArea&) = delete;

  // Valid slots, newest (highest sequence) first. Thread-safe.
  std::vector<SnapshotSlot> Valid() const ABSL_LOCKS_EXCLUDED(mu_);

  // Writer side. Starts writing `size` bytes into a free slot and returns
  // where to put them (the slot's old bytes, not zeroed); the slot is marked
  // "writing" first, so it is invalid until Commit. Grows the slot's file as
  // needed with posix_fallocate, so a full tmpfs is an error here and never a
  // SIGBUS later.
  // Errors: ResourceExhausted naming the folder when the memory cannot be had
  // (the caller then falls back); Unavailable when no slot is free (the other
  // one is pinned): the caller skips this snapshot, nothing blocks;
  // FailedPrecondition when a write is already in progress.
  absl::StatusOr<char*> BeginWrite(size_t size) ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes the slot being written with `key` and `meta`: after a release
  // store of the "valid" state it is the newest. Calling it without a write in
  // progress, or with a `meta` longer than kMaxMetaBytes, is a bug: it aborts
  // the process with a message.
  void Commit(int64_t key, absl::string_view meta) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the slot being written (it stays invalid). No-op without a write.
  void Abort() ABSL_LOCKS_EXCLUDED(mu_);

  // For a persister thread: pins the newest valid slot (it is not rewritten
  // until Unpin) and returns it; nullopt when none is valid or a slot is
  // already pinned (at most one pin).
  std::optional<SnapshotSlot> PinNewest() ABSL_LOCKS_EXCLUDED(mu_);
  void Unpin() ABSL_LOCKS_EXCLUDED(mu_);
  // Marks every slot invalid (e.g. a fresh run that must not see an earlier
  // process's snapshots of another run) and drops a write in progress. A
  // pinned slot's bytes stay readable until Unpin. Writer thread only.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    std::string path;  // for messages; "" for anonymous memory
    int fd = -1;
    char* base = nullptr;  // mapping of the whole file, header first
    size_t mapped = 0;     // bytes mapped (the file's size)
  };

  explicit SnapshotArea(std::string where) : where_(std::move(where)) {}
  // Reads slot `i`'s header; nullopt unless it is valid and fits the file.
  std::optional<SnapshotSlot> ReadSlot(int i) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The valid slot with the highest sequence, or -1.
  int NewestLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes slot `i`'s file at least `bytes` long and maps all of it.
  absl::Status GrowLocked(int i, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string where_;  // the folder, or a description of anonymous memory
  mutable absl::Mutex mu_;
  Slot slots_[2] ABSL_GUARDED_BY(mu_);
  int writing_ ABSL_GUARDED_BY(mu_) = -1;         // slot between BeginWrite and Commit
  size_t writing_size_ ABSL_GUARDED_BY(mu_) = 0;  // its payload size
  int pinned_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace elastrun::worker

#endif  // ELASTRUN_WORKER_SNAPSHOT_AREA_H_
