// Shim for a header Debian's libtorch-dev does not ship.
//
// c10d's reducer.hpp includes the distributed-autograd context only to
// static_assert that its GradCallback type equals Reducer's and to hold a
// ContextPtr (a shared_ptr, same layout whatever it points to). The trainer
// never uses distributed autograd (RPC), so declaring these two names is
// enough to use c10d::Reducer from C++. Keep the GradCallback signature in
// step with torch/csrc/distributed/autograd/context/context.h of the
// LibTorch version in use (1.13 to 2.x: std::function<bool(at::Tensor&)>).
//
// A LibTorch that ships the real header (pip's, any 2.x) gets it instead:
// this folder comes first on the include path, so the shim hands over.
#if defined(__has_include_next)
#if __has_include_next(<torch/csrc/distributed/autograd/context/context.h>)
#define ELASTRUN_TRAINER_SHIM_HAS_REAL_CONTEXT 1
#endif
#endif

#ifdef ELASTRUN_TRAINER_SHIM_HAS_REAL_CONTEXT
#include_next <torch/csrc/distributed/autograd/context/context.h>
#else
#ifndef ELASTRUN_TRAINER_SHIM_DIST_AUTOGRAD_CONTEXT_H_
#define ELASTRUN_TRAINER_SHIM_DIST_AUTOGRAD_CONTEXT_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch

#endif  // ELASTRUN_TRAINER_SHIM_DIST_AUTOGRAD_CONTEXT_H_
#endif
