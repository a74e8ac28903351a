#include "trainer/checkpoint_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "trainer/digest.h"
#include "trainer/metrics.h"

namespace elastrun::trainer {
namespace {

constexpr char kMagic[] = "ELASTRUN-CKPT";
constexpr char kVersion[] = "1";
// Far above any real model of this trainer; bounds what a bad header makes
// us allocate.
constexpr int64_t kMaxPayload = int64_t{8} << 30;

}  // namespace

absl::Status WriteCheckpointFile(const std::string& path, const CheckpointBlob& blob) {
  std::string contents = absl::StrCat(kMagic, " ", kVersion, " ", blob.key, " ",
                                      blob.payload.size(), " ", Sha256Hex(blob.payload), "\n");
  contents += blob.payload;
  return WriteFileAtomically(path, contents);
}

absl::StatusOr<CheckpointBlob> ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  std::string header;
  if (!std::getline(in, header) || header.size() > 256) {
    return absl::DataLossError(absl::StrCat(path, ": not a checkpoint (no header line)"));
  }
  std::vector<std::string> f = absl::StrSplit(header, ' ');
  int64_t key = 0;
  int64_t size = 0;
  if (f.size() != 5 || f[0] != kMagic || !absl::SimpleAtoi(f[2], &key) ||
      !absl::SimpleAtoi(f[3], &size) || size < 0 || size > kMaxPayload || f[4].size() != 64) {
    return absl::DataLossError(absl::StrCat(path, ": not a checkpoint (bad header)"));
  }
  if (f[1] != kVersion) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint format ", f[1], ", this build reads ", kVersion));
  }
  CheckpointBlob blob;
  blob.key = key;
  blob.payload.resize(static_cast<size_t>(size));
  in.read(blob.payload.data(), size);
  if (in.gcount() != size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", in.gcount(), " of ", size,
                                            " payload bytes"));
  }
  if (in.peek() != std::char_traits<char>::eof()) {
    return absl::DataLossError(absl::StrCat(path, ": longer than its header says"));
  }
  if (Sha256Hex(blob.payload) != f[4]) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
  }
  return blob;
}

std::string CheckpointDir(const std::string& output_dir) {
  return output_dir + "/checkpoints";
}

std::string NumberedCheckpointPath(const std::string& dir, int64_t key) {
  return absl::StrFormat("%s/ckpt_%010d.ckpt", dir, key);
}

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t key = 0;
    if (name.size() == 20 && name.rfind("ckpt_", 0) == 0 &&
        name.compare(15, 5, ".ckpt") == 0 && absl::SimpleAtoi(name.substr(5, 10), &key)) {
      found.emplace_back(key, entry.path().string());
    }
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

absl::Status SaveCheckpoint(const std::string& dir, const CheckpointBlob& blob, bool best,
                            int keep) {
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  if (absl::Status s = WriteCheckpointFile(NumberedCheckpointPath(dir, blob.key), blob);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteCheckpointFile(dir + "/last.ckpt", blob); !s.ok()) return s;
  if (best) {
    if (absl::Status s = WriteCheckpointFile(dir + "/best.ckpt", blob); !s.ok()) return s;
  }
  std::vector<std::string> all = ListCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointBlob> LoadNewestCheckpoint(const std::string& dir,
                                                    std::vector<std::string>* skipped) {
  for (const std::string& path : ListCheckpoints(dir)) {
    absl::StatusOr<CheckpointBlob> blob = ReadCheckpointFile(path);
    if (blob.ok()) return blob;
    if (skipped != nullptr) skipped->push_back(std::string(blob.status().message()));
  }
  return absl::NotFoundError(absl::StrCat("no usable checkpoint in ", dir));
}

absl::StatusOr<bool> SetAsideOldCheckpoints(const std::string& dir) {
  std::error_code ec;
  if (ListCheckpoints(dir).empty() && !std::filesystem::exists(dir + "/last.ckpt", ec)) {
    return false;
  }
  const std::string prev = dir + ".prev";
  std::filesystem::remove_all(prev, ec);
  std::filesystem::rename(dir, prev, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot move old checkpoints ", dir, " to ", prev, ": ", ec.message()));
  }
  return true;
}

}  // namespace elastrun::trainer
