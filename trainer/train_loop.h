// The training loop of elastrun-train on one rank, as one object holding
// the run's state: set-up (model, data, sampler, schedule, optimizer,
// resume, DDP, the run folder), then epochs of batches. Its private methods
// are the seams where training state is taken or changes: one optimizer
// step, a capture of the state, the end of an epoch.
//
// Where the state lives (DESIGN.md, "tiers"): after optimizer steps, where
// every rank holds the same state, the loop copies it (state_image.h, one
// memcpy per tensor) into its snapshot memory (worker/snapshot_area.h): a
// folder the node's agent owns (ELASTRUN_SNAPSHOT), which outlives this
// process, every `train.snapshot_iters` steps (tier 1). When a checkpoint
// is due (train.checkpoint_iters, train.checkpoint_period) the capture is
// also handed to this node's persister (its local rank 0 only), which
// writes it to the node's own checkpoint folder in the background (tier 2).
// Captures are taken at optimizer steps only, so gradients accumulated
// between steps (different on every rank) are never stored; the one
// exception, the end of an epoch inside an accumulation, records which
// samples to recompute instead (TrainPosition::tail_from, ReplayTail).
//
// The position is the epoch and the samples of its global order trained
// (sampler.h), so a state taken on any number of ranks continues on this
// one: the rest of the epoch is dealt to this world's ranks. The schedule
// is a function of the samples trained (schedule.h), and the accumulation
// keeps the nominal batch for this world's global batch.
#ifndef ELASTRUN_TRAINER_TRAIN_LOOP_H_
#define ELASTRUN_TRAINER_TRAIN_LOOP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/ddp.h"
#include "trainer/device.h"
#include "trainer/loss_scaler.h"
#include "trainer/metrics.h"
#include "trainer/run_identity.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"
#include "trainer/persister.h"
#include "trainer/resume.h"
#include "trainer/sampler.h"
#include "trainer/schedule.h"
#include "trainer/state_image.h"
#include "trainer/task.h"
#include "trainer/trainer.h"
#include "trainer/trainer_pch.h"
#include "worker/snapshot_area.h"

namespace elastrun::trainer {

// One run on one rank. Not thread-safe: one thread drives it. `cfg`, `run`
// and `group` (nullptr: one process) must outlive it. LibTorch's exceptions
// (c10::Error) pass through; TrainOnGroup turns them into errors.
class TrainLoop {
 public:
  // Builds what the run needs, restores its position (run.resume; a
  // collective), wraps the model in DDP, and on rank 0 prepares the run
  // folder (config.yaml, metrics.csv; on a fresh run an earlier run's
  // metrics are kept under a new name) and opens run.sample_log. Errors: as Train's (trainer.h).
  static absl::StatusOr<std::unique_ptr<TrainLoop>> Create(const TrainerConfig& cfg,
                                                           const RunOptions& run,
                                                           worker::ProcessGroup* group);
  ~TrainLoop();
  TrainLoop(const TrainLoop&) = delete;
  TrainLoop& operator=(const TrainLoop&) = delete;

  // Trains the epochs left, then returns what the final line reports; rank
  // 0 prints it once every rank is done. Call once. Errors: as Train's.
  absl::StatusOr<TrainResult> Run();

 private:
  using Clock = std::chrono::steady_clock;

  // The epoch in progress: the part of it this process trains.
  struct EpochState {
    Clock::time_point start;
    int64_t first_done = 0;  // The position it starts at (> 0: resumed mid-epoch).
    int64_t batches = 0;     // Batches each rank trains from there.
    // The epoch's iteration number (at this world's global batch) of the
    // first of them: what progress lines and reports count from.
    int64_t first_iteration = 0;
    std::vector<int64_t> indices;  // This rank's samples from first_done on.
    double loss_sum = 0;           // Loss x samples so far (see StartEpoch).
    double seen = 0;               // Samples so far (see StartEpoch).
    double seen_at_start = 0;      // Samples over all ranks done before this run.
  };

  TrainLoop(const TrainerConfig& cfg, const RunOptions& run, worker::ProcessGroup* group);

  // What a capture is for: a snapshot in memory only; a checkpoint, also
  // persisted; the end of an epoch (persisted when due).
  enum class Capture { kSnapshot, kCheckpoint, kEpochEnd };

  // Set-up, in this order (see Create).
  absl::Status Build();
  absl::Status OpenSnapshots();
  absl::Status RestorePosition();
  void ApplyResumed(const Resumed& resumed);
  // A state of an older build counted batches per rank: in samples.
  void ConvertLegacyPosition();
  // Rank 0's line saying where the run resumed.
  void SayResumed(const Resumed& resumed) const;
  absl::Status PrepareRunFolder();
  absl::Status OpenSampleLog();

  // One epoch: its batches, mid-epoch checkpoints, then EndEpoch.
  absl::Status RunEpoch(int64_t epoch);
  void StartEpoch(int64_t epoch);
  // The k-th batch this process trains of `epoch`: forward, backward, and
  // an optimizer step when the accumulation is complete.
  absl::Status TrainBatch(int64_t epoch, int64_t k);
  // The global iteration of that batch at this world's batch size (epoch x
  // batches per epoch + the batch's place in the epoch): the step progress
  // reports and fault injection count.
  int64_t GlobalIteration(int64_t epoch, int64_t k) const;
  // The optimizer step after the k-th batch of `epoch`: averages the
  // accumulated gradients, unscales them, and steps (or skips an inf/nan
  // step); the lineage grows.
  void OptimizerStep(int64_t epoch, int64_t k);
  // After the optimizer step at the k-th batch: a capture when one is due
  // (CaptureDueAfterStep); when a stop was asked for, this step's capture,
  // then the end of the process (StopAtCapturedState).
  absl::Status AfterStep(int64_t k);
  absl::Status CaptureDueAfterStep(int64_t k);
  // Ends the process (as SIGTERM would) once the state now is captured;
  // returns only an error of that capture.
  absl::Status StopWithThisState(Capture kind);
  [[noreturn]] void StopAtCapturedState();
  bool SnapshotDue();
  // Every rank measures a snapshot's copy against a step; together they
  // pick how many steps apart snapshots go (train.snapshot_iters = 0).
  absl::Status CalibrateSnapshots();
  // Copies the state now into the snapshot memory (all ranks), and for a
  // checkpoint hands it to this node's persister. `persist`: write it to
  // disk; `best`: also as best.ckpt.
  absl::Status CaptureState(Capture kind, bool persist, bool best);
  // Falls back to this process's memory when the agent's is full.
  absl::Status UseProcessMemory(const absl::Status& why);
  // Recomputes the gradients of the batches after the last optimizer step
  // of the epoch before (a capture at an epoch's end inside an
  // accumulation), as the uninterrupted run holds them.
  absl::Status ReplayTail();
  // Sums the epoch's loss, evaluates, advances the position to the next
  // epoch, checkpoints it when due, and reports the epoch (rank 0).
  absl::Status EndEpoch(int64_t epoch);
  absl::Status ReportEpoch(const TaskEval& eval);
  // After the last epoch: the checkpoints on disk, the result, the barrier
  // and the final line.
  absl::StatusOr<TrainResult> Finish();

  absl::Status LogSamples(int64_t epoch, int64_t i, size_t begin, size_t end);
  // RunOptions::ready_dir's file, once.
  absl::Status MarkReady();
  void MaybeInjectFault(int64_t ni) const;
  // RunOptions::hold_file.
  void HoldWhileAsked() const;

  const TrainerConfig& cfg_;
  const RunOptions& run_;
  worker::ProcessGroup* const group_;
  const int world_;
  const int rank_;
  const bool leader_;  // Rank 0: prints, writes the run folder and checkpoints.
  const Clock::time_point start_;
  Placement placement_;  // Where and in what precision this rank trains.

  // In the order they are built, so they go in reverse: the DDP wrapper
  // before the model it holds, the sample log first (the destructor).
  // The model, its data, loss and evaluation (task.h).
  std::unique_ptr<Task> task_;
  std::optional<DistributedSampler> sampler_;  // Set by Build.
  int64_t batches_per_epoch_ = 0;              // nb in YOLOv5's terms, this world's.
  int64_t global_batch_ = 0;                   // Batch size x world size.
  std::optional<YoloV5Schedule> schedule_;     // Set by Build; RestorePosition.
  ScheduleOptions schedule_options_;           // To remake it for a resumed warm-up.
  double lr0_ = 0;
  int64_t nbs_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  TrainPosition pos_;
  bool resumed_ = false;
  int64_t resumed_world_ = 0;  // Ranks the resumed state was taken on.
  std::optional<LossScaler> scaler_;              // train.amp with float16.
  std::unique_ptr<DistributedDataParallel> ddp_;  // With a group only.
  std::optional<MetricsWriter> metrics_;          // Rank 0 only.
  Progress progress_;
  std::string checkpoint_dir_;
  std::string config_yaml_;  // The resolved config, saved with every checkpoint.
  RunIdentity identity_;     // Recorded in every checkpoint; resume matches it.
  int sample_log_ = -1;      // run.sample_log's descriptor, or -1.
  bool marked_ready_ = false;  // run.ready_dir's file is there.
  std::string metrics_rows_;  // metrics.csv's rows so far, carried in every capture.
  bool rows_carried_ = true;  // False: resumed from an older build's checkpoint.

  // Snapshots and checkpoints. The persister goes before the memory it reads.
  std::unique_ptr<worker::SnapshotArea> area_;
  bool area_shared_ = false;  // In the agent's memory: outlives this process.
  std::string snapshot_meta_;  // The run's meta in every snapshot (SnapshotMeta).
  std::unique_ptr<CheckpointPersister> persister_;  // This node's local rank 0.
  int64_t steps_ = 0;           // Optimizer steps this process took.
  Clock::time_point last_step_at_;   // When the last one was done.
  int64_t captured_lineage_ = -1;    // The state last captured (its lineage).
  bool stop_agreed_ = false;  // The ranks agreed to stop after this step.
  int64_t first_lineage_ = 0;   // The lineage this process started at.
  int64_t snapshot_every_ = 1;  // Steps between snapshots (auto mode).
  bool checkpoint_pending_ = false;  // Due at the next optimizer step.
  bool own_sums_ = false;       // Resumed from every rank's own snapshot.
  Generators rng_at_step_;      // Generator states at the last optimizer step.
  struct CaptureStats {
    int64_t taken = 0, skipped = 0;
    double seconds = 0, max_seconds = 0;
  };
  CaptureStats captures_;
  Clock::time_point first_step_;  // Of this process, for calibration.

  EpochState epoch_;
  TrainResult result_;
};

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_TRAIN_LOOP_H_
