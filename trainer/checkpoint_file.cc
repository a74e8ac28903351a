#include "trainer/checkpoint_file.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "trainer/digest.h"
#include "trainer/metrics.h"
#include "trainer/temp_files.h"

namespace elastrun::trainer {
namespace {

constexpr char kMagic[] = "ELASTRUN-CKPT";
constexpr char kVersion[] = "2";
// Far above any real model of this trainer; bounds what a bad header makes
// us allocate.
constexpr int64_t kMaxPayload = int64_t{8} << 30;

struct Header {
  CheckpointBlob blob;  // Key and run; no payload.
  int64_t size = 0;
  std::string sha256;
};

// Parses the header line of `in`. Version 1 (no run fields) gives an empty
// identity.
absl::StatusOr<Header> ReadHeader(std::istream& in, const std::string& path) {
  std::string line;
  if (!std::getline(in, line) || line.size() > 1024) {
    return absl::DataLossError(absl::StrCat(path, ": not a checkpoint (no header line)"));
  }
  std::vector<std::string> f = absl::StrSplit(line, ' ');
  Header h;
  if (f.size() < 5 || f[0] != kMagic || !absl::SimpleAtoi(f[2], &h.blob.key) ||
      !absl::SimpleAtoi(f[3], &h.size) || h.size < 0 || h.size > kMaxPayload ||
      f[4].size() != 64) {
    return absl::DataLossError(absl::StrCat(path, ": not a checkpoint (bad header)"));
  }
  if (f[1] != "1" && f[1] != kVersion) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint format ", f[1], ", this build reads 1 and ", kVersion));
  }
  const size_t fields = f[1] == "1" ? 5 : 7;
  if (f.size() != fields ||
      (fields == 7 && !DecodeRunIdField(f[5], &h.blob.run.run_id))) {
    return absl::DataLossError(absl::StrCat(path, ": not a checkpoint (bad header)"));
  }
  if (fields == 7) h.blob.run.config_digest = f[6] == "%" ? "" : f[6];
  h.sha256 = f[4];
  return h;
}

// Whether `path` is absent or holds a checkpoint of `run` (a file this run
// may overwrite).
bool MayOverwrite(const std::string& path, const RunIdentity& run) {
  absl::StatusOr<CheckpointBlob> header = ReadCheckpointHeader(path);
  if (absl::IsNotFound(header.status())) return true;
  return header.ok() && header->run == run;
}

}  // namespace

absl::Status WriteCheckpointFile(const std::string& path, const CheckpointBlob& blob) {
  const std::string& digest = blob.run.config_digest;
  const std::string header = absl::StrCat(
      kMagic, " ", kVersion, " ", blob.key, " ", blob.payload.size(), " ",
      Sha256Hex(blob.payload), " ", EncodeRunIdField(blob.run.run_id), " ",
      digest.empty() || digest.find_first_of(" \n%") != std::string::npos ? "%" : digest,
      "\n");
  return WriteFileAtomically(path, {absl::string_view(header), absl::string_view(blob.payload)});
}

namespace {

// Makes `path` another name of the written file `from` (a hard link put in
// place by rename, so readers see the old file or the new one), or a copy
// where the folder cannot hold links.
absl::Status LinkOrWrite(const std::string& from, const std::string& path,
                         const CheckpointBlob& blob) {
  const std::string tmp = TemporaryName(path, "link");
  if (::link(from.c_str(), tmp.c_str()) == 0) {
    const bool renamed = ::rename(tmp.c_str(), path.c_str()) == 0;
    // When `path` already names the same file (another node sharing the
    // folder linked it first), rename succeeds without doing anything and
    // leaves `tmp`: it goes either way (ENOENT after a real rename).
    ::unlink(tmp.c_str());
    if (renamed) return absl::OkStatus();
  }
  return WriteCheckpointFile(path, blob);
}

}  // namespace

absl::StatusOr<CheckpointBlob> ReadCheckpointHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  absl::StatusOr<Header> h = ReadHeader(in, path);
  if (!h.ok()) return h.status();
  return std::move(h->blob);
}

absl::StatusOr<CheckpointBlob> ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  absl::StatusOr<Header> h = ReadHeader(in, path);
  if (!h.ok()) return h.status();
  CheckpointBlob blob = std::move(h->blob);
  const int64_t size = h->size;
  blob.payload.resize(static_cast<size_t>(size));
  in.read(blob.payload.data(), size);
  if (in.gcount() != size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", in.gcount(), " of ", size,
                                            " payload bytes"));
  }
  if (in.peek() != std::char_traits<char>::eof()) {
    return absl::DataLossError(absl::StrCat(path, ": longer than its header says"));
  }
  if (Sha256Hex(blob.payload) != h->sha256) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch (corrupt)"));
  }
  return blob;
}

std::string CheckpointDir(const std::string& output_dir) {
  return output_dir + "/checkpoints";
}

std::string NumberedCheckpointPath(const std::string& dir, int64_t key,
                                   const std::string& tag) {
  if (tag.empty()) return absl::StrFormat("%s/ckpt_%019d.ckpt", dir, key);
  return absl::StrFormat("%s/ckpt_%019d_%s.ckpt", dir, key, tag);
}

namespace {

// The key of a numbered checkpoint's file name and its tag ("" untagged);
// false for any other name. Keys have 19 digits (10 in older builds'
// names).
bool ParseNumberedName(const std::string& name, int64_t* key, std::string* tag) {
  if (name.rfind("ckpt_", 0) != 0 || name.size() < 10 ||
      name.compare(name.size() - 5, 5, ".ckpt") != 0) {
    return false;
  }
  const std::string stem = name.substr(5, name.size() - 10);
  const size_t digits = stem.find_first_not_of("0123456789");
  const size_t n = digits == std::string::npos ? stem.size() : digits;
  if ((n != 10 && n != 19) || !absl::SimpleAtoi(stem.substr(0, n), key)) return false;
  if (n == stem.size()) {
    tag->clear();
    return true;
  }
  if (stem[n] != '_' || n + 1 == stem.size()) return false;
  *tag = stem.substr(n + 1);
  return true;
}

}  // namespace

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    int64_t key = 0;
    std::string tag;
    if (ParseNumberedName(entry.path().filename().string(), &key, &tag)) {
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
  const std::string tag = blob.run.Tag();
  const std::string numbered = NumberedCheckpointPath(dir, blob.key, tag);
  if (absl::Status s = WriteCheckpointFile(numbered, blob); !s.ok()) return s;
  for (const std::string& name : {std::string("last.ckpt"), std::string("best.ckpt")}) {
    if (name == "best.ckpt" && !best) continue;
    const std::string path = dir + "/" + name;
    if (!MayOverwrite(path, blob.run)) continue;  // Another run's: left alone.
    if (absl::Status s = LinkOrWrite(numbered, path, blob); !s.ok()) return s;
  }
  // Prune only this run's numbered files (ListCheckpoints: newest first).
  int kept = 0;
  for (const std::string& path : ListCheckpoints(dir)) {
    int64_t key = 0;
    std::string file_tag;
    const std::string name = std::filesystem::path(path).filename().string();
    if (!ParseNumberedName(name, &key, &file_tag) || file_tag != tag) continue;
    if (++kept <= std::max(keep, 1)) continue;
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointBlob> LoadNewestCheckpoint(const std::string& dir,
                                                    const RunIdentity& run,
                                                    std::vector<std::string>* skipped,
                                                    std::vector<std::string>* foreign) {
  std::optional<CheckpointBlob> found;
  // Every file's header, so that all other runs' files are named, not only
  // those newer than this run's newest.
  for (const std::string& path : ListCheckpoints(dir)) {
    absl::StatusOr<CheckpointBlob> header = ReadCheckpointHeader(path);
    if (header.ok() && header->run != run) {
      if (foreign != nullptr) {
        foreign->push_back(absl::StrCat(path, " (", header->run.Describe(), ": ",
                                        header->run.DiffersFrom(run), ")"));
      }
      continue;
    }
    if (found.has_value()) continue;
    absl::StatusOr<CheckpointBlob> blob = ReadCheckpointFile(path);
    if (blob.ok()) {
      found = *std::move(blob);
    } else if (skipped != nullptr) {
      skipped->push_back(std::string(blob.status().message()));
    }
  }
  if (found.has_value()) return *std::move(found);
  return absl::NotFoundError(absl::StrCat("no usable checkpoint in ", dir));
}

}  // namespace elastrun::trainer
