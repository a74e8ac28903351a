#include "trainer/trainer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/config.h"
#include "common/status_macros.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_file.h"
#include "trainer/data.h"
#include "trainer/ddp.h"
#include "trainer/loss_scaler.h"
#include "trainer/digest.h"
#include "trainer/metrics.h"
#include "trainer/models.h"
#include "trainer/optimizer.h"
#include "trainer/plot.h"
#include "trainer/sampler.h"
#include "trainer/schedule.h"
#include "worker/process_group.h"
#include "worker/progress.h"

namespace elastrun::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The objects a config describes, instantiated.
struct Components {
  Model model;
  OptimizerSpec optimizer;
  ScheduleOptions schedule;
};

absl::StatusOr<Components> Instantiate(const config::Node& cfg) {
  Components c;
  ASSIGN_OR_RETURN(config::Object model, config::InstantiateAt(cfg, "model"));
  ASSIGN_OR_RETURN(std::shared_ptr<Model> m, model.Get<Model>());
  c.model = *m;
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
    at::Tensor c = p.detach().contiguous();
    h.Update(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  }
  return h.HexDigest();
}

// Sums `values` over ranks (no-op without a group).
absl::Status SumOverRanks(worker::ProcessGroup* group, std::vector<double>& values) {
  if (group == nullptr) return absl::OkStatus();
  at::Tensor t = at::tensor(values, at::kDouble);
  RETURN_IF_ERROR(group->AllReduce(t));
  for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
  return absl::OkStatus();
}

struct EvalResult {
  double loss = 0;
  double acc = 0;
};

// Each rank scores its unpadded shard; correct, loss and count are summed.
absl::StatusOr<EvalResult> Evaluate(Model& model, const Dataset& test, int world, int rank,
                                    worker::ProcessGroup* group) {
  torch::NoGradGuard no_grad;
  model->eval();
  const std::vector<int64_t> shard = EvalShard(test.size(), world, rank);
  constexpr size_t kBatch = 1000;
  std::vector<double> sums = {0, 0, 0};  // correct, loss sum, count
  for (size_t b = 0; b < shard.size(); b += kBatch) {
    const size_t e = std::min(shard.size(), b + kBatch);
    Batch batch = MakeBatch(test, shard, b, e);
    at::Tensor logits = model->forward(batch.x);
    sums[0] += logits.argmax(1).eq(batch.y).sum().item<double>();
    sums[1] += torch::nn::functional::cross_entropy(
                   logits, batch.y,
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
    sums[2] += static_cast<double>(e - b);
  }
  RETURN_IF_ERROR(SumOverRanks(group, sums));
  model->train();
  return EvalResult{sums[1] / sums[2], sums[0] / sums[2]};
}

// Orders checkpoints of a run: epoch-major, then batches done.
int64_t CheckpointKey(const TrainPosition& p) { return p.epoch * 1000000 + p.iteration; }

// Finds the newest checkpoint any rank holds (see RunOptions::resume),
// broadcasts it from that rank, and restores it on every rank. Returns
// false when starting fresh.
absl::StatusOr<bool> Resume(const RunOptions& run, const TrainerConfig& cfg, int world, int rank,
                            worker::ProcessGroup* group, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, TrainPosition* position) {
  CheckpointBlob local;
  const std::string& path = *run.resume;
  if (!path.empty()) {
    absl::StatusOr<CheckpointBlob> blob = ReadCheckpointFile(path);
    if (blob.ok()) {
      local = *std::move(blob);
    } else if (!absl::IsNotFound(blob.status())) {
      return blob.status();
    }
  } else {
    std::vector<std::string> skipped;
    absl::StatusOr<CheckpointBlob> blob =
        LoadNewestCheckpoint(CheckpointDir(cfg.train.output_dir), &skipped);
    for (const std::string& why : skipped) {
      std::fprintf(stderr, "rank %d: skipping checkpoint: %s\n", rank, why.c_str());
    }
    if (blob.ok()) local = *std::move(blob);
  }
  // Slot r holds rank r's key + 1 (0: none); a sum gathers them.
  std::vector<double> keys(static_cast<size_t>(world), 0.0);
  keys[static_cast<size_t>(rank)] = static_cast<double>(local.key + 1);
  RETURN_IF_ERROR(SumOverRanks(group, keys));
  const int source = static_cast<int>(std::max_element(keys.begin(), keys.end()) - keys.begin());
  if (keys[static_cast<size_t>(source)] == 0) {
    if (!path.empty()) {
      return absl::NotFoundError(absl::StrCat("--resume ", path, ": no rank has this file"));
    }
    if (rank == 0) {
      std::fprintf(run.out, "no checkpoint in %s; starting fresh\n",
                   CheckpointDir(cfg.train.output_dir).c_str());
    }
    return false;
  }
  std::string payload = std::move(local.payload);
  if (group != nullptr) {
    at::Tensor size = at::tensor({static_cast<int64_t>(payload.size())}, at::kLong);
    RETURN_IF_ERROR(group->Broadcast(size, source));
    at::Tensor bytes = at::empty({size.item<int64_t>()}, at::kByte);
    if (rank == source) std::memcpy(bytes.data_ptr(), payload.data(), payload.size());
    RETURN_IF_ERROR(group->Broadcast(bytes, source));
    payload.assign(static_cast<const char*>(bytes.data_ptr()),
                   static_cast<size_t>(bytes.numel()));
  }
  RETURN_IF_ERROR(RestoreState(payload, model, optimizer, position, nullptr));
  if (position->world_size != world && position->iteration > 0) {
    // Shards depend on the world size: a partly done epoch cannot be
    // continued exactly, so it restarts.
    if (rank == 0) {
      std::fprintf(run.out, "checkpoint taken on %lld ranks, now %d: epoch %lld restarts\n",
                   static_cast<long long>(position->world_size), world,
                   static_cast<long long>(position->epoch + 1));
    }
    position->iteration = 0;
  }
  if (rank == 0) {
    std::fprintf(run.out, "resumed from rank %d's checkpoint: epoch %lld, iteration %lld\n",
                 source, static_cast<long long>(position->epoch + 1),
                 static_cast<long long>(position->iteration));
  }
  return true;
}

absl::StatusOr<TrainResult> TrainImpl(const TrainerConfig& cfg, const RunOptions& run,
                                      worker::ProcessGroup* group) {
  const Clock::time_point start = Clock::now();
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  const bool leader = rank == 0;
  const DataOptions& data = cfg.data;
  const TrainOptions& train = cfg.train;
  if (train.threads > 0) torch::set_num_threads(static_cast<int>(train.threads));

  // The same initial weights everywhere (rank 0's are broadcast anyway).
  torch::manual_seed(static_cast<uint64_t>(train.seed));
  ASSIGN_OR_RETURN(Components c, Instantiate(cfg.resolved));
  Model& model = c.model;

  ASSIGN_OR_RETURN(Dataset train_set, LoadDataset(data, /*train=*/true,
                                                  static_cast<uint64_t>(train.seed)));
  ASSIGN_OR_RETURN(Dataset test_set, LoadDataset(data, /*train=*/false,
                                                 static_cast<uint64_t>(train.seed)));
  SamplerOptions sampler_options;
  sampler_options.seed = static_cast<uint64_t>(train.seed);
  sampler_options.drop_last = data.drop_last;
  ASSIGN_OR_RETURN(DistributedSampler sampler,
                   DistributedSampler::Create(train_set.size(), world, rank, sampler_options,
                                              TorchPermutation));
  const int64_t nb = (sampler.num_samples() + data.batch_size - 1) / data.batch_size;
  const int64_t global_batch = data.batch_size * world;
  ScheduleOptions schedule_options = c.schedule;
  ASSIGN_OR_RETURN(YoloV5Schedule schedule,
                   YoloV5Schedule::Create(schedule_options, c.optimizer.lr0, nb,
                                          c.optimizer.nbs, global_batch));
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(c.optimizer, *model,
                                     schedule.ScaledWeightDecay(c.optimizer.weight_decay)));

  TrainPosition pos;
  bool resumed = false;
  if (run.resume.has_value()) {
    ASSIGN_OR_RETURN(resumed, Resume(run, cfg, world, rank, group, *model,
                                     optimizer->torch_optimizer(), &pos));
  }
  if (resumed && pos.world_size != world) {
    // Iterations per epoch depend on the world size, so the schedule's step
    // counter restarts here, and gradients accumulated for the old group
    // are dropped.
    pos.last_opt_step = pos.epoch * nb + pos.iteration - 1;
    pos.micro_batches = 0;
    optimizer->ZeroGrad();
  }
  pos.world_size = world;
  std::optional<LossScaler> scaler;
  if (train.amp) {
    scaler.emplace();
    if (resumed && pos.amp_scale > 0) scaler->Restore(pos.amp_scale, pos.amp_growth_tracker);
    if (leader) {
      std::fprintf(run.out, "amp: CPU build, so no autocast; the loss scaler runs in fp32\n");
    }
  }

  std::unique_ptr<DistributedDataParallel> ddp;
  if (group != nullptr) {
    ASSIGN_OR_RETURN(ddp, DistributedDataParallel::Create(model.ptr(), group->gloo()));
  }

  std::optional<MetricsWriter> metrics;
  if (leader) {
    RETURN_IF_ERROR(MakeDirs(train.output_dir));
    if (!resumed) {
      ASSIGN_OR_RETURN(bool moved, SetAsideOldCheckpoints(CheckpointDir(train.output_dir)));
      if (moved) {
        std::fprintf(run.out, "fresh run: moved the folder's old checkpoints to %s.prev\n",
                     CheckpointDir(train.output_dir).c_str());
      }
    }
    RETURN_IF_ERROR(WriteFileAtomically(train.output_dir + "/config.yaml",
                                        config::ToYaml(cfg.resolved)));
    ASSIGN_OR_RETURN(MetricsWriter w,
                     MetricsWriter::Open(train.output_dir + "/metrics.csv", resumed));
    metrics.emplace(std::move(w));
    std::fprintf(run.out,
                 "elastrun-train: %d rank(s), %lld train / %lld test samples, batch %lld x %d, "
                 "%lld iterations/epoch, warm-up %lld iterations, accumulate %lld\n",
                 world, static_cast<long long>(train_set.size()),
                 static_cast<long long>(test_set.size()),
                 static_cast<long long>(data.batch_size), world, static_cast<long long>(nb),
                 static_cast<long long>(schedule.warmup_iters()),
                 static_cast<long long>(schedule.accumulate()));
    std::fflush(run.out);
  }
  Progress progress(run.out, run.tty, train.log_period);

  const std::string checkpoint_dir = CheckpointDir(train.output_dir);
  const std::string config_yaml = config::ToYaml(cfg.resolved);
  // Rank 0 writes; every rank holds the same state.
  auto save = [&](bool best) -> absl::Status {
    if (!leader) return absl::OkStatus();
    CheckpointBlob blob;
    blob.key = CheckpointKey(pos);
    if (scaler) {
      pos.amp_scale = scaler->scale();
      pos.amp_growth_tracker = scaler->growth_tracker();
    }
    blob.payload = SerializeState(*model, optimizer->torch_optimizer(), pos, config_yaml);
    return SaveCheckpoint(checkpoint_dir, blob, best);
  };

  int sample_log = -1;
  if (!run.sample_log.empty()) {
    sample_log = ::open(run.sample_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sample_log < 0) {
      return absl::InternalError(absl::StrCat("opening ", run.sample_log, ": ",
                                              std::strerror(errno)));
    }
  }
  absl::Cleanup close_sample_log = [sample_log] {
    if (sample_log >= 0) ::close(sample_log);
  };

  model->train();
  TrainResult result;
  int64_t& last_opt_step = pos.last_opt_step;
  int64_t& micro_batches = pos.micro_batches;
  for (int64_t epoch = pos.epoch; epoch < train.epochs; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    sampler.set_epoch(epoch);
    const int64_t first = epoch == pos.epoch ? pos.iteration : 0;
    pos.epoch = epoch;
    const std::vector<int64_t> indices = sampler.Indices(first * data.batch_size);
    // A resumed epoch starts from the sums saved over all ranks (counted
    // once, on rank 0).
    double loss_sum = first > 0 && leader ? pos.loss_sum : 0;
    const double pos_seen_at_start = first > 0 ? pos.seen : 0;
    double seen = first > 0 && leader ? pos.seen : 0;
    for (int64_t i = first; i < nb; ++i) {
      const int64_t ni = i + nb * epoch;
      const IterationValues v = schedule.At(ni, epoch);
      optimizer->Apply(v);
      const bool step = ni - last_opt_step >= v.accumulate;
      if (ni == run.fail_at_iteration && rank == run.fail_rank) {
        std::fprintf(stderr, "rank %d: injected SIGKILL at iteration %lld\n", rank,
                     static_cast<long long>(ni));
        std::fflush(stderr);
        ::raise(SIGKILL);
      }
      const size_t b = static_cast<size_t>((i - first) * data.batch_size);
      const size_t e = std::min(indices.size(), b + static_cast<size_t>(data.batch_size));
      if (sample_log >= 0) {
        std::string line = absl::StrCat(run.attempt, " ", epoch, " ", i);
        for (size_t k = b; k < e; ++k) absl::StrAppend(&line, " ", indices[k]);
        line.push_back('\n');
        if (::write(sample_log, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
          return absl::InternalError(absl::StrCat("writing ", run.sample_log, ": ",
                                                  std::strerror(errno)));
        }
      }
      Batch batch = MakeBatch(train_set, indices, b, e);
      if (ddp) ddp->BeforeForward(step);
      at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.x), batch.y);
      if (ddp) ddp->BeforeBackward(loss, step);
      if (scaler) {
        (loss * scaler->scale()).backward();
      } else {
        loss.backward();
      }
      ++micro_batches;
      if (step) {
        const double factor =
            1.0 / (static_cast<double>(micro_batches) * (scaler ? scaler->scale() : 1.0));
        const bool found_inf = optimizer->ScaleGradients(factor, scaler.has_value());
        if (!scaler || scaler->Update(found_inf)) {
          optimizer->Step();
        } else {
          optimizer->ZeroGrad();
        }
        micro_batches = 0;
        last_opt_step = ni;
      }
      const double l = loss.item<double>();
      loss_sum += l * static_cast<double>(e - b);
      seen += static_cast<double>(e - b);
      if (leader) {
        progress.Update(epoch, train.epochs, i, nb, l, v.lr, SecondsSince(epoch_start));
        // To the launcher or node daemon (`elastrun status`); never blocks.
        worker::ReportProgress(ni + 1, {{"epoch", static_cast<double>(epoch + 1)},
                                        {"loss", l},
                                        {"lr", v.lr}});
      }
      if (train.checkpoint_iters > 0 && (i + 1) % train.checkpoint_iters == 0 && i + 1 < nb) {
        pos.iteration = i + 1;
        std::vector<double> sums = {loss_sum, seen};
        RETURN_IF_ERROR(SumOverRanks(group, sums));
        pos.loss_sum = sums[0];
        pos.seen = sums[1];
        RETURN_IF_ERROR(save(/*best=*/false));
      }
    }
    const double train_s = SecondsSince(epoch_start);
    std::vector<double> train_sums = {loss_sum, seen};
    RETURN_IF_ERROR(SumOverRanks(group, train_sums));
    ASSIGN_OR_RETURN(EvalResult eval, Evaluate(model, test_set, world, rank, group));
    const double epoch_s = SecondsSince(epoch_start);
    result.epoch = epoch + 1;
    result.train_loss = train_sums[0] / train_sums[1];
    result.test_acc = eval.acc;
    result.test_loss = eval.loss;
    const bool best = eval.acc > pos.best_acc;
    if (best) pos.best_acc = eval.acc;
    pos.epoch = epoch + 1;
    pos.iteration = 0;
    if (train.checkpoint_period > 0 &&
        ((epoch + 1) % train.checkpoint_period == 0 || epoch + 1 == train.epochs)) {
      RETURN_IF_ERROR(save(best));
    }
    if (leader) {
      progress.Finish();
      EpochMetrics m;
      m.epoch = epoch + 1;
      m.train_loss = result.train_loss;
      m.test_loss = eval.loss;
      m.test_acc = eval.acc;
      m.lr = optimizer->lr();
      m.seconds = epoch_s;
      // Training only (this run's part of the epoch when resumed mid-way).
      m.images_per_sec = (train_sums[1] - pos_seen_at_start) / train_s;
      RETURN_IF_ERROR(metrics->Append(m));
      RETURN_IF_ERROR(WritePlots(train.output_dir + "/metrics.csv",
                                 train.output_dir + "/plots.svg"));
      std::fprintf(run.out,
                   "epoch %lld/%lld: train_loss %.4f test_loss %.4f test_acc %.4f lr %.5g "
                   "%.1fs %.0f img/s\n",
                   static_cast<long long>(m.epoch), static_cast<long long>(train.epochs),
                   m.train_loss, m.test_loss, m.test_acc, m.lr, m.seconds, m.images_per_sec);
      std::fflush(run.out);
    }
  }
  if (result.epoch == 0) {
    // Resumed from the last checkpoint of a finished run: nothing to train.
    ASSIGN_OR_RETURN(EvalResult eval, Evaluate(model, test_set, world, rank, group));
    result.epoch = pos.epoch;
    result.test_acc = eval.acc;
    result.test_loss = eval.loss;
  }
  result.params_sha256 = ParamsSha256(*model);
  result.seconds = SecondsSince(start);
  if (group != nullptr) RETURN_IF_ERROR(group->Barrier());
  if (leader) {
    std::fprintf(run.out, "%s\n", FinalLine(result).c_str());
    std::fflush(run.out);
  }
  return result;
}

}  // namespace

std::string FinalLine(const TrainResult& r) {
  return absl::StrFormat("final: epoch=%d test_acc=%.4f train_loss=%.4f params_sha256=%s",
                         r.epoch, r.test_acc, r.train_loss, r.params_sha256);
}

absl::StatusOr<TrainResult> TrainOnGroup(const TrainerConfig& cfg, const RunOptions& run,
                                         worker::ProcessGroup* group) {
  try {
    return TrainImpl(cfg, run, group);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

absl::StatusOr<TrainResult> Train(const TrainerConfig& cfg, const RunOptions& run) {
  std::unique_ptr<worker::ProcessGroup> group;
  if (run.env.has_value()) {
    ASSIGN_OR_RETURN(group, worker::InitProcessGroup(*run.env));
  }
  absl::StatusOr<TrainResult> result = TrainOnGroup(cfg, run, group.get());
  if (!result.ok()) {
    // Keep the group up: this rank's error must be recorded before peers
    // see its connections close (worker/record.h).
    group.release();
  }
  return result;
}

}  // namespace elastrun::trainer
