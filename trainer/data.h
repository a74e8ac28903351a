// Datasets in memory as tensors: Fashion-MNIST from its IDX files (idx.h)
// or a synthetic, learnable stand-in of the same shape, and batches cut
// from them in sampler order.
#ifndef ELASTRUN_TRAINER_DATA_H_
#define ELASTRUN_TRAINER_DATA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/options.h"
#include "trainer/trainer_pch.h"

namespace elastrun::trainer {

// One split. Images stay uint8 until batched (a quarter of the memory).
struct Dataset {
  at::Tensor images;  // uint8 [n, channels, height, width]
  at::Tensor labels;  // int64 [n]
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// Fashion-MNIST's per-pixel mean and std over the train split.
inline constexpr double kPixelMean = 0.2860;
inline constexpr double kPixelStd = 0.3530;

// The train or test split per `options`: the files under options.root, or
// synthetic data when options.synthetic (images drawn around one random
// prototype per class, so a model can learn them; the same for a given
// seed on every rank). Errors: ReadFashionMnist's (naming the file); image
// size other than options.image_size.
absl::StatusOr<Dataset> LoadDataset(const DataOptions& options, bool train,
                                    uint64_t seed);

// Loads both splits ahead of training, for a worker started as a standby
// (before its activation, which then costs no data loading): a later
// LoadDataset with the same options and seed returns the loaded split (its
// tensors shared, never copied) once, instead of reading or drawing it
// again. An error is dropped: the real load reports it. Call from one
// thread, before training.
void PreloadDatasets(const DataOptions& options, uint64_t seed);

// The samples `indices[begin, end)` as a batch: x float32 [b, c, h, w]
// normalized with kPixelMean/kPixelStd, y int64 [b].
struct Batch {
  at::Tensor x;
  at::Tensor y;
};
Batch MakeBatch(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                size_t end);

// MakeBatch's batch on `device`. For a GPU the uint8 pixels and labels are
// gathered into pinned host memory, copied without blocking the host (a
// quarter of float32's bytes), and normalized on the GPU.
Batch MakeBatchOn(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                  size_t end, const torch::Device& device);

// torch.randperm(n, generator=g) with g = torch.Generator().manual_seed(seed):
// what PyTorch's DistributedSampler draws (a PermutationFn).
std::vector<int64_t> TorchPermutation(int64_t n, uint64_t seed);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_DATA_H_
