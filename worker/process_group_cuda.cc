// The NCCL half of worker::ProcessGroup: the only code of the worker library
// that needs CUDA's and NCCL's headers, compiled only with
// ELASTRUN_WITH_CUDA (worker/CMakeLists.txt).
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>
#include <exception>

#include "absl/strings/str_cat.h"
#include "worker/process_group.h"

namespace elastrun::worker::internal {

absl::StatusOr<c10::intrusive_ptr<CollectiveBackend>> MakeNcclBackend(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int device,
    std::chrono::milliseconds timeout) {
  std::string cause;
  try {
    const int count = c10::cuda::device_count();
    if (device >= count) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " cannot use cuda:", device, ": this process sees ", count,
          " GPU(s) (CUDA_VISIBLE_DEVICES=", visible != nullptr ? visible : "unset", ")"));
    }
    // NCCL's communicators are made lazily on the device of the first
    // collective's tensors; the current device makes everything else (the
    // trainer's allocations, cuda streams) land on the same GPU.
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::intrusive_ptr<CollectiveBackend>(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options));
  } catch (const c10::Error& e) {
    cause = e.what_without_backtrace();
  } catch (const std::exception& e) {
    cause = e.what();
  }
  return absl::UnavailableError(absl::StrCat("rank ", rank, " of ", world_size,
                                             " could not set up NCCL on cuda:", device, ": ",
                                             cause));
}

}  // namespace elastrun::worker::internal
