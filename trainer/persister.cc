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
  // One request waits at most: the one before it must be taken up first.
  mu_.Await(absl::Condition(
      +[](bool* pending) { return !*pending; }, &has_request_));
  // Pinned only for the copy (a persister of another kind may hold a pin).
  std::optional<worker::SnapshotSlot> slot = area_->PinNewest();
  if (!slot.has_value()) {
    return absl::FailedPreconditionError("no snapshot to persist");
  }
  request_.run = run_;
  request_.key = slot->key;
  request_.payload.assign(slot->bytes.data(), slot->bytes.size());
  area_->Unpin();
  request_best_ = best;
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
      // Taken up: the next request's copy goes into this write's old buffer.
      std::swap(blob, request_);
      best = request_best_;
      has_request_ = false;
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
