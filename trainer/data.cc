#include "trainer/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "trainer/idx.h"

namespace elastrun::trainer {
namespace {

at::Tensor FromBytes(std::vector<uint8_t>& bytes, const std::vector<int64_t>& dims,
                     at::ScalarType type) {
  at::Tensor t = at::empty(dims, at::kByte);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  std::vector<uint8_t>().swap(bytes);
  return type == at::kByte ? t : t.to(type);
}

Dataset Synthetic(const DataOptions& o, bool train, uint64_t seed) {
  const int64_t n = train ? o.synthetic_train_size : o.synthetic_test_size;
  const int64_t s = o.image_size;
  // Prototypes depend on the seed only; train and test draw different noise.
  at::Generator protos = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator noise = at::make_generator<at::CPUGeneratorImpl>(seed * 2 + (train ? 1 : 2));
  at::Tensor prototypes = at::rand({o.num_classes, 1, s, s}, protos);
  Dataset d;
  d.labels = at::randint(o.num_classes, {n}, noise, at::kLong);
  at::Tensor x = prototypes.index_select(0, d.labels) * 0.6 +
                 at::rand({n, 1, s, s}, noise) * 0.4;
  d.images = (x * 255).round().clamp(0, 255).to(at::kByte);
  return d;
}

}  // namespace

namespace {

// What a split's bytes depend on.
std::string SplitKey(const DataOptions& o, bool train, uint64_t seed) {
  return absl::StrCat(o.synthetic ? "synthetic " : "files ", o.root, " ",
                      o.synthetic_train_size, " ", o.synthetic_test_size, " ", o.image_size,
                      " ", o.num_classes, " ", seed, train ? " train" : " test");
}

// Splits loaded ahead by PreloadDatasets, by SplitKey; each taken once.
std::map<std::string, Dataset>& Preloaded() {
  static auto* splits = new std::map<std::string, Dataset>();
  return *splits;
}

absl::StatusOr<Dataset> LoadSplit(const DataOptions& o, bool train, uint64_t seed) {
  if (o.synthetic) {
    if ((train ? o.synthetic_train_size : o.synthetic_test_size) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.synthetic_", train ? "train" : "test", "_size must be positive"));
    }
    return Synthetic(o, train, seed);
  }
  absl::StatusOr<IdxDataset> idx = ReadFashionMnist(o.root, train, o.num_classes);
  if (!idx.ok()) return idx.status();
  const std::vector<int64_t>& dims = idx->images.dims;
  if (dims[1] != o.image_size || dims[2] != o.image_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        o.root, ": images are ", dims[1], "x", dims[2], " but data.image_size is ",
        o.image_size));
  }
  Dataset d;
  d.images = FromBytes(idx->images.data, {dims[0], 1, dims[1], dims[2]}, at::kByte);
  d.labels = FromBytes(idx->labels.data, idx->labels.dims, at::kLong);
  return d;
}

}  // namespace

absl::StatusOr<Dataset> LoadDataset(const DataOptions& o, bool train, uint64_t seed) {
  auto it = Preloaded().find(SplitKey(o, train, seed));
  if (it != Preloaded().end()) {
    Dataset d = std::move(it->second);
    Preloaded().erase(it);
    return d;
  }
  return LoadSplit(o, train, seed);
}

void PreloadDatasets(const DataOptions& o, uint64_t seed) {
  for (bool train : {true, false}) {
    absl::StatusOr<Dataset> d = LoadSplit(o, train, seed);
    if (d.ok()) Preloaded()[SplitKey(o, train, seed)] = *std::move(d);
  }
}

namespace {

at::Tensor Normalize(const at::Tensor& pixels) {
  return pixels.to(at::kFloat).mul_(1.0 / 255.0).sub_(kPixelMean).div_(kPixelStd);
}

at::Tensor Indices(const std::vector<int64_t>& indices, size_t begin, size_t end) {
  return at::from_blob(const_cast<int64_t*>(indices.data() + begin),
                       {static_cast<int64_t>(end - begin)}, at::kLong);
}

}  // namespace

Batch MakeBatch(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                size_t end) {
  const at::Tensor idx = Indices(indices, begin, end);
  Batch b;
  b.x = Normalize(data.images.index_select(0, idx));
  b.y = data.labels.index_select(0, idx);
  return b;
}

Batch MakeBatchOn(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                  size_t end, const torch::Device& device) {
  if (device.is_cpu()) return MakeBatch(data, indices, begin, end);
  const at::Tensor idx = Indices(indices, begin, end);
  const int64_t n = idx.size(0);
  std::vector<int64_t> shape = data.images.sizes().vec();
  shape[0] = n;
  const at::TensorOptions pinned = at::TensorOptions().pinned_memory(true);
  at::Tensor pixels = at::empty(shape, pinned.dtype(at::kByte));
  at::Tensor labels = at::empty({n}, pinned.dtype(at::kLong));
  at::index_select_out(pixels, data.images, 0, idx);
  at::index_select_out(labels, data.labels, 0, idx);
  // The pinned buffers may be freed at once: LibTorch's pinned allocator
  // keeps them until the copies that read them are done.
  Batch b;
  b.x = Normalize(pixels.to(device, /*non_blocking=*/true));
  b.y = labels.to(device, /*non_blocking=*/true);
  return b;
}

std::vector<int64_t> TorchPermutation(int64_t n, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor p = at::randperm(n, g, at::kLong);
  const int64_t* ptr = p.data_ptr<int64_t>();
  return std::vector<int64_t>(ptr, ptr + n);
}

}  // namespace elastrun::trainer
