#include "trainer/trainer.h"

#include <cstdlib>
#include <exception>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/worker_env.h"
#include "trainer/device.h"
#include "trainer/stop_signal.h"
#include "trainer/train_loop.h"
#include "worker/process_group.h"

namespace elastrun::trainer {

std::string FinalLine(const TrainResult& r) {
  return absl::StrFormat("final: epoch=%d test_acc=%.4f train_loss=%.4f params_sha256=%s",
                         r.epoch, r.test_acc, r.train_loss, r.params_sha256);
}

absl::StatusOr<TrainResult> TrainOnGroup(const TrainerConfig& cfg, const RunOptions& run,
                                         worker::ProcessGroup* group) {
  try {
    ASSIGN_OR_RETURN(std::unique_ptr<TrainLoop> loop, TrainLoop::Create(cfg, run, group));
    return loop->Run();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

void PrepareStandby(const TrainerConfig& cfg) {
  if (std::getenv(env::kStandbyFd) == nullptr) return;  // Not a standby.
  // The data does not depend on the rank: load it while waiting (the
  // classifier's; the detector scans its dataset when it starts).
  if (cfg.data.yaml.empty()) PreloadDatasets(cfg.data, static_cast<uint64_t>(cfg.train.seed));
  const char* text = std::getenv(env::kStandbyLocalRank);
  int local_rank = -1;
  if (text == nullptr || !absl::SimpleAtoi(text, &local_rank) || local_rank < 0) return;
  absl::StatusOr<Placement> placement = ResolvePlacement(cfg.train, local_rank);
  if (placement.ok()) WarmUp(*placement);
}

absl::StatusOr<TrainResult> Train(const TrainerConfig& cfg, const RunOptions& run) {
  // Unarmed until training runs: SIGTERM still ends the process at once.
  StopSignal::Install();
  std::unique_ptr<worker::ProcessGroup> group;
  if (run.env.has_value()) {
    // A rank on a GPU gets an NCCL group on it beside Gloo.
    ASSIGN_OR_RETURN(Placement placement, ResolvePlacement(cfg.train, run.env->local_rank));
    worker::ProcessGroupOptions options;
    if (placement.device.is_cuda()) options.cuda_device = placement.device.index();
    ASSIGN_OR_RETURN(group, worker::InitProcessGroup(*run.env, options));
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
