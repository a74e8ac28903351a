#include "trainer/detect/ema.h"

#include <cmath>
#include <string>

namespace elastrun::trainer::detect {
namespace {

// The model's entry for `name` of the average: the same shape, or throws.
const at::Tensor& Source(const torch::OrderedDict<std::string, at::Tensor>& state,
                         const std::string& name, const at::Tensor& v) {
  const at::Tensor* m = state.find(name);
  TORCH_CHECK(m != nullptr, "ModelEma: the model has no '", name,
              "' that the average has (not the same model type?)");
  TORCH_CHECK(m->sizes() == v.sizes(), "ModelEma: '", name, "' is ", m->sizes(),
              " in the model but ", v.sizes(), " in the average");
  return *m;
}

// The model's parameters and buffers by name, as its state_dict.
torch::OrderedDict<std::string, at::Tensor> State(const torch::nn::Module& model) {
  torch::OrderedDict<std::string, at::Tensor> state = model.named_parameters();
  for (const auto& b : model.named_buffers()) state.insert(b.key(), b.value());
  return state;
}

}  // namespace

ModelEmaImpl::ModelEmaImpl(std::shared_ptr<torch::nn::Module> copy, double decay, double tau)
    : decay_(decay), tau_(tau) {
  model_ = register_module("model", std::move(copy));
  updates_ = register_buffer("updates", at::zeros({}, at::kLong));
  for (at::Tensor& p : model_->parameters()) p.requires_grad_(false);
  model_->eval();
}

void ModelEmaImpl::train(bool on) {
  torch::nn::Module::train(on);
  model_->eval();
}

double ModelEmaImpl::decay_now() const {
  return decay_ * (1 - std::exp(-static_cast<double>(updates()) / tau_));
}

void ModelEmaImpl::Init(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const auto state = State(model);
  for (auto& entry : State(*model_)) {
    entry.value().copy_(Source(state, entry.key(), entry.value()));
  }
}

void ModelEmaImpl::Update(const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  updates_ += 1;
  const double d = decay_now();
  const auto state = State(model);
  for (auto& entry : State(*model_)) {
    at::Tensor& v = entry.value();
    const at::Tensor& m = Source(state, entry.key(), v);
    if (at::isFloatingType(v.scalar_type())) {
      // YOLOv5's `v *= d; v += (1 - d) * msd[k].detach()`, op for op.
      v.mul_(d);
      v.add_((1 - d) * m.to(v.device()));
    } else {
      v.copy_(m);
    }
  }
}

}  // namespace elastrun::trainer::detect
