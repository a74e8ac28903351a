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

absl::StatusOr<YoloV5Schedule> YoloV5Schedule::Create(const ScheduleOptions& options,
                                                      double lr0,
                                                      int64_t batches_per_epoch,
                                                      int64_t nbs,
                                                      int64_t global_batch) {
  if (options.epochs <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler.epochs must be positive, got ", options.epochs));
  }
  if (batches_per_epoch <= 0 || nbs <= 0 || global_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule needs positive batches per epoch (", batches_per_epoch,
        "), nbs (", nbs, ") and global batch (", global_batch, ")"));
  }
  if (options.warmup_epochs < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler.warmup_epochs must be >= 0, got ", options.warmup_epochs));
  }
  return YoloV5Schedule(options, lr0, batches_per_epoch, nbs, global_batch);
}

YoloV5Schedule::YoloV5Schedule(const ScheduleOptions& options, double lr0, int64_t nb,
                               int64_t nbs, int64_t global_batch)
    : options_(options), lr0_(lr0), nbs_(nbs), global_batch_(global_batch) {
  warmup_iters_ = std::max<int64_t>(
      static_cast<int64_t>(RoundHalfEven(options.warmup_epochs * static_cast<double>(nb))),
      kMinWarmupIters);
  accumulate_ = std::max<int64_t>(
      static_cast<int64_t>(RoundHalfEven(static_cast<double>(nbs) / global_batch)), 1);
}

double YoloV5Schedule::LrFactor(int64_t epoch) const {
  const double e = static_cast<double>(epoch);
  const double n = static_cast<double>(options_.epochs);
  if (options_.one_cycle) {
    return ((1 - std::cos(e * M_PI / n)) / 2) * (options_.lrf - 1.0) + 1.0;
  }
  return (1 - e / n) * (1.0 - options_.lrf) + options_.lrf;
}

double YoloV5Schedule::ScaledWeightDecay(double weight_decay) const {
  return weight_decay * static_cast<double>(global_batch_ * accumulate_) /
         static_cast<double>(nbs_);
}

IterationValues YoloV5Schedule::At(int64_t ni, int64_t epoch) const {
  IterationValues v;
  const double target = lr0_ * LrFactor(epoch);
  if (ni <= warmup_iters_) {
    const double x = static_cast<double>(ni);
    const double nw = static_cast<double>(warmup_iters_);
    v.bias_lr = Interp(x, 0, nw, options_.warmup_bias_lr, target);
    v.lr = Interp(x, 0, nw, 0.0, target);
    v.momentum = Interp(x, 0, nw, options_.warmup_momentum, options_.momentum);
    v.accumulate = std::max<int64_t>(
        1, static_cast<int64_t>(RoundHalfEven(
               Interp(x, 0, nw, 1.0, static_cast<double>(nbs_) / global_batch_))));
  } else {
    v.bias_lr = target;
    v.lr = target;
    v.momentum = options_.momentum;
    v.accumulate = accumulate_;
  }
  return v;
}

namespace {

using config::Args;
using config::Object;
using config::Schema;
using config::Type;

ELASTRUN_REGISTER_TARGET(
    "YoloV5Schedule",
    "YOLOv5's schedule: linear warm-up of lr and momentum, then cosine or linear "
    "decay from lr0 to lr0 * lrf.",
    Schema()
        .Required("epochs", Type::Int(), "Epochs of the run (usually ${train.epochs}).")
        .Optional("lrf", Type::Double(), "0.01", "Final lr as a fraction of lr0.")
        .Optional("one_cycle", Type::Bool(), "true", "Cosine decay (false: linear).")
        .Optional("warmup_epochs", Type::Double(), "3.0",
                  "Warm-up epochs (at least 100 iterations).")
        .Optional("warmup_momentum", Type::Double(), "0.8", "Momentum at warm-up start.")
        .Optional("warmup_bias_lr", Type::Double(), "0.1", "Bias lr at warm-up start.")
        .Optional("momentum", Type::Double(), "0.937",
                  "Momentum after warm-up (usually ${optimizer.momentum})."),
    [](const Args& args) -> absl::StatusOr<Object> {
      ScheduleOptions o;
      o.epochs = args.Int("epochs");
      o.lrf = args.Double("lrf");
      o.one_cycle = args.Bool("one_cycle");
      o.warmup_epochs = args.Double("warmup_epochs");
      o.warmup_momentum = args.Double("warmup_momentum");
      o.warmup_bias_lr = args.Double("warmup_bias_lr");
      o.momentum = args.Double("momentum");
      if (o.epochs <= 0) return args.Error("epochs", "must be positive");
      if (o.lrf <= 0) return args.Error("lrf", "must be positive");
      if (o.warmup_epochs < 0) return args.Error("warmup_epochs", "must be >= 0");
      return Object::Of(o);
    });

}  // namespace
}  // namespace elastrun::trainer
