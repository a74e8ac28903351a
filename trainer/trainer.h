// The training loop of elastrun-train: one process per rank, DDP over the
// job's process group (worker/: Gloo, NCCL on a GPU), YOLOv5's schedule, distributed evaluation,
// metrics and the final line. Torch-free interface, so main.cc and other
// callers compile without LibTorch.
#ifndef ELASTRUN_TRAINER_TRAINER_H_
#define ELASTRUN_TRAINER_TRAINER_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/options.h"
#include "worker/env.h"

namespace elastrun::worker {
class ProcessGroup;
}  // namespace elastrun::worker

namespace elastrun::trainer {

struct RunOptions {
  // nullopt: a single process without a process group (started by hand).
  std::optional<worker::WorkerEnv> env;
  // Where rank 0 prints progress and the final line.
  std::FILE* out = stdout;
  // Draw a progress bar (a terminal); otherwise plain lines.
  bool tty = false;
  // Resume: nullopt = start fresh; "" = the newest usable checkpoint of the
  // run (start fresh when there is none); a path = that file (an error when
  // no rank has it or it is corrupt). Every rank looks for checkpoints; the
  // rank with the newest one broadcasts it, so all ranks start bitwise
  // identical even when only one node holds the file.
  std::optional<std::string> resume;
  // The launcher's run id (TORCHELASTIC_RUN_ID; "" when started by hand).
  // With train.run_name it names the run in its checkpoints
  // (run_identity.h). When the run has an id (either is set), the trainer
  // resumes whenever a checkpoint of this run exists on any rank, even
  // with `resume` unset: after a worker restart, a node-loss re-form, a
  // scale-up, or a resubmission under the same train.run_name.
  std::string run_id;
  // Fault injection for tests: rank `fail_rank` kills itself (SIGKILL) when
  // it reaches global iteration `fail_at_iteration`. -1: never.
  int fail_rank = -1;
  int64_t fail_at_iteration = -1;
  // For benchmarks (bench/launch_bench.py's protocol): once this process's
  // first batch is done (its loss on the host), the file
  // <ready_dir>/ready.<attempt>.<rank> appears, holding the wall-clock time
  // in ns. Empty: none.
  std::string ready_dir;
  // For tests: every batch this rank trains is appended to this file as a
  // line "<attempt> <epoch> <iteration in epoch> <sample index>...", with
  // one unbuffered write per batch, so a killed rank's lines are complete.
  // The iteration counts global batches of this world's size from the
  // epoch's start. Empty: no log.
  std::string sample_log;
  int attempt = 0;
  // For tests that must act while training is at a known point (a node
  // rejoining before the run ends): before each batch, every rank waits
  // while this file exists (checking every 10 ms, sending beats so the
  // launcher does not take it for a hang). Empty: never.
  std::string hold_file;
};

// What the final line reports.
struct TrainResult {
  int64_t epoch = 0;          // Epochs completed.
  double test_acc = 0;        // Fraction, over the whole test split.
  double test_loss = 0;
  double train_loss = 0;      // Mean over the last epoch, all ranks.
  // Of the parameters' bytes, in order: the state module's (task.h; the
  // detector's holds its EMA's too).
  std::string params_sha256;
  double seconds = 0;         // Wall time of training and evaluation.
};

// "final: epoch=2 test_acc=0.8512 train_loss=0.4123 params_sha256=..."
std::string FinalLine(const TrainResult& result);

// Trains as `config` says. Every rank returns the same result. Rank 0
// writes <output_dir>/config.yaml (the resolved config) and metrics.csv.
// Errors: data (naming the file), the process group (naming the peer or
// address), I/O of the run folder; LibTorch's exceptions are turned into
// Internal errors with their message.
absl::StatusOr<TrainResult> Train(const TrainerConfig& config, const RunOptions& options);

// For a worker started as a standby (`elastrun run --standby`), before it
// waits for its activation: loads the data (the same on every rank), and
// when the launcher says which local rank it will be
// (ELASTRUN_STANDBY_LOCAL_RANK) and that rank trains on a GPU, prepares
// that GPU (device.h, WarmUp). Best effort; returns at once for a worker
// that is not a standby.
void PrepareStandby(const TrainerConfig& config);

// As Train, over a process group the caller made (nullptr: one process);
// options.env is ignored. For tests that run ranks as threads.
absl::StatusOr<TrainResult> TrainOnGroup(const TrainerConfig& config,
                                         const RunOptions& options,
                                         worker::ProcessGroup* group);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_TRAINER_H_
