#include "trainer/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace elastrun::trainer {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes; false on end of file. A zlib error becomes
// DataLoss naming `path`.
absl::StatusOr<bool> ReadExactly(gzFile f, const std::string& path, void* out,
                                 size_t n) {
  auto* dst = static_cast<unsigned char*>(out);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, dst, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(f, &code);
      return absl::DataLossError(absl::StrCat(path, ": cannot decompress: ",
                                              message ? message : "zlib error"));
    }
    if (got == 0) return false;
    dst += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank,
                                     int64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": no such file (install Debian's dataset-fashion-mnist, or set "
              "data.root, or data.synthetic=true)"));
  }
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  unsigned char magic[4];
  absl::StatusOr<bool> ok = ReadExactly(f.get(), path, magic, 4);
  if (!ok.ok()) return ok.status();
  if (!*ok) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::DataLossError(absl::StrCat(
        path, ": not an IDX file (magic bytes ", magic[0], " ", magic[1],
        ", expected 0 0)"));
  }
  if (magic[2] != 0x08) {
    return absl::DataLossError(absl::StrCat(
        path, ": IDX element type ", magic[2], " is not unsigned byte (8)"));
  }
  if (magic[3] != expected_rank) {
    return absl::DataLossError(absl::StrCat(path, ": IDX rank ", magic[3],
                                            ", expected ", expected_rank));
  }
  IdxArray array;
  int64_t total = 1;
  for (int i = 0; i < expected_rank; ++i) {
    unsigned char b[4];
    ok = ReadExactly(f.get(), path, b, 4);
    if (!ok.ok()) return ok.status();
    if (!*ok) return absl::DataLossError(absl::StrCat(path, ": truncated header"));
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) |
                      (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (d == 0) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", i, " is 0"));
    }
    array.dims.push_back(d);
    total *= d;
    if (total > max_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": dimensions [", absl::StrJoin(array.dims, ", "), "] exceed the limit of ",
          max_bytes, " bytes"));
    }
  }
  array.data.resize(static_cast<size_t>(total));
  ok = ReadExactly(f.get(), path, array.data.data(), array.data.size());
  if (!ok.ok()) return ok.status();
  if (!*ok) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: header says [", absl::StrJoin(array.dims, ", "), "] = ",
        total, " bytes, the file holds fewer"));
  }
  unsigned char extra;
  ok = ReadExactly(f.get(), path, &extra, 1);
  if (!ok.ok()) return ok.status();
  if (*ok) {
    return absl::DataLossError(absl::StrCat(
        path, ": trailing data after the [", absl::StrJoin(array.dims, ", "), "] array"));
  }
  return array;
}

absl::StatusOr<IdxDataset> ReadFashionMnist(const std::string& root, bool train,
                                            int64_t num_classes) {
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    const std::string gz = absl::StrCat(root, "/", prefix, stem, ".gz");
    const std::string plain = absl::StrCat(root, "/", prefix, stem);
    std::error_code ec;
    return !std::filesystem::exists(gz, ec) && std::filesystem::exists(plain, ec) ? plain
                                                                                   : gz;
  };
  const std::string images_path = find("-images-idx3-ubyte");
  const std::string labels_path = find("-labels-idx1-ubyte");
  IdxDataset d;
  absl::StatusOr<IdxArray> images = ReadIdxFile(images_path, 3);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxArray> labels = ReadIdxFile(labels_path, 1);
  if (!labels.ok()) return labels.status();
  if (images->dims[0] != labels->dims[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", images->dims[0],
                                            " images but ", labels_path, " holds ",
                                            labels->dims[0], " labels"));
  }
  for (size_t i = 0; i < labels->data.size(); ++i) {
    if (labels->data[i] >= num_classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", labels->data[i],
                                              " at index ", i, " is not below ",
                                              num_classes, " (data.num_classes)"));
    }
  }
  d.images = *std::move(images);
  d.labels = *std::move(labels);
  return d;
}

}  // namespace elastrun::trainer
