#include "trainer/detect/sync_bn.h"

#include <vector>

namespace elastrun::trainer::detect {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using GroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;

// Sums `t` over the group, in place, and waits.
void AllReduce(const GroupPtr& group, at::Tensor& t) {
  std::vector<at::Tensor> tensors{t};
  group->allreduce(tensors)->wait();
}

// [C] -> [1, C, 1, 1], to broadcast over an NCHW input.
at::Tensor PerChannel(const at::Tensor& t) { return t.view({1, -1, 1, 1}); }

// torch.nn.SyncBatchNorm's autograd function (torch/nn/modules/_functions.py),
// with the statistics allreduced as sums instead of all-gathered.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  // Normalises `x` with the group's batch statistics and updates the
  // running ones (when defined) with `momentum`.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean,
                            at::Tensor running_var, double eps, double momentum,
                            const GroupPtr& group) {
    const int64_t channels = x.size(1);
    const double local_count = x.numel() > 0 ? static_cast<double>(x.numel() / channels) : 0.0;
    // Per rank: count, sum and sum of squares, from the local mean and
    // biased variance (stable in the input's precision), summed in float64
    // so that the global variance E[x^2] - E[x]^2 loses nothing that
    // matters to a float32 input.
    const auto f64 = x.options().dtype(at::kDouble);
    at::Tensor stats = at::zeros({2 * channels + 1}, f64);
    if (x.numel() > 0) {
      auto [var, mean] = at::var_mean(x, {0, 2, 3}, /*unbiased=*/false);
      const at::Tensor m = mean.to(at::kDouble);
      stats.slice(0, 0, channels).copy_(m * local_count);
      stats.slice(0, channels, 2 * channels).copy_((var.to(at::kDouble) + m * m) * local_count);
      stats[2 * channels].fill_(local_count);
    }
    AllReduce(group, stats);
    const double count = stats[2 * channels].item<double>();
    TORCH_CHECK(count > 1, "Expected more than 1 value per channel when training, got input size ",
                x.sizes(), " on every rank of the group together");
    const at::Tensor mean = stats.slice(0, 0, channels) / count;
    const at::Tensor var =
        (stats.slice(0, channels, 2 * channels) / count - mean * mean).clamp_min(0.0);
    if (running_mean.defined()) {
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()) * momentum);
    }
    if (running_var.defined()) {
      running_var.mul_(1 - momentum)
          .add_((var * (count / (count - 1))).to(running_var.scalar_type()) * momentum);
    }
    const at::Tensor mean_x = mean.to(x.scalar_type());
    const at::Tensor invstd = (var + eps).rsqrt().to(x.scalar_type());
    ctx->save_for_backward({x, weight, mean_x, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["group"] = c10::IValue::make_capsule(group);
    // Eval-mode batch_norm normalises with the statistics it is given.
    return at::batch_norm(x, weight, bias, mean_x, var.to(x.scalar_type()),
                          /*training=*/false, 0.0, eps, /*cudnn_enabled=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const at::Tensor dy = grad_outputs[0];
    const double count = ctx->saved_data["count"].toDouble();
    const GroupPtr group =
        c10::static_intrusive_pointer_cast<c10d::ProcessGroup>(ctx->saved_data["group"].toCapsule());
    const int64_t channels = x.size(1);
    at::Tensor grad_input, grad_weight, grad_bias;
    const at::Tensor xmu = x - PerChannel(mean);
    at::Tensor sum_dy = dy.sum({0, 2, 3});
    at::Tensor sum_dy_xmu = (dy * xmu).sum({0, 2, 3});
    if (weight.defined() && ctx->needs_input_grad(1)) grad_weight = sum_dy_xmu * invstd;
    if (weight.defined() && ctx->needs_input_grad(2)) grad_bias = sum_dy.clone();
    if (ctx->needs_input_grad(0)) {
      at::Tensor sums = at::cat({sum_dy, sum_dy_xmu}).to(at::kDouble);
      AllReduce(group, sums);
      const at::Tensor mean_dy = (sums.slice(0, 0, channels) / count).to(x.scalar_type());
      const at::Tensor mean_dy_xmu =
          (sums.slice(0, channels, 2 * channels) / count).to(x.scalar_type());
      const at::Tensor scale = weight.defined() ? invstd * weight : invstd;
      grad_input = (dy - PerChannel(mean_dy) - xmu * PerChannel(invstd * invstd * mean_dy_xmu)) *
                   PerChannel(scale);
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(),
            at::Tensor(),  at::Tensor(),  at::Tensor()};
  }
};

}  // namespace

SyncBatchNorm2dImpl::SyncBatchNorm2dImpl(const torch::nn::BatchNorm2dOptions& options)
    : options(options) {
  reset();
}

// As torch::nn::NormImplBase and BatchNormImplBase.
void SyncBatchNorm2dImpl::reset() {
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", at::empty({c}));
    bias = register_parameter("bias", at::empty({c}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({c}));
    running_var = register_buffer("running_var", at::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  reset_parameters();
}

void SyncBatchNorm2dImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNorm2dImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

at::Tensor SyncBatchNorm2dImpl::forward(const at::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, "expected 4D input (got ", input.dim(), "D input)");
  // BatchNormImplBase::forward's bookkeeping.
  double momentum = options.momentum().value_or(0.0);
  if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum().has_value()) {
      momentum = 1.0 / num_batches_tracked.item<double>();
    }
  }
  if (!(is_training() && group_ && group_->getSize() > 1)) {
    // BatchNorm2d's very call.
    return torch::nn::functional::detail::batch_norm(
        input, running_mean, running_var, weight, bias,
        is_training() || !options.track_running_stats(), momentum, options.eps());
  }
  TORCH_CHECK(input.size(1) == options.num_features(), "SyncBatchNorm2d: expected ",
              options.num_features(), " channels, got input of size ", input.sizes());
  // Under autocast (bfloat16 or float16 activations, float32 weights) the
  // statistics and the normalisation run in the weights' precision, as
  // torch.nn.SyncBatchNorm's do; the next layer casts down again.
  const at::Tensor x = weight.defined() && input.scalar_type() != weight.scalar_type()
                           ? input.to(weight.scalar_type())
                           : input;
  return SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var,
                                      options.eps(), momentum, group_);
}

void SyncBatchNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "elastrun::trainer::detect::SyncBatchNorm2d(" << options.num_features()
         << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum().has_value()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << options.affine()
         << ", track_running_stats=" << options.track_running_stats()
         << ", group=" << (group_ ? group_->getSize() : 0) << " ranks)";
}

int UseSyncBatchNorm(torch::nn::Module& model, c10::intrusive_ptr<c10d::ProcessGroup> group) {
  // modules(include_self) needs `model` held by a shared_ptr: itself apart.
  std::vector<torch::nn::Module*> all{&model};
  for (const std::shared_ptr<torch::nn::Module>& m : model.modules(/*include_self=*/false)) {
    all.push_back(m.get());
  }
  int n = 0;
  for (torch::nn::Module* m : all) {
    if (auto* bn = dynamic_cast<SyncBatchNorm2dImpl*>(m)) {
      bn->SetProcessGroup(group);
      ++n;
    }
  }
  return n;
}

}  // namespace elastrun::trainer::detect
