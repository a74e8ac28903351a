// A distributed sampler with the semantics of PyTorch's
// torch.utils.data.DistributedSampler, made elastic: a position in the epoch
// that does not depend on the world size.
//
// For epoch e the global order G is randperm(n) of a generator seeded with
// seed + e (or 0..n-1 without shuffling). The position in the epoch is
// `done`: how many samples at the head of G are trained. From `done` on, the
// rest of the order G[done:] is dealt to the ranks of the world that trains
// it (torchelastic's ElasticDistributedSampler semantics): padded to a
// multiple of the world size by repeating G from its head (or cut, with
// drop_last), rank r takes items r, r + world, ... Each rank's b-th batch
// of B samples is then a contiguous block of B x world items of that rest,
// so after k batches on every rank the trained samples are again a prefix
// of G: done + k x B x world. A state taken at any world size therefore
// continues at any other, and no sample of an epoch is trained twice or
// skipped (apart from the padding of a segment's last batch, as PyTorch's).
//
// With done = 0 the shards are PyTorch's, bit for bit (its padding repeats
// the head of the order too). Because padding always repeats G's head, the
// rest dealt from a later position at the same world size is exactly the
// remainder of the shards dealt from an earlier one: a same-size resume
// continues bitwise.
//
// The permutation comes from an injected function so that this index math
// stays torch-free; the trainer passes TorchPermutation() (data.h), which
// is torch.randperm with a CPU generator, bit for bit what Python's sampler
// draws.
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
  int64_t dataset_size() const { return dataset_size_; }
  int num_replicas() const { return num_replicas_; }

  // Samples of one rank for a whole epoch (from done = 0), and over all
  // ranks: PyTorch's num_samples and total_size.
  int64_t num_samples() const { return ShardSize(0); }
  int64_t total_size() const { return num_samples() * num_replicas_; }

  // Samples each rank trains of the rest of the epoch from position `done`
  // (clamped to [0, dataset_size]): ceil(rest / world), or floor with
  // drop_last.
  int64_t ShardSize(int64_t done) const;

  // This rank's indices for the current epoch from position `done` on.
  std::vector<int64_t> Indices(int64_t done = 0) const;

  // The position after every rank trained the first `count` samples of its
  // shard dealt from `done`: done + count x world, and dataset_size once
  // count reaches ShardSize(done) (the epoch is over: the padding, or the
  // cut tail with drop_last, is never a position of its own).
  int64_t Advance(int64_t done, int64_t count) const;

  // The padded (or cut) order over all ranks from `done`, before the
  // per-rank split.
  std::vector<int64_t> GlobalOrder(int64_t done = 0) const;

 private:
  DistributedSampler(int64_t n, int num_replicas, int rank, SamplerOptions options,
                     PermutationFn permutation);

  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  PermutationFn permutation_;
  int64_t epoch_ = 0;
};

// Indices rank, rank + world, ... below n: an unpadded split for evaluation,
// where every sample must count exactly once.
std::vector<int64_t> EvalShard(int64_t n, int world, int rank);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_SAMPLER_H_
