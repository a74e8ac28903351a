// The smallest worker a user writes against the installed library: reads
// the torchrun environment, (with LibTorch) joins the Gloo group and sums
// the ranks, reports progress, and prints one line per rank.
#include <cstdio>

#include "worker/env.h"
#include "worker/progress.h"
#include "worker/record.h"
#ifdef CONSUMER_WITH_TORCH
#include "worker/process_group.h"
#endif

int main() {
  return elastrun::worker::RunRecorded([] {
    auto env = elastrun::worker::WorkerEnv::FromEnvironment();
    if (!env.ok()) {
      std::fprintf(stderr, "consumer: %s\n", env.status().ToString().c_str());
      return 1;
    }
    long sum = env->rank;
#ifdef CONSUMER_WITH_TORCH
    auto pg = elastrun::worker::InitProcessGroup(*env);
    if (!pg.ok()) {
      std::fprintf(stderr, "consumer: %s\n", pg.status().ToString().c_str());
      return 1;
    }
    at::Tensor t = at::full({1}, static_cast<double>(env->rank));
    if (absl::Status s = (*pg)->AllReduce(t); !s.ok()) {
      std::fprintf(stderr, "consumer: %s\n", s.ToString().c_str());
      return 1;
    }
    sum = static_cast<long>(t.item<double>());
#endif
    elastrun::worker::ReportProgress(1, {{"sum", static_cast<double>(sum)}});
    std::printf("consumer rank %d of %d: sum %ld\n", env->rank, env->world_size, sum);
    return 0;
  });
}
