#include "trainer/optimizer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/registry.h"
#include "trainer/ddp.h"

namespace elastrun::trainer {

ParameterGroups SplitParameters(torch::nn::Module& model) {
  ParameterGroups g;
  for (const std::shared_ptr<torch::nn::Module>& m : model.modules(/*include_self=*/true)) {
    const bool is_norm = absl::StrContains(m->name(), "Norm");
    for (const auto& item : m->named_parameters(/*recurse=*/false)) {
      if (item.key() == "bias") {
        g.bias.push_back(item.value());
      } else if (item.key() == "weight" && is_norm) {
        g.norm.push_back(item.value());
      } else {
        g.decay.push_back(item.value());
      }
    }
  }
  return g;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerSpec& spec,
                                                             torch::nn::Module& model,
                                                             double weight_decay) {
  ParameterGroups g = SplitParameters(model);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<GroupKind> kinds;
  auto add = [&](std::vector<at::Tensor>& params, GroupKind kind, double wd) {
    if (params.empty()) return;
    std::unique_ptr<torch::optim::OptimizerOptions> options;
    if (spec.kind == OptimizerSpec::Kind::kSgd) {
      options = std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(spec.lr0)
              .momentum(spec.momentum)
              .nesterov(spec.nesterov)
              .weight_decay(wd));
    } else {
      options = std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(spec.lr0)
              .betas({spec.momentum, spec.beta2})
              .eps(spec.eps)
              .weight_decay(wd));
    }
    groups.emplace_back(params, std::move(options));
    kinds.push_back(kind);
  };
  add(g.bias, GroupKind::kBias, 0.0);
  add(g.decay, GroupKind::kDecay, weight_decay);
  add(g.norm, GroupKind::kNorm, 0.0);
  if (groups.empty()) return absl::InvalidArgumentError("the model has no parameters");
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (spec.kind == OptimizerSpec::Kind::kSgd) {
    opt = std::make_unique<torch::optim::SGD>(
        groups, torch::optim::SGDOptions(spec.lr0).momentum(spec.momentum).nesterov(spec.nesterov));
  } else {
    opt = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(spec.lr0));
  }
  return std::unique_ptr<Optimizer>(new Optimizer(spec, std::move(opt), std::move(kinds)));
}

void Optimizer::Apply(const IterationValues& v) {
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double lr = kinds_[i] == GroupKind::kBias ? v.bias_lr : v.lr;
    if (spec_.kind == OptimizerSpec::Kind::kSgd) {
      auto& o = static_cast<torch::optim::SGDOptions&>(groups[i].options());
      o.lr(lr);
      o.momentum(v.momentum);
    } else {
      static_cast<torch::optim::AdamWOptions&>(groups[i].options()).lr(lr);
    }
  }
  lr_ = v.lr;
}

bool Optimizer::ScaleGradients(double factor, bool check_finite) {
  torch::NoGradGuard no_grad;
  // One flag on the gradients' device, read once: on a GPU a read per
  // parameter would wait for the device that many times.
  at::Tensor found_inf;
  for (auto& group : optimizer_->param_groups()) {
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (factor != 1.0) p.mutable_grad().mul_(factor);
      if (!check_finite) continue;
      at::Tensor bad = at::isfinite(p.grad()).logical_not().any();
      found_inf = found_inf.defined() ? found_inf.logical_or_(bad) : bad;
    }
  }
  return found_inf.defined() && found_inf.item<bool>();
}

void Optimizer::Step() {
  optimizer_->step();
  ZeroGrad();
}

void Optimizer::ZeroGrad() {
  // In place (ddp.h): gradients may be views of DDP's buckets
  // (train.ddp.gradient_as_bucket_view), which LibTorch's zero_grad()
  // would detach.
  for (const auto& group : optimizer_->param_groups()) trainer::ZeroGrad(group.params());
}

namespace {

using config::Args;
using config::Object;
using config::Schema;
using config::Type;

absl::StatusOr<OptimizerSpec> CommonSpec(const Args& args) {
  OptimizerSpec s;
  s.lr0 = args.Double("lr0");
  s.momentum = args.Double("momentum");
  s.weight_decay = args.Double("weight_decay");
  s.nbs = args.Int("nbs");
  if (s.lr0 <= 0) return args.Error("lr0", "must be positive");
  if (s.momentum < 0 || s.momentum >= 1) return args.Error("momentum", "must be in [0, 1)");
  if (s.weight_decay < 0) return args.Error("weight_decay", "must be >= 0");
  if (s.nbs <= 0) return args.Error("nbs", "must be positive");
  if (args.Int("batch_size") <= 0) return args.Error("batch_size", "must be positive");
  return s;
}

Schema CommonSchema(const char* momentum_doc) {
  return Schema()
      .Required("lr0", Type::Double(), "Initial (peak) learning rate.")
      .Optional("momentum", Type::Double(), "0.937", momentum_doc)
      .Optional("weight_decay", Type::Double(), "0.0005",
                "Weight decay of non-bias, non-norm weights (scaled by batch / nbs).")
      .Optional("nbs", Type::Int(), "64", "Nominal batch size for gradient accumulation.")
      .Optional("batch_size", Type::Int(), "64",
                "Per-worker batch (usually ${data.batch_size}).");
}

ELASTRUN_REGISTER_TARGET(
    "SGD", "SGD with momentum/Nesterov and YOLOv5's three parameter groups.",
    CommonSchema("Momentum after warm-up.")
        .Optional("nesterov", Type::Bool(), "true", "Nesterov momentum."),
    [](const Args& args) -> absl::StatusOr<Object> {
      absl::StatusOr<OptimizerSpec> s = CommonSpec(args);
      if (!s.ok()) return s.status();
      s->kind = OptimizerSpec::Kind::kSgd;
      s->nesterov = args.Bool("nesterov");
      if (s->nesterov && s->momentum <= 0) {
        return args.Error("nesterov", "needs a positive momentum");
      }
      return Object::Of(*s);
    });

ELASTRUN_REGISTER_TARGET(
    "AdamW", "AdamW (decoupled weight decay) with YOLOv5's three parameter groups.",
    CommonSchema("beta1 (YOLOv5 passes momentum as beta1).")
        .Optional("beta2", Type::Double(), "0.999", "beta2.")
        .Optional("eps", Type::Double(), "1e-8", "Denominator epsilon."),
    [](const Args& args) -> absl::StatusOr<Object> {
      absl::StatusOr<OptimizerSpec> s = CommonSpec(args);
      if (!s.ok()) return s.status();
      s->kind = OptimizerSpec::Kind::kAdamW;
      s->beta2 = args.Double("beta2");
      s->eps = args.Double("eps");
      if (s->beta2 < 0 || s->beta2 >= 1) return args.Error("beta2", "must be in [0, 1)");
      if (s->eps <= 0) return args.Error("eps", "must be positive");
      return Object::Of(*s);
    });

}  // namespace
}  // namespace elastrun::trainer
