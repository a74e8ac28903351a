#include "trainer/persister.h"

#include <optional>
#include <utility>

namespace elastrun::trainer {

CheckpointPersister::CheckpointPersister(worker::SnapshotArea* area, std::string dir,
                                         RunIdentity run, int keep, Writer write)
    : area_(area),
      dir_(std::move(dir)),
      run_(std::move(run)),
      keep_(keep),
      write_(std::move(write)),
      copier_([this] { CopyLoop(); }),
      writer_([this] { WriteLoop(); }) {}

CheckpointPersister::~CheckpointPersister() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  copier_.join();
  writer_.join();
}

absl::Status CheckpointPersister::Persist(bool best) {
  absl::MutexLock lock(&mu_);
  // One pin at a time: the previous request must be copied out first (a
  // memcpy on the copier, short, unless two files already wait).
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &has_request_));
  std::optional<worker::SnapshotSlot> slot = area_->PinNewest();
  if (!slot.has_value()) {
    return absl::FailedPreconditionError("no snapshot to persist");
  }
  request_ = *std::move(slot);
  request_best_ = best;
  has_request_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointPersister::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CheckpointPersister* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return !p->has_request_ && !p->has_copy_ && !p->writing_;
      },
      this));
  return std::exchange(error_, absl::OkStatus());
}

bool CheckpointPersister::WaitUnpinned(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](bool* pending) { return !*pending; }, &has_request_),
      timeout);
}

absl::Status CheckpointPersister::PollError() {
  absl::MutexLock lock(&mu_);
  return std::exchange(error_, absl::OkStatus());
}

int64_t CheckpointPersister::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

void CheckpointPersister::CopyLoop() {
  CheckpointBlob blob;  // The buffer copied into, then swapped with copy_.
  for (;;) {
    worker::SnapshotSlot slot;
    bool best = false;
    {
      absl::MutexLock lock(&mu_);
      // A request, and room for its copy (the writer took the last one).
      mu_.Await(absl::Condition(
          +[](CheckpointPersister* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return (p->has_request_ && !p->has_copy_) || (p->stop_ && !p->has_request_);
          },
          this));
      if (!has_request_) return;  // Stopping with nothing left.
      slot = request_;
      best = request_best_;
    }
    // Persist waits for has_request_, so the pinned slot stays as it is
    // while it is copied here, outside the lock.
    blob.run = run_;
    blob.key = slot.key;
    blob.payload.assign(slot.bytes.data(), slot.bytes.size());
    absl::MutexLock lock(&mu_);
    area_->Unpin();
    has_request_ = false;
    std::swap(copy_, blob);
    copy_best_ = best;
    has_copy_ = true;
  }
}

void CheckpointPersister::WriteLoop() {
  CheckpointBlob blob;
  for (;;) {
    bool best = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CheckpointPersister* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->has_copy_ || (p->stop_ && !p->has_request_);
          },
          this));
      if (!has_copy_) return;  // Stopping with nothing left.
      // Taken: the copier's next copy goes into this write's old buffer.
      std::swap(blob, copy_);
      best = copy_best_;
      has_copy_ = false;
      writing_ = true;
    }
    absl::Status s = write_(dir_, blob, best, keep_);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (s.ok()) {
      ++written_;
    } else if (error_.ok()) {
      error_ = std::move(s);
    }
  }
}

}  // namespace elastrun::trainer
