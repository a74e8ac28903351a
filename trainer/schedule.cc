#include "trainer/schedule.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/config/registry.h"

namespace elastrun::trainer {

double RoundHalfEven(double x) {
  // nearbyint follows the current rounding mode; the default (and the only
  // one this program uses) is to-nearest-even.
  return std::nearbyint(x);
}

double Interp(double x, double x0, double x1, double y0, double y1) {
  if (x <= x0) return y0;
  if (x >= x1) return y1;
  return y0 + (x - x0) * (y1 - y0) / (x1 - x0);
}

double CosineRestartsLr(double epoch, double lr0, int64_t t_0, int64_t t_mult, double eta_min) {
  // torch/optim/lr_scheduler.py, CosineAnnealingWarmRestarts.step(epoch).
  const double t0 = static_cast<double>(t_0);
  double t_i = t0;
  double t_cur = epoch;
  if (epoch >= t0) {
    if (t_mult == 1) {
      t_cur = std::fmod(epoch, t0);  // Python's % for non-negative operands
    } else {
      const double m = static_cast<double>(t_mult);
      const double n = std::trunc(std::log(epoch / t0 * (m - 1) + 1) / std::log(m));
      t_cur = epoch - t0 * (std::pow(m, n) - 1) / (m - 1);
      t_i = t0 * std::pow(m, n);
    }
  }
  return eta_min + (lr0 - eta_min) * (1 + std::cos(M_PI * t_cur / t_i)) / 2;
}

absl::StatusOr<YoloV5Schedule> YoloV5Schedule::Create(const ScheduleOptions& options,
                                                      double lr0, int64_t nbs,
                                                      int64_t warmup_samples,
                                                      int64_t epoch_samples) {
  if (options.decay == ScheduleOptions::Decay::kCosineRestarts) {
    if (options.t_0 < 1 || options.t_mult < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scheduler.T_0 and scheduler.T_mult must be at least 1, got ", options.t_0, " and ",
          options.t_mult));
    }
    if (epoch_samples < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CosineAnnealingWarmRestarts needs the samples per epoch, got ", epoch_samples));
    }
  } else if (options.epochs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler.epochs must be positive, got ", options.epochs));
  }
  if (nbs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.nbs (the nominal batch) must be positive, got ", nbs));
  }
  if (options.warmup_epochs < 0 || warmup_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler.warmup_epochs must be >= 0, got ", options.warmup_epochs));
  }
  return YoloV5Schedule(options, lr0, nbs, warmup_samples, epoch_samples);
}

int64_t YoloV5Schedule::WarmupSamples(const ScheduleOptions& options,
                                      int64_t batches_per_epoch, int64_t global_batch) {
  const int64_t nw = std::max<int64_t>(
      static_cast<int64_t>(
          RoundHalfEven(options.warmup_epochs * static_cast<double>(batches_per_epoch))),
      kMinWarmupIters);
  return nw * global_batch;
}

double YoloV5Schedule::LrFactor(int64_t epoch) const {
  const double e = static_cast<double>(epoch);
  const double n = static_cast<double>(options_.epochs);
  if (options_.one_cycle) {
    return ((1 - std::cos(e * M_PI / n)) / 2) * (options_.lrf - 1.0) + 1.0;
  }
  return (1 - e / n) * (1.0 - options_.lrf) + options_.lrf;
}

int64_t YoloV5Schedule::Accumulate(int64_t global_batch) const {
  return std::max<int64_t>(
      static_cast<int64_t>(RoundHalfEven(static_cast<double>(nbs_) /
                                         static_cast<double>(std::max<int64_t>(global_batch, 1)))),
      1);
}

double YoloV5Schedule::ScaledWeightDecay(double weight_decay, int64_t global_batch) const {
  return weight_decay * static_cast<double>(global_batch * Accumulate(global_batch)) /
         static_cast<double>(nbs_);
}

double YoloV5Schedule::TargetLr(int64_t seen, int64_t epoch) const {
  if (options_.decay == ScheduleOptions::Decay::kCosineRestarts) {
    return CosineRestartsLr(static_cast<double>(seen) / static_cast<double>(epoch_samples_), lr0_,
                            options_.t_0, options_.t_mult, options_.eta_min);
  }
  return lr0_ * LrFactor(epoch);
}

IterationValues YoloV5Schedule::At(int64_t seen, int64_t epoch, int64_t global_batch) const {
  IterationValues v;
  const double target = TargetLr(seen, epoch);
  if (seen <= warmup_samples_) {
    const double x = static_cast<double>(seen);
    const double nw = static_cast<double>(warmup_samples_);
    v.bias_lr = Interp(x, 0, nw, options_.warmup_bias_lr, target);
    v.lr = Interp(x, 0, nw, 0.0, target);
    v.momentum = Interp(x, 0, nw, options_.warmup_momentum, options_.momentum);
    v.accumulate = std::max<int64_t>(
        1, static_cast<int64_t>(RoundHalfEven(
               Interp(x, 0, nw, 1.0,
                      static_cast<double>(nbs_) /
                          static_cast<double>(std::max<int64_t>(global_batch, 1))))));
  } else {
    v.bias_lr = target;
    v.lr = target;
    v.momentum = options_.momentum;
    v.accumulate = Accumulate(global_batch);
  }
  return v;
}

namespace {

using config::Args;
using config::Object;
using config::Schema;
using config::Type;

// YOLOv5's warm-up keys, shared by the schedules.
Schema WithWarmup(Schema s) {
  s.Optional("warmup_epochs", Type::Double(), "3.0", "Warm-up epochs (at least 100 iterations).")
      .Optional("warmup_momentum", Type::Double(), "0.8", "Momentum at warm-up start.")
      .Optional("warmup_bias_lr", Type::Double(), "0.1", "Bias lr at warm-up start.")
      .Optional("momentum", Type::Double(), "0.937",
                "Momentum after warm-up (usually ${optimizer.momentum}).");
  return s;
}

absl::Status ReadWarmup(const Args& args, ScheduleOptions* o) {
  o->warmup_epochs = args.Double("warmup_epochs");
  o->warmup_momentum = args.Double("warmup_momentum");
  o->warmup_bias_lr = args.Double("warmup_bias_lr");
  o->momentum = args.Double("momentum");
  if (o->warmup_epochs < 0) return args.Error("warmup_epochs", "must be >= 0");
  return absl::OkStatus();
}

ELASTRUN_REGISTER_TARGET(
    "YoloV5Schedule",
    "YOLOv5's schedule: linear warm-up of lr and momentum, then cosine or linear "
    "decay from lr0 to lr0 * lrf.",
    WithWarmup(Schema()
                   .Required("epochs", Type::Int(), "Epochs of the run (usually ${train.epochs}).")
                   .Optional("lrf", Type::Double(), "0.01", "Final lr as a fraction of lr0.")
                   .Optional("one_cycle", Type::Bool(), "true", "Cosine decay (false: linear).")),
    [](const Args& args) -> absl::StatusOr<Object> {
      ScheduleOptions o;
      o.epochs = args.Int("epochs");
      o.lrf = args.Double("lrf");
      o.one_cycle = args.Bool("one_cycle");
      if (absl::Status s = ReadWarmup(args, &o); !s.ok()) return s;
      if (o.epochs <= 0) return args.Error("epochs", "must be positive");
      if (o.lrf <= 0) return args.Error("lrf", "must be positive");
      return Object::Of(o);
    });

ELASTRUN_REGISTER_TARGET(
    "CosineAnnealingWarmRestarts",
    "SGDR (torch.optim.lr_scheduler.CosineAnnealingWarmRestarts) over fractional epochs, "
    "after YOLOv5's warm-up: the lr falls from lr0 to eta_min along a cosine in T_0 epochs, "
    "restarts, each period T_mult times the last.",
    WithWarmup(Schema()
                   .Required("T_0", Type::Int(), "Epochs of the first period (>= 1).")
                   .Optional("T_mult", Type::Int(), "1", "Growth of each period (>= 1).")
                   .Optional("eta_min", Type::Double(), "0.0", "The lowest lr (absolute).")),
    [](const Args& args) -> absl::StatusOr<Object> {
      ScheduleOptions o;
      o.decay = ScheduleOptions::Decay::kCosineRestarts;
      o.t_0 = args.Int("T_0");
      o.t_mult = args.Int("T_mult");
      o.eta_min = args.Double("eta_min");
      if (absl::Status s = ReadWarmup(args, &o); !s.ok()) return s;
      if (o.t_0 < 1) return args.Error("T_0", "must be at least 1");
      if (o.t_mult < 1) return args.Error("T_mult", "must be at least 1");
      if (o.eta_min < 0) return args.Error("eta_min", "must be >= 0");
      return Object::Of(o);
    });

}  // namespace
}  // namespace elastrun::trainer
