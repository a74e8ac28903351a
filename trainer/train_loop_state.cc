// TrainLoop's state captures (train_loop.h, "Where the state lives"):
// the snapshot memory and this node's persister, when a capture is due, the
// capture itself, and the replay of an epoch's tail after a resume.
#include "trainer/train_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/resume.h"
#include "trainer/state_image.h"
#include "trainer/stop_signal.h"
#include "trainer/temp_files.h"
#include "worker/progress.h"

namespace elastrun::trainer {
namespace {

// Calibration of train.snapshot_iters = 0: after this many steps, snapshots
// are spaced so a copy costs at most this share of the training time.
constexpr int64_t kCalibrationSteps = 16;
constexpr double kSnapshotBudget = 0.02;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// This rank's snapshot memory: the agent's folder when the launcher gave
// one, else this process's own; and on each node's local rank 0 the
// persister that writes that node's checkpoints.
absl::Status TrainLoop::OpenSnapshots() {
  const int local_rank = run_.env ? run_.env->local_rank : rank_;
  const std::string dir = run_.env ? run_.env->snapshot : "";
  const std::string name = absl::StrCat("rank", local_rank);
  absl::StatusOr<std::unique_ptr<worker::SnapshotArea>> area =
      worker::SnapshotArea::Open(dir, name);
  area_shared_ = area.ok() && !dir.empty();
  if (!area.ok() && !dir.empty()) {
    std::fprintf(stderr, "rank %d: snapshots stay in this process (%s)\n", rank_,
                 std::string(area.status().message()).c_str());
    area = worker::SnapshotArea::Open("", name);
  }
  if (!area.ok()) return area.status();
  area_ = *std::move(area);
  snapshot_meta_ = SnapshotMeta(identity_, world_);
  if (local_rank == 0) {
    // What a writer killed mid-write left (a partial checkpoint, a link
    // never renamed): this node's dead writers' at once, others' when old.
    for (const std::string& dir : {checkpoint_dir_, cfg_.train.output_dir}) {
      for (const std::string& file : RemoveStaleTemporaries(dir)) {
        std::fprintf(stderr, "rank %d: removed a temporary file whose writer is gone: %s\n",
                     rank_, file.c_str());
      }
    }
    persister_ = std::make_unique<CheckpointPersister>(area_.get(), checkpoint_dir_, identity_);
  }
  return absl::OkStatus();
}

absl::Status TrainLoop::AfterStep(int64_t k) {
  RETURN_IF_ERROR(CaptureDueAfterStep(k));
  // Asked to stop during this step (any rank): it is done, so it goes
  // with us.
  if (stop_agreed_) return StopWithThisState(Capture::kSnapshot);
  return absl::OkStatus();
}

absl::Status TrainLoop::StopWithThisState(Capture kind) {
  if (captured_lineage_ != pos_.lineage) {
    // Not captured yet (not due, or skipped while the persister held the
    // other slot): now, once that slot is free.
    if (persister_) persister_->WaitUnpinned();
    RETURN_IF_ERROR(CaptureState(kind, false, false));
  }
  StopAtCapturedState();
}

void TrainLoop::StopAtCapturedState() {
  std::fprintf(stderr,
               "rank %d: stopping as asked (SIGTERM) after step %lld: the state at epoch %lld, "
               "sample %lld is in the snapshot\n",
               rank_, static_cast<long long>(pos_.lineage),
               static_cast<long long>(pos_.epoch + 1),
               static_cast<long long>(pos_.samples_done));
  std::fflush(stderr);
  // The persister's file in progress, if any, is removed at the next start.
  StopSignal::Exit();
}

absl::Status TrainLoop::CaptureDueAfterStep(int64_t k) {
  const Clock::time_point now = Clock::now();
  if (steps_ > 0) {
    StopSignal::SetStepTime(absl::FromChrono(now - last_step_at_));
  }
  last_step_at_ = now;
  if (steps_++ == 0) first_step_ = now;
  // Where a replay of an epoch's tail would start (the generator state
  // before that tail's forwards).
  rng_at_step_ = GeneratorStates(placement_.device);
  pos_.samples_done = pos_.step_done;
  if (cfg_.train.snapshot_iters == 0 && steps_ == kCalibrationSteps) {
    RETURN_IF_ERROR(CalibrateSnapshots());
  }
  if (k + 1 == epoch_.batches) return absl::OkStatus();  // EndEpoch captures.
  if (checkpoint_pending_) {
    checkpoint_pending_ = false;
    return CaptureState(Capture::kCheckpoint, /*persist=*/true, /*best=*/false);
  }
  if (SnapshotDue()) return CaptureState(Capture::kSnapshot, false, false);
  return absl::OkStatus();
}

bool TrainLoop::SnapshotDue() {
  if (!area_shared_ || cfg_.train.snapshot_iters < 0) return false;
  const int64_t every =
      cfg_.train.snapshot_iters > 0 ? cfg_.train.snapshot_iters : snapshot_every_;
  return steps_ % every == 0;
}

absl::Status TrainLoop::CalibrateSnapshots() {
  // A snapshot's share of a step, averaged over the ranks: every rank then
  // picks the same interval, so all ranks' snapshots are of the same steps.
  const double step_s = SecondsSince(first_step_) / static_cast<double>(steps_ - 1);
  const double copy_s =
      captures_.taken > 0 ? captures_.seconds / static_cast<double>(captures_.taken) : 0;
  std::vector<double> share = {step_s > 0 ? copy_s / step_s : 0};
  RETURN_IF_ERROR(SumOverRanks(group_, share));
  share[0] /= static_cast<double>(world_);
  snapshot_every_ =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(share[0] / kSnapshotBudget)));
  if (leader_ && area_shared_ && snapshot_every_ > 1) {
    std::fprintf(run_.out,
                 "snapshots: a copy takes %.1f%% of a step; one every %lld steps keeps it "
                 "under %.0f%%\n",
                 share[0] * 100, static_cast<long long>(snapshot_every_), kSnapshotBudget * 100);
  }
  return absl::OkStatus();
}

absl::Status TrainLoop::CaptureState(Capture kind, bool persist, bool best) {
  pos_.local_loss_sum = kind == Capture::kEpochEnd ? 0 : epoch_.loss_sum;
  pos_.local_seen = kind == Capture::kEpochEnd ? 0 : epoch_.seen;
  pos_.loss_sum = pos_.seen = 0;
  pos_.sums_global = kind == Capture::kEpochEnd;
  if (kind == Capture::kCheckpoint) {
    // A checkpoint may be restored on other ranks than took it: the sums
    // over all ranks go with it (a collective at a step every rank takes).
    std::vector<double> sums = {epoch_.loss_sum, epoch_.seen};
    RETURN_IF_ERROR(SumOverRanks(group_, sums));
    pos_.loss_sum = sums[0];
    pos_.seen = sums[1];
    pos_.sums_global = true;
  }
  if (!area_shared_ && !(persist && persister_)) return absl::OkStatus();  // Nobody reads it.
  const Clock::time_point start = Clock::now();
  if (scaler_) {
    pos_.amp_scale = scaler_->scale();
    pos_.amp_growth_tracker = scaler_->growth_tracker();
  }
  StateExtras extras;
  extras.position = pos_;
  extras.config_yaml = config_yaml_;
  extras.metrics_rows = metrics_rows_;
  extras.rng = pos_.tail_from >= 0 ? rng_at_step_ : GeneratorStates(placement_.device);
  const StateImage image = StateImage::Plan(task_->state_module(), optimizer_->torch_optimizer(), extras);
  absl::StatusOr<char*> dst = area_->BeginWrite(image.size());
  if (absl::IsUnavailable(dst.status()) && persist && persister_) {
    // The previous checkpoint is still being copied out: wait for it.
    persister_->WaitUnpinned();
    dst = area_->BeginWrite(image.size());
  }
  if (absl::IsResourceExhausted(dst.status()) && area_shared_) {
    RETURN_IF_ERROR(UseProcessMemory(dst.status()));
    dst = area_->BeginWrite(image.size());
  }
  if (absl::IsUnavailable(dst.status())) {
    ++captures_.skipped;  // A snapshot while a checkpoint is copied out.
    return absl::OkStatus();
  }
  if (!dst.ok()) return dst.status();
  image.WriteTo(*dst);
  area_->Commit(CheckpointKey(pos_), snapshot_meta_);
  captured_lineage_ = pos_.lineage;
  const double seconds = SecondsSince(start);
  ++captures_.taken;
  captures_.seconds += seconds;
  captures_.max_seconds = std::max(captures_.max_seconds, seconds);
  if (!persist || !persister_) return absl::OkStatus();
  RETURN_IF_ERROR(persister_->Persist(best));
  if (absl::Status e = persister_->PollError(); !e.ok()) {
    std::fprintf(stderr, "warning: rank %d: a checkpoint was not written: %s\n", rank_,
                 std::string(e.message()).c_str());
  }
  return absl::OkStatus();
}

absl::Status TrainLoop::UseProcessMemory(const absl::Status& why) {
  // Snapshots no longer outlive the process: a stop ends it at once again.
  StopSignal::Disarm();
  std::fprintf(stderr, "rank %d: snapshot memory full (%s); snapshots stay in this process\n",
               rank_, std::string(why.message()).c_str());
  if (persister_) RETURN_IF_ERROR(persister_->Flush());
  persister_.reset();
  const int local_rank = run_.env ? run_.env->local_rank : rank_;
  ASSIGN_OR_RETURN(area_, worker::SnapshotArea::Open("", absl::StrCat("rank", local_rank)));
  area_shared_ = false;
  if (local_rank == 0) {
    persister_ = std::make_unique<CheckpointPersister>(area_.get(), checkpoint_dir_, identity_);
  }
  return absl::OkStatus();
}

absl::Status TrainLoop::ReplayTail() {
  // Same weights, same generator state, and the same samples dealt to this
  // world's ranks: on as many ranks as took the state, the same shards and
  // so bitwise the gradients the uninterrupted run held at the epoch's end;
  // on another number, those samples' gradients all the same. No step, no
  // loss counted (the epoch was reported), no samples logged (they were).
  const int64_t epoch = pos_.epoch - 1;
  const int64_t batch_size = cfg_.data.batch_size;
  sampler_->set_epoch(epoch);
  const std::vector<int64_t> indices = sampler_->Indices(pos_.tail_from);
  pos_.micro_batches = 0;
  for (size_t b = 0; b < indices.size(); b += static_cast<size_t>(batch_size)) {
    const size_t e = std::min(indices.size(), b + static_cast<size_t>(batch_size));
    worker::ReportBusy();
    if (ddp_) ddp_->BeforeForward(false);
    ASSIGN_OR_RETURN(at::Tensor loss, task_->Loss(epoch, indices, b, e));
    if (task_->loss_scale() != 1.0) loss = loss * task_->loss_scale();
    if (ddp_) ddp_->BeforeBackward(loss, false);
    (scaler_ ? loss * scaler_->scale() : loss).backward();
    ++pos_.micro_batches;
  }
  if (leader_) {
    std::fprintf(run_.out, "recomputed the gradients of epoch %lld's last %lld batches\n",
                 static_cast<long long>(epoch + 1), static_cast<long long>(pos_.micro_batches));
  }
  pos_.tail_from = -1;
  return absl::OkStatus();
}

}  // namespace elastrun::trainer
