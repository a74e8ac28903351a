// elastrun-train: the LibTorch DDP trainer. Run under `elastrun run` (or
// torchrun) for one process per rank:
//   elastrun run --nproc-per-node 2 elastrun-train
//       --config configs/fashion_mnist_mlp.yaml train.epochs=2
// Flags: see Usage() in trainer/options.cc.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/flags.h"
#include "common/version.h"
#include "trainer/options.h"
#include "trainer/trainer.h"
#include "worker/env.h"
#include "worker/record.h"
#include "worker/standby.h"

namespace {

// Every iteration allocates and frees the same activation and gradient
// buffers (megabytes each). glibc serves blocks above its mmap threshold
// with fresh mappings and trims the heap top back to the kernel, so each
// iteration page-faults its buffers in again (zeroed by the kernel): up to
// a third of the CNN's time on one thread (bench/README.md). Keeping blocks
// up to 32 MiB in the heap, and the heap at its high-water mark, removes
// that; PyTorch's CPU tuning guide gets the same from jemalloc or tcmalloc.
// Whoever set glibc's malloc tunables in the environment keeps theirs.
void KeepFreedBuffersInTheHeap() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

// What the launcher's environment says of this run: the worker's place in
// its group (when started by a launcher), and the test and benchmark hooks.
absl::StatusOr<elastrun::trainer::RunOptions> RunOptionsFromEnvironment(
    const std::optional<std::string>& resume) {
  using namespace elastrun;
  trainer::RunOptions run;
  run.resume = resume;
  // Started by a launcher (RANK set): join its group; by hand: one process.
  // (A standby worker learned its RANK in Main, when it was activated.)
  if (std::getenv("RANK") != nullptr) {
    absl::StatusOr<worker::WorkerEnv> env = worker::WorkerEnv::FromEnvironment();
    if (!env.ok()) return env.status();
    run.env = *env;
    // The run's id: with it, any restart or re-form (whatever the restart
    // count) continues from the newest checkpoint of this run.
    run.run_id = env->run_id;
    // Tests: ELASTRUN_TRAIN_FAIL_AT=RANK:ITERATION kills that rank there, in
    // the first attempt only.
    if (const char* fail = std::getenv("ELASTRUN_TRAIN_FAIL_AT");
        fail != nullptr && env->restart_count == 0) {
      if (std::sscanf(fail, "%d:%lld", &run.fail_rank,
                      reinterpret_cast<long long*>(&run.fail_at_iteration)) != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("ELASTRUN_TRAIN_FAIL_AT=", fail, " is not RANK:ITERATION"));
      }
    }
  }
  // Benchmarks: ELASTRUN_TRAIN_READY_DIR=DIR marks the first batch done
  // (RunOptions::ready_dir).
  if (const char* dir = std::getenv("ELASTRUN_TRAIN_READY_DIR"); dir != nullptr) {
    run.ready_dir = dir;
    run.attempt = run.env ? run.env->restart_count : 0;
  }
  // Tests: ELASTRUN_TRAIN_SAMPLE_LOG=DIR logs the samples of every batch to
  // DIR/rank<RANK>.log (trainer.h, RunOptions::sample_log).
  if (const char* dir = std::getenv("ELASTRUN_TRAIN_SAMPLE_LOG"); dir != nullptr && *dir != 0) {
    run.sample_log = std::string(dir) + "/rank" + std::to_string(run.env ? run.env->rank : 0) +
                     ".log";
    // The round when the launcher gives one (it grows with every restart
    // and re-form), else the restart count.
    run.attempt = run.env ? static_cast<int>(run.env->round.value_or(run.env->restart_count)) : 0;
  }
  // Tests: ELASTRUN_TRAIN_HOLD_FILE=FILE holds every rank before each batch
  // while FILE exists (RunOptions::hold_file).
  if (const char* file = std::getenv("ELASTRUN_TRAIN_HOLD_FILE"); file != nullptr) {
    run.hold_file = file;
  }
  return run;
}

int Main(int argc, char** argv) {
  KeepFreedBuffersInTheHeap();
  using namespace elastrun;
  absl::StatusOr<trainer::Flags> flags =
      trainer::ParseFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    std::cerr << flags::UsageError("elastrun-train", std::string(flags.status().message()));
    return flags::kExitUsage;
  }
  if (flags->help) {
    std::cout << trainer::Usage();
    return 0;
  }
  if (flags->version) {
    std::cout << VersionLine("elastrun-train") << "\n";
    return 0;
  }
  if (flags->list_targets) {
    config::PrintTargets(std::cout);
    return 0;
  }
  absl::StatusOr<trainer::TrainerConfig> cfg =
      trainer::LoadTrainerConfig(flags->config, flags->overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "elastrun-train: %s\n", std::string(cfg.status().message()).c_str());
    return 2;
  }
  if (flags->print_config) {
    std::cout << config::ToYaml(cfg->resolved);
    return 0;
  }
  // Under `elastrun run --standby` this process was started ahead of its
  // attempt: with the config loaded and its GPU (if any) ready, wait here
  // to learn its rank.
  trainer::PrepareStandby(*cfg);
  if (absl::Status s = worker::AwaitStandbyActivation(); !s.ok()) {
    std::fprintf(stderr, "elastrun-train: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<trainer::RunOptions> run = RunOptionsFromEnvironment(flags->resume);
  if (!run.ok()) {
    std::fprintf(stderr, "elastrun-train: %s\n", std::string(run.status().message()).c_str());
    return 2;
  }
  run->tty = ::isatty(STDOUT_FILENO) == 1;
  absl::StatusOr<trainer::TrainResult> result = trainer::Train(*cfg, *run);
  // Thrown so that RunRecorded leaves the launcher an error file.
  if (!result.ok()) throw std::runtime_error(std::string(result.status().message()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return elastrun::worker::RunRecorded([&] { return Main(argc, argv); });
}
