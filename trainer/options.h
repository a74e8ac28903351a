// The torch-free side of a trainer config: the `data` and `train` sections
// (plain sections checked against schemas), the command line, and loading
// plus validating a whole config. Models and optimizers are `_target_`s in
// the registry (models.cc, optimizer.cc, schedule.cc).
#ifndef ELASTRUN_TRAINER_OPTIONS_H_
#define ELASTRUN_TRAINER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/node.h"
#include "common/config/schema.h"

namespace elastrun::trainer {

// The `data` section.
struct DataOptions {
  // Folder with the Fashion-MNIST IDX files.
  std::string root = "/usr/share/datasets/fashion-mnist";
  // Per-worker batch; the global batch is batch_size * world size.
  int64_t batch_size = 64;
  // Random, learnable tensors of the same shape instead of files.
  bool synthetic = false;
  // Samples of the synthetic train and test splits.
  int64_t synthetic_train_size = 60000;
  int64_t synthetic_test_size = 10000;
  int64_t num_classes = 10;
  int64_t image_size = 28;
  // Accepted for compatibility; the data sit in memory, no loader threads.
  int64_t num_workers = 0;
  // Drop the last incomplete shard samples (DistributedSampler's drop_last).
  bool drop_last = false;
  // The detector's (model `_target_: YoloV5`): its dataset's data.yaml
  // (YOLOv5's form, trainer/detect/README.md) and, optionally, a YOLOv5
  // hyp.yaml that the config's `hyp:` section overrides.
  std::string yaml;
  std::string hyp;
  // The detector's decoded images kept in memory, up to this many MiB per
  // rank (YOLOv5's --cache ram); 0: decoded again every epoch. The same
  // batches either way.
  int64_t cache_mb = 0;
  // The detector's batches loaded ahead of training, per rank (PyTorch
  // DataLoader's prefetch_factor, in batches).
  int64_t prefetch = 2;
};

// `train.ddp`: torch.nn.parallel.DistributedDataParallel's arguments, with
// its defaults (ddp.h's DdpOptions says what each does).
struct DdpConfig {
  // Parameters the loss may not use in a step (walk the graph each step).
  bool find_unused_parameters = false;
  // The same parameters are used in every step.
  bool static_graph = false;
  // Broadcast rank 0's buffers before every synced forward.
  bool broadcast_buffers = true;
  // Gradient bucket size in MiB (> 0; fractions allowed).
  double bucket_cap_mb = 25;
  // Gradients as views into the buckets (no copy; less memory).
  bool gradient_as_bucket_view = false;
};

// The `train` section.
struct TrainOptions {
  int64_t epochs = 10;
  // Seed of the model's initial weights, the sampler and dropout.
  int64_t seed = 0;
  // Metrics, the resolved config and checkpoints go here.
  std::string output_dir = "runs/default";
  // Checkpoint every N epochs (and after the last); 0: never.
  int64_t checkpoint_period = 1;
  // Also checkpoint every N iterations inside an epoch; 0: only at epoch ends.
  int64_t checkpoint_iters = 0;
  // Snapshot the state into memory every N optimizer steps (tier 1, see
  // train_loop.h); 0: every step unless a copy costs over 2% of a step,
  // then as often as that budget allows; -1: never.
  int64_t snapshot_iters = 0;
  // Rank 0 prints a progress line every N iterations (0: only per epoch).
  int64_t log_period = 50;
  // Intra-op threads per rank (torch::set_num_threads).
  int64_t threads = 1;
  // Where this rank trains (ParseDevice): "auto" is the GPU of its
  // LOCAL_RANK when CUDA is usable, else the CPU.
  std::string device = "auto";
  // Mixed precision: forward passes under autocast to amp_dtype. float16
  // runs with the dynamic loss scaler (loss_scaler.h) and autocasts on CUDA
  // only (on a CPU the scaler runs alone, in fp32); bfloat16 autocasts on
  // CUDA and CPU and needs no scaling.
  bool amp = false;
  std::string amp_dtype = "float16";
  // BatchNorm statistics reduced over the job's ranks (the detector's
  // SyncBatchNorm; Gloo on a CPU, NCCL on GPUs).
  bool sync_bn = false;
  // Distributed data parallel (with more than one rank).
  DdpConfig ddp;
  // Names the run in its checkpoints (run_identity.h) in place of the
  // launcher's run id, so a later submission with the same name (and
  // config) resumes it. "": the launcher's TORCHELASTIC_RUN_ID.
  std::string run_name;
};

// train.device, parsed: "auto", "cpu", "cuda" (the GPU of the rank's
// LOCAL_RANK) or "cuda:N".
struct DeviceChoice {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // cuda:N's N; -1: by LOCAL_RANK.
};
// InvalidArgument naming the accepted forms.
absl::StatusOr<DeviceChoice> ParseDevice(const std::string& text);

const config::Schema& DataSchema();
const config::Schema& TrainSchema();

// Reads a checked section (defaults filled by the schema).
DataOptions DataOptionsFrom(const config::Node& data);
TrainOptions TrainOptionsFrom(const config::Node& train);

// The command line of elastrun-train.
struct Flags {
  std::string config;                  // --config F (required unless listing).
  std::vector<std::string> overrides;  // key=value, +key=value, ~key.
  bool print_config = false;           // --print-config
  bool list_targets = false;           // --list-targets
  bool help = false;                   // --help / -h
  bool version = false;                // --version
  // --resume [PATH]: "" means the newest checkpoint of the run.
  std::optional<std::string> resume;
};

// Parses with CLI11 (common/flags.h): "--flag value" and "--flag=value"; an
// argument without a leading "-" is an override. `--resume` takes the next
// word as its PATH unless it is a flag or an override (has "="). Returns
// InvalidArgument naming the flag on an unknown flag, a missing value, a
// value given to a flag that takes none, or no --config where one is
// needed; main prints it in the common style and exits 2.
absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args);

// The text of `elastrun-train --help`.
std::string Usage();

// A loaded trainer config: the resolved tree (what --print-config shows and
// the run folder keeps) with `data` and `train` checked and defaults filled.
struct TrainerConfig {
  config::Node resolved;
  DataOptions data;
  TrainOptions train;
};

// LoadConfig(path, overrides), then checks every section: `data` and
// `train` against their schemas, and `model`, `optimizer`, `scheduler` by
// instantiating them (which checks their arguments; building a model is
// cheap). Errors name the file, line and key (see common/config).
absl::StatusOr<TrainerConfig> LoadTrainerConfig(const std::string& path,
                                                const std::vector<std::string>& overrides);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_OPTIONS_H_
