// The detector task (trainer/task.h) for `_target_: YoloV5`: a YOLOv5
// dataset (data.yaml), YOLOv5's hyperparameters (hyp.h), augmented batches
// from the threaded loader (loader.h), YOLOv5's loss, the EMA of the
// weights (evaluated and saved), AutoAnchor before a fresh run, SyncBN,
// and YOLOv5's evaluation: NMS, P, R, mAP@0.5, mAP@0.5:0.95 and fitness
// over every rank's share of the val split, results.csv, plots, the
// per-class table and COCO JSON at the end.
#include "trainer/task.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/config.h"
#include "common/status_macros.h"
#include "trainer/detect/ap.h"
#include "trainer/detect/autoanchor.h"
#include "trainer/detect/boxes.h"
#include "trainer/detect/coco.h"
#include "trainer/detect/data.h"
#include "trainer/detect/ema.h"
#include "trainer/detect/hyp.h"
#include "trainer/detect/loader.h"
#include "trainer/detect/loss.h"
#include "trainer/detect/model.h"
#include "trainer/detect/plots.h"
#include "trainer/detect/sync_bn.h"
#include "trainer/metrics.h"
#include "trainer/resume.h"
#include "trainer/sampler.h"
#include "trainer/temp_files.h"
#include "worker/progress.h"

namespace elastrun::trainer::detect {
namespace {

constexpr char kResultsHeader[] =
    "epoch,train/box_loss,train/obj_loss,train/cls_loss,metrics/precision,metrics/recall,"
    "metrics/mAP_0.5,metrics/mAP_0.5:0.95,val/box_loss,val/obj_loss,val/cls_loss,x/lr0,"
    "x/lr1,x/lr2,seconds,images_per_sec";

// Every rank's `mine`, in rank order (an all-reduce of a [world, longest]
// matrix where each rank fills its own row).
absl::StatusOr<std::vector<std::vector<double>>> AllGather(
    worker::ProcessGroup* group, int world, int rank, const std::vector<double>& mine) {
  if (group == nullptr) return std::vector<std::vector<double>>{mine};
  std::vector<double> sizes(static_cast<size_t>(world), 0.0);
  sizes[static_cast<size_t>(rank)] = static_cast<double>(mine.size());
  RETURN_IF_ERROR(SumOverRanks(group, sizes));
  const int64_t longest =
      static_cast<int64_t>(*std::max_element(sizes.begin(), sizes.end()));
  at::Tensor all = at::zeros({world, std::max<int64_t>(longest, 1)}, at::kDouble);
  if (!mine.empty()) {
    all[rank]
        .narrow(0, 0, static_cast<int64_t>(mine.size()))
        .copy_(at::from_blob(const_cast<double*>(mine.data()),
                             {static_cast<int64_t>(mine.size())}, at::kDouble));
  }
  RETURN_IF_ERROR(group->AllReduce(all));
  std::vector<std::vector<double>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const double* p = all[r].data_ptr<double>();
    out[static_cast<size_t>(r)].assign(
        p, p + static_cast<int64_t>(sizes[static_cast<size_t>(r)]));
  }
  return out;
}

// The samples `indices` of `epoch` loaded now, in order (a tail's replay,
// evaluation).
absl::StatusOr<LoadedBatch> LoadNow(const Loader& loader, int64_t epoch,
                                    const std::vector<int64_t>& indices) {
  LoadedBatch out;
  for (size_t i = 0; i < indices.size(); ++i) {
    ASSIGN_OR_RETURN(LoadedBatch one, loader.LoadOne(epoch, indices[i]));
    out.image_size = one.image_size;
    out.pixels.insert(out.pixels.end(), one.pixels.begin(), one.pixels.end());
    for (size_t k = 0; k + 6 <= one.targets.size(); k += 6) {
      out.targets.push_back(static_cast<float>(i));
      out.targets.insert(out.targets.end(),
                         one.targets.begin() + static_cast<long>(k) + 1,
                         one.targets.begin() + static_cast<long>(k) + 6);
    }
    out.placements.insert(out.placements.end(), one.placements.begin(),
                          one.placements.end());
    out.indices.push_back(indices[i]);
    ++out.size;
  }
  return out;
}

// The model and its EMA under one module: what snapshots and checkpoints
// hold.
class StateHolderImpl : public torch::nn::Module {
 public:
  StateHolderImpl(YoloV5 model, ModelEma ema) {
    register_module("model", model);
    register_module("ema", ema);
    // This rank's loss parts of the epoch so far (box, obj, cls, each x
    // samples) and its samples: a buffer, so an epoch resumed mid-way
    // reports all of its samples (buffers are each rank's own in a
    // snapshot, outside the content digest).
    sums = register_buffer("train_sums", at::zeros({4}, at::kDouble));
  }
  at::Tensor sums;
};
TORCH_MODULE(StateHolder);

class DetectTask : public Task {
 public:
  explicit DetectTask(const TaskContext& c) : c_(c) {}

  absl::Status Build();

  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  torch::nn::Module& state_module() override { return *holder_; }
  void Configure(OptimizerSpec* optimizer, ScheduleOptions* schedule) override;
  int64_t train_size() const override {
    return static_cast<int64_t>(data_.train.images.size());
  }
  int64_t test_size() const override {
    return static_cast<int64_t>(data_.val.images.size());
  }
  absl::Status Prepare(bool resumed) override;
  void StartEpoch(int64_t epoch, const std::vector<int64_t>& indices, int64_t batch_size,
                  bool continued) override;
  absl::StatusOr<at::Tensor> Loss(int64_t epoch, const std::vector<int64_t>& indices,
                                  size_t begin, size_t end) override;
  double loss_scale() const override { return loss_scale_; }
  double clip_grad_norm() const override { return 10.0; }
  void AfterStep() override;
  absl::StatusOr<TaskEval> Evaluate(const EpochTrain& train) override;
  std::string csv_name() const override { return "results.csv"; }
  std::string csv_header() const override { return kResultsHeader; }
  std::vector<std::string> record_files() const override {
    return {"results.csv",   "config.yaml",        "hyp.yaml",
            "results.svg",   "labels.svg",         "PR_curve.svg",
            "per_class.txt", "val_instances.json", "predictions.json"};
  }
  absl::Status WritePlots(const std::string& output_dir) override {
    return WriteResultsPlot(output_dir + "/results.csv", output_dir + "/results.svg");
  }
  absl::Status Finish(const std::string& output_dir) override;

 private:
  struct Batch {
    at::Tensor images;   // float [b, 3, S, S] in [0, 1], on the device
    at::Tensor targets;  // [n, 6] (image, class, cx, cy, w, h), on the device
    std::vector<int64_t> indices;
    std::vector<Placement> placements;
  };
  Batch ToDevice(const LoadedBatch& loaded) const;
  absl::StatusOr<YoloV5> MakeModel() const;
  absl::Status WriteRunFiles(const std::string& dir) override;
  // The loader's batch for indices[begin, end), queued ahead when it is
  // the next one expected.
  absl::StatusOr<LoadedBatch> TrainBatch(int64_t epoch,
                                         const std::vector<int64_t>& indices,
                                         size_t begin, size_t end);
  void QueueAhead();

  const TaskContext c_;
  Hyp hyp_;
  LossOptions loss_options_;
  Dataset data_;
  YoloV5 model_{nullptr};
  ModelEma ema_{nullptr};
  StateHolder holder_{nullptr};
  std::unique_ptr<Loader> train_loader_;
  std::unique_ptr<Loader> val_loader_;
  int64_t image_size_ = 640;
  double loss_scale_ = 1;
  FitnessWeights fitness_;
  NmsOptions nms_;

  // The batches queued in the train loader: this epoch's list from
  // `queued_` on.
  int64_t epoch_ = -1;
  const std::vector<int64_t>* indices_ = nullptr;
  int64_t batch_size_ = 1;
  size_t queued_ = 0;    // The first index not queued yet.
  size_t expected_ = 0;  // The begin of the next batch the loader holds.

  // The last evaluation (for Finish).
  DetectionSummary last_;
  std::vector<double> last_boxes_;  // Every rank's detections, gathered.
};

absl::StatusOr<YoloV5> DetectTask::MakeModel() const {
  ASSIGN_OR_RETURN(config::Object object,
                   config::InstantiateAt(c_.cfg->resolved, "model"));
  ASSIGN_OR_RETURN(std::shared_ptr<YoloV5> m, object.Get<YoloV5>());
  return *m;
}

absl::Status DetectTask::Build() {
  const TrainerConfig& cfg = *c_.cfg;
  const DataOptions& data = cfg.data;
  ASSIGN_OR_RETURN(hyp_, LoadHyp(data.hyp, cfg.resolved.Find("hyp")));
  image_size_ = data.image_size;
  if (image_size_ < 32 || image_size_ % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.image_size: ", image_size_,
                     " is not a multiple of the largest stride, 32"));
  }
  ScanOptions scan;
  ASSIGN_OR_RETURN(data_, LoadDataset(data.yaml, scan));
  if (c_.rank == 0) {
    for (const Split* split : {&data_.train, &data_.val}) {
      std::fprintf(c_.out, "%s\n", ScanSummary(*split).c_str());
      for (const std::string& w : split->warnings)
        std::fprintf(c_.out, "%s\n", w.c_str());
    }
  }
  ASSIGN_OR_RETURN(model_, MakeModel());
  const int64_t nc = static_cast<int64_t>(data_.yaml.names.size());
  if (model_->detect()->num_classes() != nc) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.num_classes is ", model_->detect()->num_classes(), " but ",
                     data.yaml, " has nc ", nc, " (set model.num_classes: ", nc, ")"));
  }
  // The EMA starts as a copy of the initial weights (another instance: the
  // draws of its own initialisation are overwritten).
  ASSIGN_OR_RETURN(YoloV5 shadow, MakeModel());
  if (!c_.placement->device.is_cpu()) {
    model_->to(c_.placement->device);
    shadow->to(c_.placement->device);
  }
  ema_ = ModelEma(shadow.ptr());
  ema_->Init(*model_);
  holder_ = StateHolder(model_, ema_);
  if (cfg.train.sync_bn && c_.group != nullptr) {
    ASSIGN_OR_RETURN(auto collectives, c_.group->ForDevice(c_.placement->device.type()));
    const int n = UseSyncBatchNorm(*model_, collectives);
    if (c_.rank == 0) {
      std::fprintf(c_.out, "SyncBatchNorm: %d BatchNorm layers reduce over %d ranks\n", n,
                   c_.world);
    }
  }
  loss_options_.box = hyp_.box;
  loss_options_.cls = hyp_.cls;
  loss_options_.cls_pw = hyp_.cls_pw;
  loss_options_.obj = hyp_.obj;
  loss_options_.obj_pw = hyp_.obj_pw;
  loss_options_.anchor_t = hyp_.anchor_t;
  loss_options_.fl_gamma = hyp_.fl_gamma;
  loss_options_.label_smoothing = hyp_.label_smoothing;
  loss_options_ =
      ScaledForModel(loss_options_, model_->detect()->num_levels(), nc, image_size_);
  nms_.conf_thres = 0.001;
  nms_.iou_thres = 0.6;
  nms_.multi_label = true;
  nms_.max_det = 300;

  LoaderOptions train_options;
  train_options.image_size = static_cast<int>(image_size_);
  train_options.augment = true;
  train_options.hyp.hsv_h = hyp_.hsv_h;
  train_options.hyp.hsv_s = hyp_.hsv_s;
  train_options.hyp.hsv_v = hyp_.hsv_v;
  train_options.hyp.degrees = hyp_.degrees;
  train_options.hyp.translate = hyp_.translate;
  train_options.hyp.scale = hyp_.scale;
  train_options.hyp.shear = hyp_.shear;
  train_options.hyp.perspective = hyp_.perspective;
  train_options.hyp.flipud = hyp_.flipud;
  train_options.hyp.fliplr = hyp_.fliplr;
  train_options.hyp.mosaic = hyp_.mosaic;
  train_options.hyp.mixup = hyp_.mixup;
  train_options.num_workers = static_cast<int>(data.num_workers);
  if (data.prefetch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data.prefetch: ", data.prefetch,
                                                   " is below 1 (batches loaded ahead)"));
  }
  train_options.prefetch = static_cast<int>(data.prefetch);
  train_options.seed = static_cast<uint64_t>(cfg.train.seed);
  if (data.cache_mb < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.cache_mb: ", data.cache_mb, " is negative (0: no cache)"));
  }
  train_options.cache_bytes = data.cache_mb << 20;
  ASSIGN_OR_RETURN(train_loader_, Loader::Create(data_.train, train_options));
  LoaderOptions val_options = train_options;
  val_options.augment = false;
  val_options.cache_bytes = 0;  // Read once an epoch: the page cache serves.
  ASSIGN_OR_RETURN(val_loader_, Loader::Create(data_.val, val_options));
  return absl::OkStatus();
}

void DetectTask::Configure(OptimizerSpec* optimizer, ScheduleOptions* schedule) {
  optimizer->lr0 = hyp_.lr0;
  optimizer->momentum = hyp_.momentum;
  optimizer->weight_decay = hyp_.weight_decay;
  schedule->lrf = hyp_.lrf;
  schedule->warmup_epochs = hyp_.warmup_epochs;
  schedule->warmup_momentum = hyp_.warmup_momentum;
  schedule->warmup_bias_lr = hyp_.warmup_bias_lr;
  schedule->momentum = hyp_.momentum;
  // YOLOv5's gradient: the loss x the per-rank batch, x the world size
  // (DDP averages), summed over the accumulated batches. The loop averages
  // over them, so the scale carries the accumulation too.
  const int64_t gb = c_.cfg->data.batch_size * c_.world;
  const int64_t accumulate = std::max<int64_t>(
      std::llround(static_cast<double>(optimizer->nbs) / static_cast<double>(gb)), 1);
  loss_scale_ = static_cast<double>(gb * accumulate);
}

absl::Status DetectTask::Prepare(bool resumed) {
  if (resumed) return absl::OkStatus();
  // AutoAnchor on rank 0, its anchors broadcast: every rank, and the EMA,
  // trains with the same.
  at::Tensor anchors =
      model_->detect()->AnchorsInPixels().to(at::kCPU).to(at::kDouble).contiguous();
  if (c_.rank == 0) {
    std::vector<std::vector<BoxSize>> images;
    images.reserve(data_.train.images.size());
    for (const ImageEntry& image : data_.train.images) {
      std::vector<BoxSize> normalized;
      for (const Label& l : image.labels) normalized.push_back({l.w, l.h});
      ASSIGN_OR_RETURN(std::vector<BoxSize> px,
                       LabelSizesAtTrainingSize(normalized, image.width, image.height,
                                                static_cast<int>(image_size_)));
      images.push_back(std::move(px));
    }
    std::vector<BoxSize> current;
    for (int64_t i = 0; i < anchors.size(0); ++i) {
      current.push_back({anchors[i][0].item<double>(), anchors[i][1].item<double>()});
    }
    AutoAnchorOptions options;
    options.anchor_t = hyp_.anchor_t;
    options.image_size = static_cast<int>(image_size_);
    options.seed = static_cast<uint64_t>(c_.cfg->train.seed);
    const std::vector<double> strides = {8, 16, 32};
    ASSIGN_OR_RETURN(AutoAnchorResult r, CheckAnchors(images, current, strides, options));
    for (const std::string& w : r.warnings)
      std::fprintf(c_.out, "AutoAnchor: %s\n", w.c_str());
    std::fprintf(c_.out, "%s\n", r.message.c_str());
    std::fflush(c_.out);
    for (size_t i = 0; i < r.anchors.size(); ++i) {
      anchors[static_cast<int64_t>(i)][0] = r.anchors[i].w;
      anchors[static_cast<int64_t>(i)][1] = r.anchors[i].h;
    }
  }
  if (c_.group != nullptr) RETURN_IF_ERROR(c_.group->Broadcast(anchors, 0));
  RETURN_IF_ERROR(model_->detect()->SetAnchorsInPixels(anchors));
  ema_->Init(*model_);
  return absl::OkStatus();
}

absl::Status DetectTask::WriteRunFiles(const std::string& dir) {
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/hyp.yaml", HypToYaml(hyp_)));
  std::vector<int64_t> per_class(data_.yaml.names.size(), 0);
  std::vector<std::array<float, 4>> boxes;
  for (const ImageEntry& image : data_.train.images) {
    for (const Label& l : image.labels) {
      ++per_class[static_cast<size_t>(l.cls)];
      boxes.push_back({static_cast<float>(l.cx), static_cast<float>(l.cy),
                       static_cast<float>(l.w), static_cast<float>(l.h)});
    }
  }
  return WriteSvg(dir + "/labels.svg",
                  RenderLabelsSvg(data_.yaml.names, per_class, boxes));
}

DetectTask::Batch DetectTask::ToDevice(const LoadedBatch& loaded) const {
  const int64_t s = loaded.image_size;
  Batch b;
  at::Tensor pixels = at::from_blob(const_cast<uint8_t*>(loaded.pixels.data()),
                                    {loaded.size, 3, s, s}, at::kByte);
  if (c_.placement->device.is_cuda()) {
    // Bytes over the bus from pinned memory without blocking (seed 002's
    // pin_memory), converted to float on the GPU.
    b.images = pixels.pin_memory()
                   .to(c_.placement->device, at::kByte, /*non_blocking=*/true)
                   .to(at::kFloat)
                   .div_(255.0);
  } else {
    b.images = pixels.to(at::kFloat).div_(255.0);
  }
  if (model_->options().channels_last) {
    b.images = b.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
  const int64_t n = static_cast<int64_t>(loaded.targets.size() / 6);
  b.targets = at::from_blob(const_cast<float*>(loaded.targets.data()), {n, 6}, at::kFloat)
                  .clone()
                  .to(c_.placement->device);
  b.indices = loaded.indices;
  b.placements = loaded.placements;
  return b;
}

void DetectTask::StartEpoch(int64_t epoch, const std::vector<int64_t>& indices,
                            int64_t batch_size, bool continued) {
  train_loader_->Clear();
  epoch_ = epoch;
  indices_ = &indices;
  batch_size_ = batch_size;
  queued_ = expected_ = 0;
  if (!continued) holder_->sums.zero_();
  QueueAhead();
}

void DetectTask::AfterStep() {
  // Every rank's BatchNorm statistics moved with its own batch; the EMA
  // averages rank 0's (DDP's next synced forward would broadcast them
  // anyway), so every rank holds the same EMA and evaluates its share of
  // the val split with the same model, as YOLOv5 evaluates rank 0's.
  if (c_.group != nullptr) {
    std::vector<at::Tensor> stats;
    for (const auto& item : model_->named_buffers()) {
      if (absl::StrContains(item.key(), "running_")) stats.push_back(item.value());
    }
    if (!stats.empty()) {
      std::vector<at::Tensor> flat_stats;
      for (const at::Tensor& b : stats) flat_stats.push_back(b.reshape({-1}));
      at::Tensor flat = at::cat(flat_stats);
      const absl::Status s = c_.group->Broadcast(flat, 0);
      if (!s.ok()) throw std::runtime_error(std::string(s.message()));
      int64_t at = 0;
      for (at::Tensor& b : stats) {
        b.copy_(flat.narrow(0, at, b.numel()).view_as(b));
        at += b.numel();
      }
    }
  }
  ema_->Update(*model_);
}

void DetectTask::QueueAhead() {
  // data.prefetch batches in flight: the loader decodes the next ones
  // while this one trains.
  const size_t bs = static_cast<size_t>(batch_size_);
  const size_t ahead = static_cast<size_t>(c_.cfg->data.prefetch) * bs;
  while (indices_ != nullptr && queued_ < indices_->size() &&
         queued_ < expected_ + ahead) {
    const size_t e = std::min(indices_->size(), queued_ + bs);
    train_loader_->Enqueue(
        epoch_, std::vector<int64_t>(indices_->begin() + static_cast<long>(queued_),
                                     indices_->begin() + static_cast<long>(e)));
    queued_ = e;
  }
}

absl::StatusOr<LoadedBatch> DetectTask::TrainBatch(int64_t epoch,
                                                   const std::vector<int64_t>& indices,
                                                   size_t begin, size_t end) {
  if (epoch == epoch_ && &indices == indices_ && begin == expected_ && queued_ > begin) {
    ASSIGN_OR_RETURN(LoadedBatch batch, train_loader_->Next());
    expected_ = end;
    QueueAhead();
    return batch;
  }
  // Not the batch expected (a tail's replay): loaded here, in order.
  return LoadNow(*train_loader_, epoch,
                 std::vector<int64_t>(indices.begin() + static_cast<long>(begin),
                                      indices.begin() + static_cast<long>(end)));
}

absl::StatusOr<at::Tensor> DetectTask::Loss(int64_t epoch,
                                            const std::vector<int64_t>& indices,
                                            size_t begin, size_t end) {
  ASSIGN_OR_RETURN(LoadedBatch loaded, TrainBatch(epoch, indices, begin, end));
  Batch batch = ToDevice(loaded);
  std::vector<at::Tensor> raw;
  {
    AutocastScope autocast(*c_.placement);
    raw = model_->forward(batch.images);
  }
  // The loss in float32 (YOLOv5 computes it outside autocast's reach too).
  for (at::Tensor& r : raw) r = r.to(at::kFloat);
  ASSIGN_OR_RETURN(LossResult r,
                   ComputeLoss(raw, batch.targets, *model_->detect(), loss_options_));
  const double n = static_cast<double>(end - begin);
  const double bs = static_cast<double>(batch.images.size(0));
  double* sums = holder_->sums.data_ptr<double>();
  sums[0] += r.box.item<double>() * n;
  sums[1] += r.obj.item<double>() * n;
  sums[2] += r.cls.item<double>() * n;
  sums[3] += n;
  // Per image: (box + obj + cls), YOLOv5's displayed loss.
  return r.loss / bs;
}

absl::StatusOr<TaskEval> DetectTask::Evaluate(const EpochTrain& train) {
  torch::NoGradGuard no_grad;
  YoloV5 ema = std::dynamic_pointer_cast<YoloV5Impl>(ema_->model());
  ema->eval();
  const int64_t nc = static_cast<int64_t>(data_.yaml.names.size());
  const std::vector<int64_t> shard = EvalShard(test_size(), c_.world, c_.rank);
  const int64_t bs = std::max<int64_t>(c_.cfg->data.batch_size * 2, 1);
  DetectionStats stats;
  std::array<double, 3> val_sums{};
  double val_seen = 0;
  std::vector<double> boxes;  // image, class, conf, x1, y1, x2, y2 per detection
  for (size_t b = 0; b < shard.size(); b += static_cast<size_t>(bs)) {
    const size_t e = std::min(shard.size(), b + static_cast<size_t>(bs));
    worker::ReportBusy();  // A long evaluation is not a hang.
    ASSIGN_OR_RETURN(LoadedBatch loaded,
                     LoadNow(*val_loader_, 0,
                             std::vector<int64_t>(shard.begin() + static_cast<long>(b),
                                                  shard.begin() + static_cast<long>(e))));
    Batch batch = ToDevice(loaded);
    std::vector<at::Tensor> raw;
    {
      AutocastScope autocast(*c_.placement);
      raw = ema->forward(batch.images);
    }
    for (at::Tensor& r : raw) r = r.to(at::kFloat);
    ASSIGN_OR_RETURN(LossResult loss,
                     ComputeLoss(raw, batch.targets, *ema->detect(), loss_options_));
    const double n = static_cast<double>(e - b);
    val_sums[0] += loss.box.item<double>() * n;
    val_sums[1] += loss.obj.item<double>() * n;
    val_sums[2] += loss.cls.item<double>() * n;
    val_seen += n;
    ASSIGN_OR_RETURN(std::vector<at::Tensor> dets,
                     NonMaxSuppression(ema->detect()->Decode(raw), nms_));
    for (size_t i = 0; i < dets.size(); ++i) {
      const int64_t id = loaded.indices[i];
      const ImageEntry& image = data_.val.images[static_cast<size_t>(id)];
      const Placement& p = loaded.placements[i];
      // Predictions back in the original image's pixels, clipped to it.
      at::Tensor d = dets[i].to(at::kCPU, at::kDouble);
      at::Tensor xyxy = d.narrow(1, 0, 4).clone();
      xyxy.select(1, 0).sub_(p.pad_x).div_(p.gain).clamp_(0, image.width);
      xyxy.select(1, 2).sub_(p.pad_x).div_(p.gain).clamp_(0, image.width);
      xyxy.select(1, 1).sub_(p.pad_y).div_(p.gain).clamp_(0, image.height);
      xyxy.select(1, 3).sub_(p.pad_y).div_(p.gain).clamp_(0, image.height);
      std::vector<double> labels_xyxy;
      std::vector<int64_t> label_cls;
      for (const Label& l : image.labels) {
        labels_xyxy.insert(
            labels_xyxy.end(),
            {(l.cx - l.w / 2) * image.width, (l.cy - l.h / 2) * image.height,
             (l.cx + l.w / 2) * image.width, (l.cy + l.h / 2) * image.height});
        label_cls.push_back(l.cls);
      }
      const int64_t np = d.size(0), nl = static_cast<int64_t>(label_cls.size());
      // Read once on the host (d: x1, y1, x2, y2, conf, cls per row).
      d = d.contiguous();
      xyxy = xyxy.contiguous();
      const double* dp = d.data_ptr<double>();
      const double* xp = xyxy.data_ptr<double>();
      std::vector<double> conf(static_cast<size_t>(np));
      std::vector<int64_t> pred_cls(static_cast<size_t>(np));
      for (int64_t k = 0; k < np; ++k) {
        const size_t u = static_cast<size_t>(k);
        conf[u] = dp[k * 6 + 4];
        pred_cls[u] = static_cast<int64_t>(dp[k * 6 + 5]);
        boxes.insert(boxes.end(),
                     {static_cast<double>(id), static_cast<double>(pred_cls[u]), conf[u],
                      xp[k * 4], xp[k * 4 + 1], xp[k * 4 + 2], xp[k * 4 + 3]});
      }
      std::vector<double> iou(static_cast<size_t>(nl * np));
      if (nl > 0 && np > 0) {
        at::Tensor lt = at::from_blob(labels_xyxy.data(), {nl, 4}, at::kDouble);
        ASSIGN_OR_RETURN(at::Tensor m, BoxIou(lt, xyxy));
        m = m.contiguous();
        std::copy(m.data_ptr<double>(), m.data_ptr<double>() + nl * np, iou.begin());
      }
      RETURN_IF_ERROR(stats.AddImageIou(id, iou, conf, pred_cls, label_cls));
    }
  }
  // Every rank's share: the val losses summed, the statistics gathered.
  const double* train_sums = holder_->sums.data_ptr<double>();
  std::vector<double> sums = {val_sums[0],   val_sums[1],   val_sums[2],   val_seen,
                              train_sums[0], train_sums[1], train_sums[2], train_sums[3]};
  RETURN_IF_ERROR(SumOverRanks(c_.group, sums));
  ASSIGN_OR_RETURN(auto gathered,
                   AllGather(c_.group, c_.world, c_.rank, stats.Serialize()));
  DetectionStats all;
  for (const std::vector<double>& g : gathered) {
    ASSIGN_OR_RETURN(DetectionStats s, DetectionStats::Deserialize(g));
    all.Merge(s);
  }
  ASSIGN_OR_RETURN(last_, all.Summarize(nc));
  ASSIGN_OR_RETURN(auto gathered_boxes, AllGather(c_.group, c_.world, c_.rank, boxes));
  last_boxes_.clear();
  for (const auto& g : gathered_boxes)
    last_boxes_.insert(last_boxes_.end(), g.begin(), g.end());
  model_->train();

  TaskEval eval;
  const double vs = std::max(sums[3], 1.0), ts = std::max(sums[7], 1.0);
  eval.loss = (sums[0] + sums[1] + sums[2]) / vs;
  eval.acc = last_.map50;
  eval.score = Fitness(last_, fitness_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - train.start)
          .count();
  std::vector<double> lrs = train.lrs;
  lrs.resize(3, 0.0);
  eval.row = absl::StrFormat(
      "%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.8g,%.8g,%.8g,%.3f,%.1f\n",
      train.epoch, sums[4] / ts, sums[5] / ts, sums[6] / ts, last_.precision,
      last_.recall, last_.map50, last_.map50_95, sums[0] / vs, sums[1] / vs, sums[2] / vs,
      lrs[0], lrs[1], lrs[2], seconds, train.images_per_sec);
  eval.line = absl::StrFormat(
      "epoch %d/%d: box %.4f obj %.4f cls %.4f | val P %.3f R %.3f mAP@0.5 %.4f "
      "mAP@0.5:0.95 %.4f fitness %.4f | %.1fs %.0f img/s",
      train.epoch, c_.cfg->train.epochs, sums[4] / ts, sums[5] / ts, sums[6] / ts,
      last_.precision, last_.recall, last_.map50, last_.map50_95, eval.score, seconds,
      train.images_per_sec);
  return eval;
}

absl::Status DetectTask::Finish(const std::string& dir) {
  if (c_.rank != 0) return absl::OkStatus();
  // YOLOv5's per-class table.
  std::string table = absl::StrFormat("%22s%11s%11s%11s%11s%11s%11s\n", "Class", "Images",
                                      "Instances", "P", "R", "mAP50", "mAP50-95");
  absl::StrAppend(&table, absl::StrFormat("%22s%11d%11d%11.3f%11.3f%11.3f%11.3f\n", "all",
                                          last_.images, last_.labels, last_.precision,
                                          last_.recall, last_.map50, last_.map50_95));
  std::vector<std::vector<double>> curves;
  std::vector<double> ap50;
  std::vector<std::string> names;
  for (const ClassAp& c : last_.per_class.classes) {
    const std::string& name = data_.yaml.names[static_cast<size_t>(c.cls)];
    absl::StrAppend(&table, absl::StrFormat("%22s%11d%11d%11.3f%11.3f%11.3f%11.3f\n",
                                            name, last_.images, c.num_labels, c.precision,
                                            c.recall, c.ap50(), c.ap50_95()));
    curves.push_back(c.pr_curve);
    ap50.push_back(c.ap50());
    names.push_back(name);
  }
  std::fprintf(c_.out, "%s", table.c_str());
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/per_class.txt", table));
  RETURN_IF_ERROR(WriteSvg(dir + "/PR_curve.svg", RenderPrCurveSvg(names, curves, ap50)));
  // COCO JSON: the val set and the last evaluation's detections.
  std::vector<CocoImage> images;
  std::vector<CocoBox> labels;
  for (size_t i = 0; i < data_.val.images.size(); ++i) {
    const ImageEntry& image = data_.val.images[i];
    images.push_back({static_cast<int64_t>(i),
                      std::filesystem::path(image.path).filename().string(), image.width,
                      image.height});
    for (const Label& l : image.labels) {
      CocoBox box;
      box.image_id = static_cast<int64_t>(i);
      box.cls = l.cls;
      box.x1 = (l.cx - l.w / 2) * image.width;
      box.y1 = (l.cy - l.h / 2) * image.height;
      box.x2 = (l.cx + l.w / 2) * image.width;
      box.y2 = (l.cy + l.h / 2) * image.height;
      labels.push_back(box);
    }
  }
  std::vector<CocoBox> detections;
  for (size_t k = 0; k + 7 <= last_boxes_.size(); k += 7) {
    CocoBox box;
    box.image_id = static_cast<int64_t>(last_boxes_[k]);
    box.cls = static_cast<int64_t>(last_boxes_[k + 1]);
    box.score = last_boxes_[k + 2];
    box.x1 = last_boxes_[k + 3];
    box.y1 = last_boxes_[k + 4];
    box.x2 = last_boxes_[k + 5];
    box.y2 = last_boxes_[k + 6];
    detections.push_back(box);
  }
  const int64_t nc = static_cast<int64_t>(data_.yaml.names.size());
  ASSIGN_OR_RETURN(std::string instances,
                   CocoInstancesJson(images, labels, data_.yaml.names));
  ASSIGN_OR_RETURN(std::string results, CocoResultsJson(detections, nc));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/val_instances.json", instances));
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/predictions.json", results));
  std::fprintf(
      c_.out,
      "wrote %s/{per_class.txt,PR_curve.svg,val_instances.json,predictions.json}\n",
      dir.c_str());
  std::fflush(c_.out);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Task>> MakeDetectTask(const TaskContext& context) {
  auto task = std::make_unique<DetectTask>(context);
  RETURN_IF_ERROR(task->Build());
  return std::unique_ptr<Task>(std::move(task));
}

const bool kRegistered = RegisterTask("YoloV5", MakeDetectTask);

}  // namespace
}  // namespace elastrun::trainer::detect
