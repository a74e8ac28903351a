#include "trainer/persister.h"

#include <utility>

#include "trainer/checkpoint_file.h"

namespace elastrun::trainer {

CheckpointPersister::CheckpointPersister(worker::SnapshotArea* area, std::string dir,
                                         RunIdentity run, int keep)
    : area_(area),
      dir_(std::move(dir)),
      run_(std::move(run)),
      keep_(keep),
      thread_([this] { Loop(); }) {}

CheckpointPersister::~CheckpointPersister() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status CheckpointPersister::Persist(bool best) {
  absl::MutexLock lock(&mu_);
  // One pin at a time: the previous request must be copied out first (a
  // memcpy on the thread, short).
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &has_request_));
  std::optional<worker::SnapshotSlot> slot = area_->PinNewest();
  if (!slot.has_value()) {
    return absl::FailedPreconditionError("no snapshot to persist");
  }
  request_ = Request{*std::move(slot), best};
  has_request_ = true;
  return absl::OkStatus();
}

absl::Status CheckpointPersister::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CheckpointPersister* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return !p->has_request_ && !p->writing_;
      },
      this));
  return std::exchange(error_, absl::OkStatus());
}

void CheckpointPersister::WaitUnpinned() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &has_request_));
}

absl::Status CheckpointPersister::PollError() {
  absl::MutexLock lock(&mu_);
  return std::exchange(error_, absl::OkStatus());
}

int64_t CheckpointPersister::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

void CheckpointPersister::Loop() {
  CheckpointBlob blob;
  blob.run = run_;
  for (;;) {
    bool best = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CheckpointPersister* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->has_request_ || p->stop_;
          },
          this));
      if (!has_request_) return;  // Stopping with nothing left.
      // Copied out under the lock so Persist waits for it; the pin is
      // released at once and the training thread snapshots freely while
      // the file is written.
      blob.key = request_.slot.key;
      blob.payload.assign(request_.slot.bytes.data(), request_.slot.bytes.size());
      best = request_.best;
      area_->Unpin();
      has_request_ = false;
      writing_ = true;
    }
    absl::Status s = SaveCheckpoint(dir_, blob, best, keep_);
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
