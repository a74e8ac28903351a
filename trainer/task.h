// What a model family trains on and how it is scored: the seam between the
// training loop (train_loop.h: position, schedule, DDP, snapshots, resume,
// stops), which is the same for every model, and the model family's own
// data, loss and evaluation. Two tasks exist: the classifier (MLP, CNN on
// Fashion-MNIST; classify_task.cc) and the detector (YoloV5 on a YOLOv5
// dataset; detect/task.cc). The model's `_target_` picks the task.
//
// Not thread-safe: the loop's thread drives it.
#ifndef ELASTRUN_TRAINER_TASK_H_
#define ELASTRUN_TRAINER_TASK_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/device.h"
#include "trainer/optimizer.h"
#include "trainer/options.h"
#include "trainer/schedule.h"
#include "trainer/trainer_pch.h"
#include "worker/process_group.h"

namespace elastrun::trainer {

// What the loop gives a task to build itself.
struct TaskContext {
  const TrainerConfig* cfg = nullptr;
  const Placement* placement = nullptr;
  worker::ProcessGroup* group = nullptr;  // nullptr: one process.
  int world = 1;
  int rank = 0;
  std::FILE* out = stdout;  // Rank 0's lines.
};

// One epoch's training as the loop measured it (over all ranks).
struct EpochTrain {
  int64_t epoch = 0;                            // 1-based: epochs completed.
  double loss = 0;                              // Mean loss per sample.
  std::chrono::steady_clock::time_point start;  // The epoch's (this process's part).
  double images_per_sec = 0;  // Training only (the time before evaluation).
  double lr = 0;              // The weight groups' lr at the epoch's end.
  std::vector<double> lrs;    // Each parameter group's lr (optimizer.h's order).
};

// An epoch's evaluation (every rank gets the same).
struct TaskEval {
  // best.ckpt follows the highest: the classifier's accuracy, the
  // detector's fitness.
  double score = 0;
  double loss = 0;  // Test loss per sample.
  // TrainResult::test_acc: the classifier's accuracy, the detector's
  // mAP@0.5.
  double acc = 0;
  std::string row;   // The epoch's row of the task's csv, with its newline.
  std::string line;  // The epoch's summary line, without a newline.
};

class Task {
 public:
  virtual ~Task() = default;

  // What DDP wraps and the optimizer steps.
  virtual std::shared_ptr<torch::nn::Module> model() = 0;
  // What snapshots and checkpoints hold besides the optimizer: the model,
  // or a module that holds it and the task's own state (the detector's
  // EMA). Built before the optimizer; its tensors never change identity.
  virtual torch::nn::Module& state_module() = 0;
  // Adjusts the optimizer and schedule the config describes (the
  // detector's hyp.yaml gives lr0, momentum, warm-up, ...).
  virtual void Configure(OptimizerSpec* optimizer, ScheduleOptions* schedule) {}
  // Training samples (what the sampler deals) and test samples.
  virtual int64_t train_size() const = 0;
  virtual int64_t test_size() const = 0;
  // Work before training starts, after the state is restored (the
  // detector's AutoAnchor on a fresh run). A collective.
  virtual absl::Status Prepare(bool resumed) { return absl::OkStatus(); }
  // Before the batches of `epoch` this process trains: `indices` are this
  // rank's samples from the position on, in batches of `batch_size` (a
  // loader may start on them); `continued`: the epoch was resumed mid-way
  // (sums of the epoch so far are in the restored state).
  virtual void StartEpoch(int64_t epoch, const std::vector<int64_t>& indices,
                          int64_t batch_size, bool continued) {}
  // The mean loss of the samples indices[begin, end) of `epoch`, its
  // forward under autocast when the placement says so, graph attached.
  // Calls come in the order StartEpoch's batches go, or (a tail's replay,
  // before the epoch after it starts) for a list of their own.
  virtual absl::StatusOr<at::Tensor> Loss(int64_t epoch,
                                          const std::vector<int64_t>& indices,
                                          size_t begin, size_t end) = 0;
  // What the gradients of Loss are multiplied by (the detector's, as
  // YOLOv5's, scale with the batch); the loss reported is Loss's.
  virtual double loss_scale() const { return 1.0; }
  // Gradients are clipped to this norm before each step (YOLOv5: 10); 0:
  // never.
  virtual double clip_grad_norm() const { return 0.0; }
  // After every optimizer step (the detector's EMA update).
  virtual void AfterStep() {}
  // Evaluates the test split and formats the epoch (a collective).
  virtual absl::StatusOr<TaskEval> Evaluate(const EpochTrain& train) = 0;
  // The run folder's csv (name and header) and its plots (rank 0).
  virtual std::string csv_name() const = 0;
  // The files of the run folder's record, the csv first (a fresh run keeps
  // an earlier run's under numbered names: KeepEarlierMetrics).
  virtual std::vector<std::string> record_files() const = 0;
  virtual std::string csv_header() const = 0;
  virtual absl::Status WritePlots(const std::string& output_dir) = 0;
  // Rank 0, once the run folder is ready (an earlier run's record kept):
  // the task's files of the run's start (the detector's hyp.yaml and
  // labels.svg).
  virtual absl::Status WriteRunFiles(const std::string& output_dir) {
    return absl::OkStatus();
  }
  // After the last epoch (rank 0 prints; every rank calls it).
  virtual absl::Status Finish(const std::string& output_dir) { return absl::OkStatus(); }
};

using TaskFactory = absl::StatusOr<std::unique_ptr<Task>> (*)(const TaskContext& context);

// The task of a model `_target_` (registered at start-up by the task's
// translation unit, as _target_s are). Returns true, for static
// registration.
bool RegisterTask(const char* model_target, TaskFactory factory);

// The task for the config's model: a registered one, else the classifier.
absl::StatusOr<std::unique_ptr<Task>> MakeTask(const TaskContext& context);

// The classifier (classify_task.cc).
absl::StatusOr<std::unique_ptr<Task>> MakeClassifierTask(const TaskContext& context);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_TASK_H_
