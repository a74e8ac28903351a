#include "trainer/train_loop.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config/config.h"
#include "common/status_macros.h"
#include "trainer/checkpoint_file.h"
#include "trainer/digest.h"
#include "trainer/plot.h"
#include "trainer/resume.h"
#include "trainer/state_image.h"
#include "trainer/stop_signal.h"
#include "worker/process_group.h"
#include "worker/progress.h"

namespace elastrun::trainer {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The optimizer and schedule a config describes, instantiated (the task
// instantiates the model).
struct Components {
  OptimizerSpec optimizer;
  ScheduleOptions schedule;
};

absl::StatusOr<Components> Instantiate(const config::Node& cfg) {
  Components c;
  ASSIGN_OR_RETURN(config::Object opt, config::InstantiateAt(cfg, "optimizer"));
  ASSIGN_OR_RETURN(std::shared_ptr<OptimizerSpec> o, opt.Get<OptimizerSpec>());
  c.optimizer = *o;
  ASSIGN_OR_RETURN(config::Object sched, config::InstantiateAt(cfg, "scheduler"));
  ASSIGN_OR_RETURN(std::shared_ptr<ScheduleOptions> s, sched.Get<ScheduleOptions>());
  c.schedule = *s;
  return c;
}

std::string ParamsSha256(torch::nn::Module& model) {
  Sha256 h;
  for (const at::Tensor& p : model.parameters()) {
    at::Tensor c = p.detach().to(torch::kCPU).contiguous();
    h.Update(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  }
  return h.HexDigest();
}

}  // namespace

TrainLoop::TrainLoop(const TrainerConfig& cfg, const RunOptions& run,
                     worker::ProcessGroup* group)
    : cfg_(cfg),
      run_(run),
      group_(group),
      world_(group ? group->world_size() : 1),
      rank_(group ? group->rank() : 0),
      leader_(rank_ == 0),
      start_(Clock::now()),
      progress_(run.out, run.tty, cfg.train.log_period) {}

TrainLoop::~TrainLoop() {
  if (sample_log_ >= 0) ::close(sample_log_);
}

absl::StatusOr<std::unique_ptr<TrainLoop>> TrainLoop::Create(
    const TrainerConfig& cfg, const RunOptions& run, worker::ProcessGroup* group) {
  std::unique_ptr<TrainLoop> loop(new TrainLoop(cfg, run, group));
  if (cfg.train.threads > 0) torch::set_num_threads(static_cast<int>(cfg.train.threads));
  loop->identity_.run_id = ChooseRunId(cfg.train.run_name, run.run_id);
  loop->identity_.config_digest = ConfigDigest(cfg.resolved);
  loop->checkpoint_dir_ = CheckpointDir(cfg.train.output_dir);
  loop->config_yaml_ = config::ToYaml(cfg.resolved);
  ASSIGN_OR_RETURN(loop->placement_,
                   ResolvePlacement(cfg.train, run.env ? run.env->local_rank : 0));
  RETURN_IF_ERROR(loop->Build());
  RETURN_IF_ERROR(loop->OpenSnapshots());
  RETURN_IF_ERROR(loop->RestorePosition());
  // Before DDP's first broadcast: rank 0's result reaches every rank.
  RETURN_IF_ERROR(loop->task_->Prepare(loop->resumed_));
  if (group != nullptr) {
    // NCCL for a model on a GPU (the group must have been made for it:
    // ProcessGroupOptions::cuda_device, as Train does), Gloo on a CPU.
    ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::ProcessGroup> collectives,
                     group->ForDevice(loop->placement_.device.type()));
    DdpOptions ddp = DdpOptionsFrom(cfg.train);  // train.ddp
    ddp.stop_vote = true;  // TrainBatch adds its StopTerm to every loss.
    ASSIGN_OR_RETURN(loop->ddp_,
                     DistributedDataParallel::Create(loop->task_->model(), collectives, ddp));
  }
  if (loop->leader_) RETURN_IF_ERROR(loop->PrepareRunFolder());
  RETURN_IF_ERROR(loop->OpenSampleLog());
  return loop;
}

// Model, data, sampler, schedule and optimizer, in the order that keeps
// the default generator's draws (initial weights) as they always were.
absl::Status TrainLoop::Build() {
  const DataOptions& data = cfg_.data;
  const uint64_t seed = static_cast<uint64_t>(cfg_.train.seed);
  // The same initial weights everywhere (rank 0's are broadcast anyway).
  torch::manual_seed(seed);
  TaskContext context;
  context.cfg = &cfg_;
  context.placement = &placement_;
  context.group = group_;
  context.world = world_;
  context.rank = rank_;
  context.out = run_.out;
  ASSIGN_OR_RETURN(task_, MakeTask(context));
  ASSIGN_OR_RETURN(Components c, Instantiate(cfg_.resolved));
  task_->Configure(&c.optimizer, &c.schedule);
  SamplerOptions sampler_options;
  sampler_options.seed = seed;
  sampler_options.drop_last = data.drop_last;
  ASSIGN_OR_RETURN(sampler_,
                   DistributedSampler::Create(task_->train_size(), world_, rank_,
                                              sampler_options, TorchPermutation));
  global_batch_ = data.batch_size * world_;
  batches_per_epoch_ = (sampler_->num_samples() + data.batch_size - 1) / data.batch_size;
  schedule_options_ = c.schedule;
  lr0_ = c.optimizer.lr0;
  nbs_ = c.optimizer.nbs;
  ASSIGN_OR_RETURN(schedule_, YoloV5Schedule::Create(
                                  c.schedule, lr0_, nbs_,
                                  YoloV5Schedule::WarmupSamples(c.schedule, batches_per_epoch_,
                                                                global_batch_),
                                  task_->train_size()));
  // YOLOv5 scales the decay by the batch an optimizer step sees: this
  // world's global batch x its accumulation.
  ASSIGN_OR_RETURN(optimizer_,
                   Optimizer::Create(c.optimizer, *task_->model(),
                                     schedule_->ScaledWeightDecay(c.optimizer.weight_decay,
                                                                  global_batch_)));
  return absl::OkStatus();
}

// Resumes (when asked) and fits the position, the schedule and the loss
// scaler to this world.
absl::Status TrainLoop::RestorePosition() {
  // A run with an id resumes whenever a state of its own exists (its own
  // only: Resume ignores other runs'), whatever the restart count says.
  if (run_.resume.has_value() || !identity_.run_id.empty()) {
    RunOptions run = run_;
    if (!run.resume.has_value()) run.resume = "";
    ASSIGN_OR_RETURN(Resumed r,
                     Resume(run, identity_, cfg_, world_, rank_, group_, task_->state_module(),
                            optimizer_->torch_optimizer(), area_.get()));
    if (r.resumed) {
      ApplyResumed(r);
      if (pos_.legacy_iteration >= 0) ConvertLegacyPosition();
      resumed_world_ = std::max<int64_t>(pos_.world_size, 1);
      // The warm-up the run started with, whatever the world size now.
      if (pos_.warmup_samples > 0) {
        ASSIGN_OR_RETURN(schedule_, YoloV5Schedule::Create(schedule_options_, lr0_, nbs_,
                                                           pos_.warmup_samples,
                                                           task_->train_size()));
      }
      // Gradients are never stored: without a tail to recompute, none are
      // accumulated.
      if (pos_.tail_from < 0) pos_.micro_batches = 0;
      // A new branch of the run's history: every state from here on
      // outranks every state of the one it resumed from.
      ++pos_.branch;
      own_sums_ = r.own_snapshots && resumed_world_ == world_;
      SayResumed(r);
    }
  }
  if (!rng_at_step_.cpu.defined()) rng_at_step_ = GeneratorStates(placement_.device);
  pos_.warmup_samples = schedule_->warmup_samples();
  pos_.world_size = world_;
  first_lineage_ = pos_.lineage;
  if (placement_.loss_scaling) {
    scaler_.emplace();
    if (resumed_ && pos_.amp_scale > 0) {
      scaler_->Restore(pos_.amp_scale, pos_.amp_growth_tracker);
    }
  }
  return absl::OkStatus();
}

void TrainLoop::ApplyResumed(const Resumed& resumed) {
  const StateExtras& extras = resumed.extras;
  resumed_ = true;
  pos_ = extras.position;
  metrics_rows_ = extras.metrics_rows;
  rows_carried_ = extras.rows_carried;
  if (extras.rng.cpu.defined()) {
    SetGeneratorStates(extras.rng, placement_.device);
    // A state taken on another device holds no generator of this one.
    rng_at_step_ = GeneratorStates(placement_.device);
  }
}

void TrainLoop::ConvertLegacyPosition() {
  // The older build's shards: world_size ranks, batches of batch_size.
  const int old_world = static_cast<int>(std::max<int64_t>(pos_.world_size, 1));
  SamplerOptions options;
  options.drop_last = cfg_.data.drop_last;
  absl::StatusOr<DistributedSampler> old =
      DistributedSampler::Create(task_->train_size(), old_world, 0, options, TorchPermutation);
  const int64_t b = cfg_.data.batch_size;
  if (old.ok()) {
    const int64_t nb = std::max<int64_t>((old->num_samples() + b - 1) / b, 1);
    pos_.samples_done = old->Advance(0, pos_.legacy_iteration * b);
    const int64_t last = pos_.legacy_last_opt_step;
    pos_.step_epoch = last >= 0 ? last / nb : 0;
    pos_.step_done = last >= 0 ? old->Advance(0, (last % nb + 1) * b) : 0;
    pos_.tail_from = pos_.legacy_tail_begin >= 0 ? old->Advance(0, pos_.legacy_tail_begin * b) : -1;
    // Any order that grows along that run's history will do.
    pos_.lineage = last + 1 + pos_.epoch;
  }
  pos_.legacy_iteration = pos_.legacy_last_opt_step = pos_.legacy_tail_begin = -1;
}

void TrainLoop::SayResumed(const Resumed& r) const {
  if (!leader_) return;
  const int64_t n = task_->train_size();
  std::fprintf(run_.out,
               "resumed at epoch %lld, iteration %lld from the %s of rank %d%s: sample %lld of "
               "%lld, state %lld of branch %lld, taken on %lld rank(s)\n",
               static_cast<long long>(pos_.epoch + 1),
               static_cast<long long>(pos_.samples_done / global_batch_), r.source_tier.c_str(),
               r.source, r.everyone ? " (every rank had it)" : ", broadcast to every rank",
               static_cast<long long>(pos_.samples_done), static_cast<long long>(n),
               static_cast<long long>(pos_.lineage), static_cast<long long>(pos_.branch - 1),
               static_cast<long long>(resumed_world_));
  if (resumed_world_ != world_ && pos_.samples_done > 0 && pos_.samples_done < n) {
    std::fprintf(run_.out,
                 "state taken on %lld rank(s), now %d: the rest of epoch %lld (%lld samples) "
                 "is dealt to %d rank(s), one optimizer step every %lld batch(es) of %lld "
                 "samples (nominal batch %lld)\n",
                 static_cast<long long>(resumed_world_), world_,
                 static_cast<long long>(pos_.epoch + 1),
                 static_cast<long long>(n - pos_.samples_done), world_,
                 static_cast<long long>(schedule_->Accumulate(global_batch_)),
                 static_cast<long long>(global_batch_), static_cast<long long>(nbs_));
  }
  std::fflush(run_.out);
}

// Rank 0's run folder: config.yaml, metrics.csv (appended to when
// resumed), and the banner.
absl::Status TrainLoop::PrepareRunFolder() {
  const TrainOptions& train = cfg_.train;
  RETURN_IF_ERROR(MakeDirs(train.output_dir));
  if (!resumed_) {
    // Another run's record stays; its checkpoints are left where they are.
    ASSIGN_OR_RETURN(std::string kept, KeepEarlierMetrics(train.output_dir, task_->record_files(),
                                                          task_->csv_header()));
    if (!kept.empty()) {
      std::fprintf(run_.out, "fresh run: kept the folder's earlier %s as %s\n",
                   task_->csv_name().c_str(), kept.c_str());
    }
  }
  RETURN_IF_ERROR(task_->WriteRunFiles(train.output_dir));
  RETURN_IF_ERROR(WriteFileAtomically(train.output_dir + "/config.yaml", config_yaml_));
  const std::string metrics_csv = train.output_dir + "/" + task_->csv_name();
  // A resumed run's record is the one its state carries, whichever node
  // wrote metrics.csv before (rank 0 may now be on another node).
  if (resumed_ && rows_carried_) {
    RETURN_IF_ERROR(WriteMetricsRows(metrics_csv, metrics_rows_, task_->csv_header()));
  }
  ASSIGN_OR_RETURN(MetricsWriter w,
                   MetricsWriter::Open(metrics_csv, resumed_, task_->csv_header()));
  metrics_.emplace(std::move(w));
  std::fprintf(
      run_.out,
      "elastrun-train: %d rank(s) on %s, %lld train / %lld test samples, batch %lld x %d, "
      "%lld iterations/epoch, warm-up %lld iterations (%lld samples), accumulate %lld\n",
      world_, placement_.Describe().c_str(), static_cast<long long>(task_->train_size()),
      static_cast<long long>(task_->test_size()),
      static_cast<long long>(cfg_.data.batch_size), world_,
      static_cast<long long>(batches_per_epoch_),
      static_cast<long long>(schedule_->warmup_samples() / global_batch_),
      static_cast<long long>(schedule_->warmup_samples()),
      static_cast<long long>(schedule_->Accumulate(global_batch_)));
  std::fflush(run_.out);
  return absl::OkStatus();
}

absl::Status TrainLoop::OpenSampleLog() {
  if (run_.sample_log.empty()) return absl::OkStatus();
  sample_log_ =
      ::open(run_.sample_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (sample_log_ < 0) {
    return absl::InternalError(
        absl::StrCat("opening ", run_.sample_log, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> TrainLoop::Run() {
  task_->model()->train();
  // A stop the launcher asks for finishes the step in progress first, when
  // its snapshot outlives this process (stop_signal.h).
  if (area_shared_) StopSignal::Arm();
  if (pos_.tail_from >= 0 && pos_.epoch < cfg_.train.epochs) RETURN_IF_ERROR(ReplayTail());
  for (int64_t epoch = pos_.epoch; epoch < cfg_.train.epochs; ++epoch) {
    RETURN_IF_ERROR(RunEpoch(epoch));
  }
  StopSignal::Disarm();
  return Finish();
}

absl::Status TrainLoop::RunEpoch(int64_t epoch) {
  const int64_t checkpoint_iters = cfg_.train.checkpoint_iters;
  StartEpoch(epoch);
  for (int64_t k = 0; k < epoch_.batches; ++k) {
    // Due here, taken at the next optimizer step (all ranks then hold the
    // same state); the end of the epoch takes it if none comes before.
    const int64_t i = epoch_.first_iteration + k;
    if (checkpoint_iters > 0 && (i + 1) % checkpoint_iters == 0) checkpoint_pending_ = true;
    RETURN_IF_ERROR(TrainBatch(epoch, k));
  }
  return EndEpoch(epoch);
}

void TrainLoop::StartEpoch(int64_t epoch) {
  epoch_.start = Clock::now();
  sampler_->set_epoch(epoch);
  epoch_.first_done = epoch == pos_.epoch ? pos_.samples_done : 0;
  pos_.epoch = epoch;
  pos_.samples_done = epoch_.first_done;
  const int64_t batch_size = cfg_.data.batch_size;
  epoch_.indices = sampler_->Indices(epoch_.first_done);
  epoch_.batches =
      (static_cast<int64_t>(epoch_.indices.size()) + batch_size - 1) / batch_size;
  epoch_.first_iteration = epoch_.first_done / global_batch_;
  task_->StartEpoch(epoch, epoch_.indices, batch_size, epoch_.first_done > 0);
  epoch_.loss_sum = 0;
  epoch_.seen = 0;
  epoch_.seen_at_start = 0;
  if (epoch_.first_done == 0) return;
  // A resumed epoch starts from the sums so far: each rank's own when every
  // rank restored its own snapshot on as many ranks; else the sums over all
  // ranks (counted once, on rank 0), which a per-step snapshot does not
  // hold: then rank 0 estimates them from its source's own (the mean of one
  // rank, times the ranks that took it).
  if (own_sums_) {
    epoch_.loss_sum = pos_.local_loss_sum;
    epoch_.seen = pos_.local_seen;
    epoch_.seen_at_start = pos_.local_seen * static_cast<double>(world_);
  } else {
    const bool global = pos_.sums_global;
    const double w = static_cast<double>(std::max<int64_t>(resumed_world_, 1));
    epoch_.seen_at_start = global ? pos_.seen : pos_.local_seen * w;
    if (leader_) {
      epoch_.loss_sum = global ? pos_.loss_sum : pos_.local_loss_sum * w;
      epoch_.seen = epoch_.seen_at_start;
    }
  }
}

int64_t TrainLoop::GlobalIteration(int64_t epoch, int64_t k) const {
  return epoch * batches_per_epoch_ + epoch_.first_iteration + k;
}

absl::Status TrainLoop::TrainBatch(int64_t epoch, int64_t k) {
  const int64_t batch_size = cfg_.data.batch_size;
  const int64_t ni = GlobalIteration(epoch, k);
  // The schedule counts samples, so it goes on from the same sample
  // whatever the world size.
  const int64_t done = sampler_->Advance(epoch_.first_done, k * batch_size);
  const IterationValues v =
      schedule_->At(epoch * task_->train_size() + done, epoch, global_batch_);
  optimizer_->Apply(v);
  const bool step = pos_.micro_batches + 1 >= v.accumulate;
  MaybeInjectFault(ni);
  HoldWhileAsked();
  const size_t b = static_cast<size_t>(k * batch_size);
  const size_t e = std::min(epoch_.indices.size(), b + static_cast<size_t>(batch_size));
  if (sample_log_ >= 0) RETURN_IF_ERROR(LogSamples(epoch, epoch_.first_iteration + k, b, e));
  // Without a step the reducer only accumulates (DDP's no_sync()).
  if (ddp_) ddp_->BeforeForward(step);
  ASSIGN_OR_RETURN(at::Tensor loss, task_->Loss(epoch, epoch_.indices, b, e));
  // What backward takes: the loss, times the task's gradient scale.
  const double scale = task_->loss_scale();
  at::Tensor objective = scale == 1.0 ? loss : loss * scale;
  if (ddp_) {
    // This rank's vote to stop after this step (a SIGTERM came): the
    // step's allreduce tells every rank the votes (ddp.h, stop_signal.h).
    if (at::Tensor vote = ddp_->StopTerm(StopSignal::Requested()); vote.defined()) {
      objective = objective + vote;
    }
    ddp_->BeforeBackward(objective, step);
  }
  if (scaler_) {
    (objective * scaler_->scale()).backward();
  } else {
    objective.backward();
  }
  ++pos_.micro_batches;
  if (step) OptimizerStep(epoch, k);
  const double l = loss.item<double>();
  if (!marked_ready_ && !run_.ready_dir.empty()) RETURN_IF_ERROR(MarkReady());
  epoch_.loss_sum += l * static_cast<double>(e - b);
  epoch_.seen += static_cast<double>(e - b);
  if (leader_) {
    progress_.Update(epoch, cfg_.train.epochs, epoch_.first_iteration + k,
                     epoch_.first_iteration, epoch_.first_iteration + epoch_.batches, l, v.lr,
                     SecondsSince(epoch_.start));
  }
  // Every rank, so that hang detection knows each one's step (to the
  // launcher or node daemon, `elastrun status`); never blocks.
  worker::ReportProgress(
      ni + 1, {{"epoch", static_cast<double>(epoch + 1)}, {"loss", l}, {"lr", v.lr}});
  return step ? AfterStep(k) : absl::OkStatus();
}

void TrainLoop::OptimizerStep(int64_t epoch, int64_t k) {
  const double factor = 1.0 / (static_cast<double>(pos_.micro_batches) *
                               (scaler_ ? scaler_->scale() : 1.0));
  const bool found_inf = optimizer_->ScaleGradients(factor, scaler_.has_value());
  if (const double clip = task_->clip_grad_norm(); clip > 0 && !found_inf) {
    torch::nn::utils::clip_grad_norm_(task_->model()->parameters(), clip);
  }
  if (!scaler_ || scaler_->Update(found_inf)) {
    optimizer_->Step();
  } else {
    optimizer_->ZeroGrad();
  }
  pos_.micro_batches = 0;
  ++pos_.lineage;
  task_->AfterStep();
  // Every rank learns the same votes with the gradients: all stop after
  // the same step. Alone, this process's own request decides.
  stop_agreed_ = ddp_ ? ddp_->StopVoted() : StopSignal::Requested();
  pos_.step_epoch = epoch;
  pos_.step_done = sampler_->Advance(epoch_.first_done, (k + 1) * cfg_.data.batch_size);
}

absl::Status TrainLoop::EndEpoch(int64_t epoch) {
  const TrainOptions& train = cfg_.train;
  const double train_s = SecondsSince(epoch_.start);
  // With the epoch's sums, the ranks' votes to stop after its end: one
  // answer for all.
  std::vector<double> train_sums = {epoch_.loss_sum, epoch_.seen,
                                    StopSignal::Requested() ? 1.0 : 0.0};
  RETURN_IF_ERROR(SumOverRanks(group_, train_sums));
  stop_agreed_ = train_sums[2] > 0;
  EpochTrain trained;
  trained.epoch = epoch + 1;
  trained.loss = train_sums[1] > 0 ? train_sums[0] / train_sums[1] : 0;
  trained.lr = optimizer_->lr();
  for (const auto& group : optimizer_->torch_optimizer().param_groups()) {
    trained.lrs.push_back(group.options().get_lr());
  }
  // Training only (this run's part of the epoch when resumed mid-way).
  trained.images_per_sec = (train_sums[1] - epoch_.seen_at_start) / train_s;
  trained.start = epoch_.start;
  ASSIGN_OR_RETURN(TaskEval eval, task_->Evaluate(trained));
  result_.epoch = epoch + 1;
  result_.train_loss = trained.loss;
  result_.test_acc = eval.acc;
  result_.test_loss = eval.loss;
  const bool best = eval.score > pos_.best_acc;
  if (best) pos_.best_acc = eval.score;
  // Every rank keeps the rows: any node may hold rank 0 after a re-form.
  metrics_rows_ += eval.row;
  ++pos_.lineage;
  // Inside an accumulation, the samples since the last step are recomputed
  // on resume (their gradients differ by rank and are not stored): from
  // the last step's position in this epoch, or the whole epoch when that
  // step ended the one before; when it lies further back, they are dropped.
  if (pos_.micro_batches == 0) {
    pos_.tail_from = -1;
  } else if (pos_.step_epoch == epoch) {
    pos_.tail_from = pos_.step_done;
  } else if (pos_.step_epoch + 1 == epoch && pos_.step_done >= task_->train_size()) {
    pos_.tail_from = 0;
  } else {
    pos_.tail_from = -1;
  }
  pos_.epoch = epoch + 1;
  pos_.samples_done = 0;
  // A mid-epoch checkpoint still pending (no step since it was due) is
  // this one.
  const bool due = checkpoint_pending_ ||
                   (train.checkpoint_period > 0 &&
                    ((epoch + 1) % train.checkpoint_period == 0 || epoch + 1 == train.epochs));
  checkpoint_pending_ = false;
  // best.ckpt follows every best epoch, a periodic checkpoint due or not.
  RETURN_IF_ERROR(CaptureState(Capture::kEpochEnd, due || best, best));
  if (stop_agreed_) return StopWithThisState(Capture::kEpochEnd);
  pos_.tail_from = -1;
  if (!leader_) return absl::OkStatus();
  return ReportEpoch(eval);
}

// Rank 0: the task's csv, plots and the epoch's line.
absl::Status TrainLoop::ReportEpoch(const TaskEval& eval) {
  progress_.Finish();
  RETURN_IF_ERROR(metrics_->AppendRow(eval.row));
  RETURN_IF_ERROR(task_->WritePlots(cfg_.train.output_dir));
  std::fprintf(run_.out, "%s\n", eval.line.c_str());
  std::fflush(run_.out);
  return absl::OkStatus();
}

absl::StatusOr<TrainResult> TrainLoop::Finish() {
  if (result_.epoch == 0) {
    // Resumed from the last checkpoint of a finished run: nothing to train.
    ASSIGN_OR_RETURN(TaskEval eval, task_->Evaluate(EpochTrain{}));
    result_.epoch = pos_.epoch;
    result_.test_acc = eval.acc;
    result_.test_loss = eval.loss;
  }
  RETURN_IF_ERROR(task_->Finish(cfg_.train.output_dir));
  result_.params_sha256 = ParamsSha256(task_->state_module());
  result_.seconds = SecondsSince(start_);
  // The run's last checkpoint is on disk before anyone reports success.
  if (persister_) RETURN_IF_ERROR(persister_->Flush());
  if (leader_ && captures_.taken > 0) {
    std::fprintf(run_.out,
                 "state captures: %lld (skipped %lld), training thread stalled %.2f ms each "
                 "(max %.2f ms)\n",
                 static_cast<long long>(captures_.taken), static_cast<long long>(captures_.skipped),
                 captures_.seconds * 1e3 / static_cast<double>(captures_.taken),
                 captures_.max_seconds * 1e3);
  }
  if (group_ != nullptr) RETURN_IF_ERROR(group_->Barrier());
  if (leader_) {
    std::fprintf(run_.out, "%s\n", FinalLine(result_).c_str());
    std::fflush(run_.out);
  }
  return result_;
}

absl::Status TrainLoop::LogSamples(int64_t epoch, int64_t i, size_t begin, size_t end) {
  std::string line = absl::StrCat(run_.attempt, " ", epoch, " ", i);
  for (size_t k = begin; k < end; ++k) absl::StrAppend(&line, " ", epoch_.indices[k]);
  line.push_back('\n');
  // One write per batch, so a killed rank's lines are complete.
  if (::write(sample_log_, line.data(), line.size()) !=
      static_cast<ssize_t>(line.size())) {
    return absl::InternalError(
        absl::StrCat("writing ", run_.sample_log, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TrainLoop::MarkReady() {
  marked_ready_ = true;
  const std::string name = absl::StrCat(run_.ready_dir, "/ready.", run_.attempt, ".", rank_);
  // Whole or absent: the reader polls for it.
  return WriteFileAtomically(name, absl::StrCat(absl::ToUnixNanos(absl::Now()), "\n"));
}

void TrainLoop::HoldWhileAsked() const {
  if (run_.hold_file.empty()) return;
  // Every rank holds before the same batch: the ranks agree on whether any
  // sees the file (a rank that went on alone would wait in the step's
  // allreduce for a holding peer, beatless, and look hung). Leaving needs
  // no agreement: each sees the file gone within a poll.
  if (group_ != nullptr) {
    std::vector<double> seen = {::access(run_.hold_file.c_str(), F_OK) == 0 ? 1.0 : 0.0};
    if (!SumOverRanks(group_, seen).ok() || seen[0] == 0) return;
  }
  while (::access(run_.hold_file.c_str(), F_OK) == 0 && !StopSignal::Requested()) {
    worker::ReportBusy();
    ::usleep(10000);
  }
}

void TrainLoop::MaybeInjectFault(int64_t ni) const {
  if (ni != run_.fail_at_iteration || rank_ != run_.fail_rank) return;
  std::fprintf(stderr, "rank %d: injected SIGKILL at iteration %lld\n", rank_,
               static_cast<long long>(ni));
  std::fflush(stderr);
  ::raise(SIGKILL);
}

}  // namespace elastrun::trainer
