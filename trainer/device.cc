#include "trainer/device.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdlib>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

// LibTorch 2.4 replaced autocast's per-device functions (set_enabled for
// CUDA, set_cpu_enabled, set_autocast_gpu_dtype, ...) by ones taking the
// device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define ELASTRUN_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define ELASTRUN_AUTOCAST_BY_DEVICE_TYPE 0
#endif

namespace elastrun::trainer {
namespace {

const char* DtypeName(at::ScalarType t) { return t == at::kBFloat16 ? "bfloat16" : "float16"; }

absl::Status NotUsable(const TrainOptions& train, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("train.device is '", train.device, "' but ", why,
                   "; set train.device=cpu (or auto)"));
}

std::string VisibleDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? "unset" : absl::StrCat("'", v, "'");
}

bool AutocastEnabled(c10::DeviceType type) {
#if ELASTRUN_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                       : at::autocast::is_cpu_enabled();
#endif
}

void SetAutocast(c10::DeviceType type, bool enabled) {
#if ELASTRUN_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

at::ScalarType AutocastDtype(c10::DeviceType type) {
#if ELASTRUN_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

void SetAutocastDtype(c10::DeviceType type, at::ScalarType dtype) {
#if ELASTRUN_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

std::string Placement::Describe() const {
  std::string s = device.str();
  if (autocast) {
    absl::StrAppend(&s, ", amp: autocast ", DtypeName(amp_dtype),
                    loss_scaling ? " with dynamic loss scaling" : "");
  } else if (loss_scaling) {
    absl::StrAppend(&s, ", amp: float16 autocasts on CUDA only, so the loss scaler runs "
                        "alone in fp32 (train.amp_dtype=bfloat16 autocasts on a CPU)");
  }
  return s;
}

absl::StatusOr<Placement> ResolvePlacement(const TrainOptions& train, int local_rank) {
  ASSIGN_OR_RETURN(DeviceChoice choice, ParseDevice(train.device));
  Placement p;
  const bool cuda = torch::cuda::is_available();
  if (choice.kind == DeviceChoice::Kind::kCuda ||
      (choice.kind == DeviceChoice::Kind::kAuto && cuda)) {
    if (!cuda) {
      return NotUsable(train, absl::StrCat("CUDA is not usable here (a CPU-only LibTorch, "
                                           "or no GPU visible; CUDA_VISIBLE_DEVICES is ",
                                           VisibleDevices(), ")"));
    }
    const int count = static_cast<int>(torch::cuda::device_count());
    const int index = choice.index >= 0 ? choice.index : local_rank;
    if (choice.index >= count) {
      return NotUsable(train, absl::StrCat("only ", count, " GPU(s) are visible"));
    }
    if (index >= count) {
      return NotUsable(train, absl::StrCat("local rank ", local_rank,
                                           " has no GPU of its own (", count,
                                           " visible): start at most one rank per GPU "
                                           "(--nproc-per-node gpu)"));
    }
    p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    try {
      c10::impl::getDeviceGuardImpl(p.device.type())->setDevice(p.device);
    } catch (const c10::Error& e) {
      return absl::UnavailableError(absl::StrCat("cannot use ", p.device.str(), ": ",
                                                 e.what_without_backtrace()));
    }
  }
  if (train.amp) {
    p.amp_dtype = train.amp_dtype == "bfloat16" ? at::kBFloat16 : at::kHalf;
    // CPU autocast knows bfloat16 only.
    p.autocast = p.device.is_cuda() || p.amp_dtype == at::kBFloat16;
    p.loss_scaling = p.amp_dtype == at::kHalf;
  }
  return p;
}

void WarmUp(const Placement& placement) {
  if (!placement.device.is_cuda()) return;
  try {
    const auto on = at::TensorOptions().device(placement.device);
    const at::Tensor a = at::ones({8, 8}, on);
    (void)at::mm(a, a);  // cuBLAS
    (void)at::conv2d(at::ones({1, 1, 8, 8}, on), at::ones({1, 1, 3, 3}, on));  // cuDNN
    c10::impl::getDeviceGuardImpl(placement.device.type())
        ->getStream(placement.device)
        .synchronize();
  } catch (const std::exception&) {
    // The run itself meets the same error and reports it.
  }
}

AutocastScope::AutocastScope(const Placement& placement) {
  if (!placement.autocast) return;
  active_ = true;
  type_ = placement.device.type();
  was_enabled_ = AutocastEnabled(type_);
  was_dtype_ = AutocastDtype(type_);
  SetAutocast(type_, true);
  SetAutocastDtype(type_, placement.amp_dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The cast copies of the weights are kept for the outermost scope only,
  // as torch.autocast's __exit__ does: the next step's weights differ.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(type_, was_enabled_);
  SetAutocastDtype(type_, was_dtype_);
}

std::vector<at::Tensor> ToHost(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.is_cpu()) {
      out.push_back(t);
      continue;
    }
    at::Tensor host = at::empty_strided(
        t.sizes(), t.strides(), t.options().device(torch::kCPU).pinned_memory(true));
    host.copy_(t, /*non_blocking=*/true);
    out.push_back(host);
    if (std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  // Copies run on each device's current stream, after the work that made
  // the tensors: waiting for that stream is waiting for them.
  for (const c10::Device& d : devices) {
    c10::impl::getDeviceGuardImpl(d.type())->getStream(d).synchronize();
  }
  return out;
}

}  // namespace elastrun::trainer
