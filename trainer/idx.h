// Reading IDX files (the MNIST / Fashion-MNIST format), gzipped or plain,
// through zlib. Torch-free: the trainer turns the bytes into tensors.
//
// Format: 0x00 0x00 <type 0x08 = ubyte> <rank>, then `rank` big-endian
// uint32 dimensions, then the data, row-major, nothing after it.
#ifndef ELASTRUN_TRAINER_IDX_H_
#define ELASTRUN_TRAINER_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::trainer {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // Product of dims bytes.
};

// Reads an unsigned-byte IDX file of rank `expected_rank`; data larger
// than `max_bytes` is refused. Every error names the file and what was
// wrong: NotFound (missing), DataLoss (not gzip or truncated, bad magic,
// wrong type or rank, a zero dimension, fewer or more bytes than the
// dimensions say), FailedPrecondition (too large).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank,
                                     int64_t max_bytes = int64_t{1} << 31);

// One split of Fashion-MNIST as bytes: images [n, rows, cols], labels [n].
struct IdxDataset {
  IdxArray images;
  IdxArray labels;
  int64_t size() const { return images.dims.empty() ? 0 : images.dims[0]; }
};

// Reads `<root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` (or the
// same names without .gz). Errors: ReadIdxFile's, naming the file; image
// and label counts that differ; a label >= num_classes (naming the index).
absl::StatusOr<IdxDataset> ReadFashionMnist(const std::string& root, bool train,
                                            int64_t num_classes);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_IDX_H_
