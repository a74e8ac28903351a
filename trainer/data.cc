#include "trainer/data.h"

#include <ATen/CPUGeneratorImpl.h>

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

absl::StatusOr<Dataset> LoadDataset(const DataOptions& o, bool train, uint64_t seed) {
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

Batch MakeBatch(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                size_t end) {
  at::Tensor idx = at::from_blob(const_cast<int64_t*>(indices.data() + begin),
                                 {static_cast<int64_t>(end - begin)}, at::kLong);
  Batch b;
  b.x = data.images.index_select(0, idx).to(at::kFloat)
            .mul_(1.0 / 255.0)
            .sub_(kPixelMean)
            .div_(kPixelStd);
  b.y = data.labels.index_select(0, idx);
  return b;
}

std::vector<int64_t> TorchPermutation(int64_t n, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor p = at::randperm(n, g, at::kLong);
  const int64_t* ptr = p.data_ptr<int64_t>();
  return std::vector<int64_t>(ptr, ptr + n);
}

}  // namespace elastrun::trainer
