#include "trainer/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/temp_files.h"

namespace elastrun::trainer {

const char kMetricsHeader[] =
    "epoch,train_loss,test_loss,test_acc,lr,seconds,images_per_sec";

absl::StatusOr<MetricsWriter> MetricsWriter::Open(const std::string& path, bool append,
                                                  const std::string& header) {
  std::error_code ec;
  const bool had_rows = append && std::filesystem::file_size(path, ec) > 0 && !ec;
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  if (!had_rows) std::fprintf(f, "%s\n", header.c_str());
  std::fflush(f);
  return MetricsWriter(f, path);
}

absl::StatusOr<std::string> KeepEarlierMetrics(const std::string& output_dir,
                                               const std::vector<std::string>& files,
                                               const std::string& header) {
  if (files.empty()) return std::string();
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(output_dir + "/" + files[0], ec);
  // A header alone (a run that died in its first epoch) is nothing to keep.
  if (ec || size <= header.size() + 1) return std::string();
  auto numbered = [](const std::string& file, int n) {
    const std::filesystem::path p(file);
    return absl::StrCat(p.stem().string(), ".", n, p.extension().string());
  };
  int n = 1;
  while (std::filesystem::exists(output_dir + "/" + numbered(files[0], n), ec)) ++n;
  for (const std::string& file : files) {
    const std::string from = output_dir + "/" + file;
    if (!std::filesystem::exists(from, ec)) continue;
    const std::string to = output_dir + "/" + numbered(file, n);
    std::filesystem::rename(from, to, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot keep ", from, " as ", to, ": ", ec.message()));
    }
  }
  return numbered(files[0], n);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

std::string MetricsRow(const EpochMetrics& m) {
  return absl::StrFormat("%d,%.6f,%.6f,%.6f,%.8g,%.3f,%.1f\n", m.epoch, m.train_loss,
                         m.test_loss, m.test_acc, m.lr, m.seconds, m.images_per_sec);
}

absl::Status WriteMetricsRows(const std::string& path, const std::string& rows,
                              const std::string& header) {
  return WriteFileAtomically(path, absl::StrCat(header, "\n", rows));
}

absl::Status MetricsWriter::Append(const EpochMetrics& m) { return AppendRow(MetricsRow(m)); }

absl::Status MetricsWriter::AppendRow(const std::string& row) {
  std::fputs(row.c_str(), file_);
  if (std::fflush(file_) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void Progress::Update(int64_t epoch, int64_t epochs, int64_t i, int64_t first, int64_t total,
                      double loss, double lr, double elapsed_s) {
  const int64_t done = i + 1;
  const double rate =
      elapsed_s > 0 ? static_cast<double>(std::max<int64_t>(done - first, 0)) / elapsed_s : 0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
  if (tty_) {
    // Redraw at most ~every 1% to keep the terminal cheap.
    const int64_t step = std::max<int64_t>(total / 100, 1);
    if (done % step != 0 && done != total) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\repoch %lld/%lld [%s] %lld/%lld %.1f it/s loss %.4f lr %.3g ETA %.0fs ",
                 static_cast<long long>(epoch + 1), static_cast<long long>(epochs),
                 bar.c_str(), static_cast<long long>(done), static_cast<long long>(total),
                 rate, loss, lr, eta);
    std::fflush(out_);
    open_line_ = true;
    return;
  }
  if (log_period_ <= 0 || (done % log_period_ != 0 && done != total)) return;
  std::fprintf(out_, "epoch %lld/%lld iter %lld/%lld loss %.4f lr %.4g %.1f it/s eta %.0fs\n",
               static_cast<long long>(epoch + 1), static_cast<long long>(epochs),
               static_cast<long long>(done), static_cast<long long>(total), loss, lr,
               rate, eta);
  std::fflush(out_);
}

void Progress::Finish() {
  if (open_line_) {
    std::fprintf(out_, "\n");
    open_line_ = false;
  }
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  return WriteFileAtomically(path, {absl::string_view(contents)});
}

absl::Status WriteFileAtomically(const std::string& path,
                                 std::initializer_list<absl::string_view> parts) {
  // Unique per writer on any host: ranks and nodes that share a folder may
  // write the same file at once; a dead writer's is removed at the next
  // start (temp_files.h).
  const std::string tmp = TemporaryName(path, "tmp");
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", what, ": ", std::strerror(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open");
  for (absl::string_view contents : parts) {
    size_t off = 0;
    while (off < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        return fail("write");
      }
      off += static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return fail("fsync");
  }
  if (::close(fd) != 0) return fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace elastrun::trainer
