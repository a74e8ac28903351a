// A distributed sampler with the semantics of PyTorch's
// torch.utils.data.DistributedSampler, plus a resume offset.
//
// For epoch e the full order is randperm(n) of a generator seeded with
// seed + e (or 0..n-1 without shuffling); it is padded by repeating its
// head (or cut, with drop_last) to total_size = num_samples * num_replicas,
// and rank r takes items r, r + num_replicas, ... The permutation comes from
// an injected function so that this index math stays torch-free; the
// trainer passes TorchPermutation() (data.h), which is torch.randperm with a
// CPU generator, bit for bit what Python's sampler draws.
#ifndef ELASTRUN_TRAINER_SAMPLER_H_
#define ELASTRUN_TRAINER_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::trainer {

// A permutation of [0, n) drawn from a generator seeded with `seed`.
using PermutationFn = std::function<std::vector<int64_t>(int64_t n, uint64_t seed)>;

struct SamplerOptions {
  // Shuffle every epoch (seeded with seed + epoch); false: dataset order.
  bool shuffle = true;
  // Base seed; must be the same on every rank.
  uint64_t seed = 0;
  // true: cut the tail so shards are equal; false: pad with the head.
  bool drop_last = false;
};

// Copyable value; not thread-safe (set_epoch mutates).
class DistributedSampler {
 public:
  // InvalidArgument when dataset_size < 1, num_replicas < 1, rank outside
  // [0, num_replicas), shuffle without a permutation function, or drop_last
  // with fewer samples than replicas.
  static absl::StatusOr<DistributedSampler> Create(int64_t dataset_size,
                                                   int num_replicas, int rank,
                                                   SamplerOptions options,
                                                   PermutationFn permutation);

  // As PyTorch's set_epoch: the next Indices() use seed + epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Samples of one rank per epoch, and over all ranks.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  // This rank's indices for the current epoch, without the first `offset`
  // ones (the samples already trained before a restart); offset is clamped
  // to [0, num_samples()].
  std::vector<int64_t> Indices(int64_t offset = 0) const;

  // The padded (or cut) order over all ranks, before the per-rank split.
  std::vector<int64_t> GlobalOrder() const;

 private:
  DistributedSampler(int64_t n, int num_replicas, int rank, SamplerOptions options,
                     PermutationFn permutation);

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  PermutationFn permutation_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

// Indices rank, rank + world, ... below n: an unpadded split for evaluation,
// where every sample must count exactly once.
std::vector<int64_t> EvalShard(int64_t n, int world, int rank);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_SAMPLER_H_
