#include "trainer/sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace elastrun::trainer {

absl::StatusOr<DistributedSampler> DistributedSampler::Create(
    int64_t dataset_size, int num_replicas, int rank, SamplerOptions options,
    PermutationFn permutation) {
  if (dataset_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: dataset is empty (size ", dataset_size, ")"));
  }
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: rank ", rank, " is not in [0, ", num_replicas, ")"));
  }
  if (options.shuffle && !permutation) {
    return absl::InvalidArgumentError("sampler: shuffle needs a permutation function");
  }
  if (options.drop_last && dataset_size < num_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampler: drop_last with ", dataset_size, " samples for ", num_replicas,
        " replicas leaves nothing"));
  }
  return DistributedSampler(dataset_size, num_replicas, rank, options,
                            std::move(permutation));
}

DistributedSampler::DistributedSampler(int64_t n, int num_replicas, int rank,
                                       SamplerOptions options, PermutationFn permutation)
    : dataset_size_(n),
      num_replicas_(num_replicas),
      rank_(rank),
      options_(options),
      permutation_(std::move(permutation)) {}

int64_t DistributedSampler::ShardSize(int64_t done) const {
  const int64_t rest = dataset_size_ - std::clamp<int64_t>(done, 0, dataset_size_);
  const int64_t w = num_replicas_;
  // drop_last: PyTorch's ceil((n - w) / w) for n % w != 0, i.e. floor(n / w).
  return options_.drop_last ? rest / w : (rest + w - 1) / w;
}

int64_t DistributedSampler::Advance(int64_t done, int64_t count) const {
  done = std::clamp<int64_t>(done, 0, dataset_size_);
  if (count >= ShardSize(done)) return dataset_size_;
  return std::min(dataset_size_, done + std::max<int64_t>(count, 0) * num_replicas_);
}

std::vector<int64_t> DistributedSampler::GlobalOrder(int64_t done) const {
  done = std::clamp<int64_t>(done, 0, dataset_size_);
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = permutation_(dataset_size_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    order.resize(static_cast<size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), 0);
  }
  const size_t total = static_cast<size_t>(ShardSize(done) * num_replicas_);
  std::vector<int64_t> rest(order.begin() + done, order.end());
  if (rest.size() >= total) {
    rest.resize(total);
  } else {
    // Pad by repeating the epoch's order from its head (PyTorch's
    // (indices * ceil(padding / n))[:padding] when done = 0).
    const size_t n = order.size();
    for (size_t i = 0; rest.size() < total; ++i) rest.push_back(order[i % n]);
  }
  return rest;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t done) const {
  const std::vector<int64_t> rest = GlobalOrder(done);
  std::vector<int64_t> mine;
  mine.reserve(rest.size() / static_cast<size_t>(num_replicas_));
  for (size_t i = static_cast<size_t>(rank_); i < rest.size(); i += num_replicas_) {
    mine.push_back(rest[i]);
  }
  return mine;
}

std::vector<int64_t> EvalShard(int64_t n, int world, int rank) {
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < n; i += world) mine.push_back(i);
  return mine;
}

}  // namespace elastrun::trainer
