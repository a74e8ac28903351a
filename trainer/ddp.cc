#include "trainer/ddp.h"

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace elastrun::trainer {
namespace {

using BucketIndices = std::vector<std::vector<size_t>>;
using ParamNames = std::unordered_map<size_t, std::string>;
using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// c10d::Reducer with DDP's defaults (no unused parameters, no sparse
// gradients, grads copied out of the buckets). Its constructor changed
// within 2.x: 1.13 and the early 2.x releases take the per-bucket size
// limits third; 2025's releases drop them (the reducer derives them from the
// two caps) and end with skip_all_reduce_unused_params (2.8) and
// use_python_reducer, the newest with a bucket_bytes_cap_list after those.
// The header in use says which it has (no single release number marks it);
// R is a template parameter so that only the matching branch compiles.
template <typename R = c10d::Reducer>
std::unique_ptr<R> MakeReducer(std::vector<at::Tensor> params, BucketIndices buckets,
                               std::vector<size_t> limits, GroupPtr group,
                               const DdpOptions& options) {
  const size_t n = params.size();
  const auto cap = static_cast<int64_t>(options.bucket_bytes);
  const auto first_cap = static_cast<int64_t>(options.first_bucket_bytes);
  using Params = std::vector<at::Tensor>;
  using Sparse = std::vector<bool>;
  if constexpr (std::is_constructible_v<R, Params, BucketIndices, std::vector<size_t>, GroupPtr,
                                        Sparse, int64_t, bool, bool, ParamNames, int64_t>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(limits),
                               std::move(group), Sparse(n, false), cap,
                               /*find_unused_parameters=*/false,
                               /*gradient_as_bucket_view=*/false, ParamNames{}, first_cap);
  } else if constexpr (std::is_constructible_v<R, Params, BucketIndices, GroupPtr, Sparse,
                                               int64_t, bool, bool, ParamNames, int64_t, bool,
                                               bool>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group),
                               Sparse(n, false), cap, false, false, ParamNames{}, first_cap,
                               /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false);
  } else {
    // No per-bucket caps (Python DDP without bucket_cap_mb_list): the two above.
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group),
                               Sparse(n, false), cap, false, false, ParamNames{}, first_cap,
                               false, false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                 const DdpOptions& options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {}

DistributedDataParallel::~DistributedDataParallel() = default;

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group,
    const DdpOptions& options) {
  std::unique_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(module), std::move(group), options));
  try {
    std::vector<at::Tensor> params;
    for (const at::Tensor& p : ddp->module_->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
    if (params.empty()) return absl::InvalidArgumentError("DDP: the model has no parameters");
    if (options.stop_vote) {
      ddp->stop_vote_ = torch::zeros({1}, params.front().options()).requires_grad_(true);
      params.push_back(ddp->stop_vote_);
    }
    ddp->buffers_ = ddp->module_->buffers();
    ddp->BroadcastState(0);
    // As torch/nn/parallel/distributed.py: buckets by size in parameter
    // order, then reversed, since gradients arrive roughly last layer first.
    std::vector<std::vector<size_t>> buckets;
    std::vector<size_t> limits;
    std::tie(buckets, limits) = c10d::compute_bucket_assignment_by_size(
        params, {options.first_bucket_bytes, options.bucket_bytes},
        std::vector<bool>(params.size(), false));
    std::reverse(buckets.begin(), buckets.end());
    std::reverse(limits.begin(), limits.end());
    ddp->buckets_ = buckets;
    ddp->reducer_ = MakeReducer(params, std::move(buckets), std::move(limits), ddp->group_,
                                options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("DDP set-up failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("DDP set-up failed: ", e.what()));
  }
  return ddp;
}

void DistributedDataParallel::BroadcastState(int root) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state;
  for (const at::Tensor& p : module_->parameters()) state.push_back(p.detach());
  for (const at::Tensor& b : buffers_) state.push_back(b.detach());
  if (!state.empty()) {
    c10d::broadcast_coalesced(group_, state, options_.broadcast_bytes, root);
  }
}

at::Tensor DistributedDataParallel::StopTerm(bool stop) const {
  if (!stop_vote_.defined()) return at::Tensor();
  // d(term)/d(vote) = 1 or 0; the term itself is 0 x that = 0.
  return (stop_vote_ * (stop ? 1.0 : 0.0)).sum();
}

bool DistributedDataParallel::StopVoted() {
  if (!stop_vote_.defined() || !stop_vote_.grad().defined()) return false;
  at::Tensor& g = stop_vote_.mutable_grad();
  const bool voted = g.item<double>() > 0;
  g.zero_();
  return voted;
}

void DistributedDataParallel::BeforeForward(bool sync) {
  // Buckets are re-ordered once, after the first iteration, by the order in
  // which gradients became ready; calling this every step is what DDP does
  // (and skipping it leaks the Reducer's record of that order).
  reducer_->rebuild_buckets();
  if (options_.broadcast_buffers && buffers_need_sync_ && !buffers_.empty()) {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> buffers;
    for (const at::Tensor& b : buffers_) buffers.push_back(b.detach());
    c10d::broadcast_coalesced(group_, buffers, options_.broadcast_bytes, 0);
  }
  if (sync) reducer_->prepare_for_forward();
}

void DistributedDataParallel::BeforeBackward(const at::Tensor& loss, bool sync) {
  if (!sync) return;
  buffers_need_sync_ = true;
  // With find_unused_parameters=false the outputs are not traversed; DDP
  // passes an empty list too.
  reducer_->prepare_for_backward({});
}

}  // namespace elastrun::trainer
