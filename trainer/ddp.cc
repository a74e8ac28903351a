#include "trainer/ddp.h"

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
#include <unordered_map>

#include <torch/csrc/autograd/engine.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace elastrun::trainer {
namespace {

using BucketIndices = std::vector<std::vector<size_t>>;
using ParamNames = std::unordered_map<size_t, std::string>;
using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// c10d::Reducer as Python DDP builds it (dense gradients only). Its
// constructor changed
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
                               options.find_unused_parameters,
                               options.gradient_as_bucket_view, ParamNames{}, first_cap);
  } else if constexpr (std::is_constructible_v<R, Params, BucketIndices, GroupPtr, Sparse,
                                               int64_t, bool, bool, ParamNames, int64_t, bool,
                                               bool>) {
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group),
                               Sparse(n, false), cap, options.find_unused_parameters,
                               options.gradient_as_bucket_view, ParamNames{}, first_cap,
                               /*skip_all_reduce_unused_params=*/false,
                               /*use_python_reducer=*/false);
  } else {
    // No per-bucket caps (Python DDP without bucket_cap_mb_list): the two above.
    return std::make_unique<R>(std::move(params), std::move(buckets), std::move(group),
                               Sparse(n, false), cap, options.find_unused_parameters,
                               options.gradient_as_bucket_view, ParamNames{}, first_cap,
                               false, false, /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  }
}

// The reducer's buckets as indices into `params`.
BucketIndices CurrentBuckets(const c10d::Reducer& reducer, const std::vector<at::Tensor>& params) {
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
  BucketIndices buckets;
  for (const c10d::GradBucket& b : reducer.get_grad_buckets(/*return_zero_tensors=*/false)) {
    std::vector<size_t>& bucket = buckets.emplace_back();
    for (const at::Tensor& p : b.getParameters()) bucket.push_back(index.at(p.unsafeGetTensorImpl()));
  }
  return buckets;
}

// Runs a reducer call; a c10::Error that says a parameter went without a
// gradient comes back naming the config key that allows it.
template <typename F>
auto Reducing(const DdpOptions& options, F&& call) {
  try {
    return call();
  } catch (const c10::Error& e) {
    if (options.find_unused_parameters || options.static_graph ||
        !absl::StrContains(e.what_without_backtrace(), "find_unused_parameters")) {
      throw;
    }
    C10_THROW_ERROR(
        Error, absl::StrCat("DDP: some parameter got no gradient in the last synced backward "
                            "(not used in the loss); set train.ddp.find_unused_parameters: true "
                            "(or train.ddp.static_graph: true when the same ones are unused "
                            "every step). The reducer said: ",
                            e.what_without_backtrace()));
  }
}

}  // namespace

DdpOptions DdpOptionsFrom(const TrainOptions& train) {
  DdpOptions o;
  o.find_unused_parameters = train.ddp.find_unused_parameters;
  o.static_graph = train.ddp.static_graph;
  o.broadcast_buffers = train.ddp.broadcast_buffers;
  // Python DDP's int(bucket_cap_mb * 1024 * 1024).
  o.bucket_bytes = static_cast<size_t>(train.ddp.bucket_cap_mb * 1024 * 1024);
  o.gradient_as_bucket_view = train.ddp.gradient_as_bucket_view;
  return o;
}

void ZeroGrad(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params) {
    at::Tensor& g = const_cast<at::Tensor&>(p).mutable_grad();
    if (!g.defined()) continue;
    if (g.grad_fn()) {
      g.detach_();
    } else {
      g.requires_grad_(false);
    }
    g.zero_();
  }
}

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
    if (options.bucket_bytes == 0) {
      return absl::InvalidArgumentError("DDP: bucket_bytes (train.ddp.bucket_cap_mb) must be positive");
    }
    ddp->buffers_ = ddp->module_->buffers();
    ddp->BroadcastState(0);
    // As torch/nn/parallel/distributed.py: buckets by size in parameter
    // order, then reversed, since gradients arrive roughly last layer first.
    // A reducer that rebuilds its buckets from the first step's gradient
    // order (static_graph, or no unused parameters) starts with one bucket.
    const bool rebuilds = options.static_graph || !options.find_unused_parameters;
    const std::vector<size_t> caps =
        rebuilds ? std::vector<size_t>{static_cast<size_t>(std::numeric_limits<int64_t>::max())}
                 : std::vector<size_t>{options.first_bucket_bytes, options.bucket_bytes};
    std::vector<std::vector<size_t>> buckets;
    std::vector<size_t> limits;
    std::tie(buckets, limits) = c10d::compute_bucket_assignment_by_size(
        params, caps, std::vector<bool>(params.size(), false));
    std::reverse(buckets.begin(), buckets.end());
    std::reverse(limits.begin(), limits.end());
    ddp->buckets_ = buckets;
    ddp->params_ = params;
    ddp->reducer_ = MakeReducer(params, std::move(buckets), std::move(limits), ddp->group_,
                                options);
    if (options.static_graph) ddp->reducer_->set_static_graph();
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
  // DDP.forward's order: count the synced forward, then rebuild.
  if (sync) {
    ++synced_forwards_;
    reducer_->prepare_for_forward();
  }
  // Buckets are re-ordered once, after the first iteration, by the order in
  // which gradients became ready; calling this every step is what DDP does
  // (and skipping it leaks the Reducer's record of that order).
  if (Reducing(options_, [&] { return reducer_->rebuild_buckets(); })) {
    buckets_ = CurrentBuckets(*reducer_, params_);
  }
  if (options_.broadcast_buffers && buffers_need_sync_ && !buffers_.empty()) {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> buffers;
    for (const at::Tensor& b : buffers_) buffers.push_back(b.detach());
    c10d::broadcast_coalesced(group_, buffers, options_.broadcast_bytes, 0);
  }
}

void DistributedDataParallel::BeforeBackward(const at::Tensor& loss, bool sync) {
  if (!sync) return;
  buffers_need_sync_ = true;
  // DDP walks the graph from the forward's outputs only to find unused
  // parameters (and not with a static graph); from the loss it reaches the
  // same parameters, less those whose outputs the loss ignores.
  std::vector<at::Tensor> outputs;
  if (options_.find_unused_parameters && !options_.static_graph) outputs.push_back(loss);
  Reducing(options_, [&] { reducer_->prepare_for_backward(outputs); });
  if (options_.static_graph && synced_forwards_ == 1 && loss.requires_grad()) {
    // DDP's _DDPSink: the first step of a static graph reduces everything
    // once backward is done (delay_all_reduce), queued from inside backward.
    c10d::Reducer* reducer = reducer_.get();
    loss.register_hook([reducer](const at::Tensor&) {
      torch::autograd::Engine::get_default_engine().queue_callback(
          [reducer] { reducer->delay_all_reduce(); });
    });
  }
}

}  // namespace elastrun::trainer
