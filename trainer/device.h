// Where a rank trains and in what precision: the torch::Device that
// train.device names, autocast around forward passes (train.amp,
// train.amp_dtype), and the host copies that checkpoints of GPU tensors
// need. Nothing here needs a CUDA build of LibTorch to compile: the CUDA
// parts go through c10's device-generic interfaces, and only run where a
// GPU is usable.
#ifndef ELASTRUN_TRAINER_DEVICE_H_
#define ELASTRUN_TRAINER_DEVICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/options.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

struct Placement {
  torch::Device device = torch::kCPU;
  // Forward passes run under autocast to amp_dtype.
  bool autocast = false;
  at::ScalarType amp_dtype = at::kHalf;
  // The loss is scaled (LossScaler): train.amp with float16, which
  // underflows small gradients; bfloat16 has float32's range.
  bool loss_scaling = false;

  // "cpu" or "cuda:1", then the precision: the line rank 0 prints.
  std::string Describe() const;
};

// The placement of the rank with `local_rank` (its GPU by default: one
// GPU per local rank, as torchrun's users expect). Errors (FailedPrecondition,
// naming train.device): cuda asked for where CUDA is not usable (a CPU-only
// LibTorch, no GPU, CUDA_VISIBLE_DEVICES hiding them); cuda:N beyond the
// visible GPUs; a local rank without a GPU of its own. Makes the GPU the
// process's current device.
absl::StatusOr<Placement> ResolvePlacement(const TrainOptions& train, int local_rank);

// Prepares the placement's device before training starts, for a worker
// that waits as a standby: on a GPU its context and the cuBLAS and cuDNN
// handles that the first step would otherwise create (a restart then pays
// none of it). Best effort: an error here is left for the run to report.
// Nothing to do on a CPU.
void WarmUp(const Placement& placement);

// Autocast on the placement's device type for the scope (a no-op without
// placement.autocast), as `with torch.autocast(device, dtype):` does:
// the previous state comes back at the end, and the cache of cast weights
// is cleared when the outermost scope ends. One thread: autocast state is
// thread-local.
class AutocastScope {
 public:
  explicit AutocastScope(const Placement& placement);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

// Host copies of `tensors` (the same tensor where it already is on the
// host): every GPU tensor is copied into pinned memory without blocking,
// then one wait per device, so a capture costs one round trip, not one per
// tensor. Strides are kept.
std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_DEVICE_H_
