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
      permutation_(std::move(permutation)) {
  const int64_t w = num_replicas;
  if (options.drop_last && n % w != 0) {
    // ceil((n - w) / w), as PyTorch.
    num_samples_ = (n - w + w - 1) / w;
  } else {
    num_samples_ = (n + w - 1) / w;
  }
}

std::vector<int64_t> DistributedSampler::GlobalOrder() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = permutation_(dataset_size_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), 0);
  }
  const size_t total = static_cast<size_t>(total_size());
  if (order.size() >= total) {
    order.resize(total);
  } else {
    // Pad by repeating the order from its start (PyTorch's
    // (indices * ceil(padding / n))[:padding]).
    const size_t n = order.size();
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  }
  return order;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t offset) const {
  offset = std::clamp<int64_t>(offset, 0, num_samples_);
  const std::vector<int64_t> order = GlobalOrder();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_ - offset));
  for (int64_t i = rank_ + offset * num_replicas_; i < total_size(); i += num_replicas_) {
    mine.push_back(order[static_cast<size_t>(i)]);
  }
  return mine;
}

std::vector<int64_t> EvalShard(int64_t n, int world, int rank) {
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < n; i += world) mine.push_back(i);
  return mine;
}

}  // namespace elastrun::trainer
