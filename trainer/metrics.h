// Rank 0's record of a run: one CSV row per epoch in <run>/metrics.csv,
// and the progress display (a bar on a terminal, plain lines otherwise).
#ifndef ELASTRUN_TRAINER_METRICS_H_
#define ELASTRUN_TRAINER_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/files.h"  // MakeDirs, used with these helpers
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace elastrun::trainer {

// One row of metrics.csv.
struct EpochMetrics {
  int64_t epoch = 0;         // 1-based: epochs completed.
  double train_loss = 0;     // Mean over the epoch's samples, all ranks.
  double test_loss = 0;
  double test_acc = 0;       // Fraction in [0, 1].
  double lr = 0;             // Lr of the weight groups at the epoch's end.
  double seconds = 0;        // Wall time of the epoch (train + eval).
  double images_per_sec = 0; // Training images per second (train time only), all ranks.
};

extern const char kMetricsHeader[];

// One row of metrics.csv, with its newline.
std::string MetricsRow(const EpochMetrics& m);

// Replaces `path` (atomically) with the header and `rows` (MetricsRow's,
// concatenated): a resumed run's record, carried in its state, whichever
// node now writes it.
// `header`: the csv's header line (the detector's results.csv has its own).
absl::Status WriteMetricsRows(const std::string& path, const std::string& rows,
                              const std::string& header = kMetricsHeader);

// Writes metrics.csv. Rows are flushed as they come, so a crash keeps the
// epochs already done. Not thread-safe.
class MetricsWriter {
 public:
  // Creates (or, when `append` and the file exists, appends to) `path`.
  // Errors name the path (FailedPrecondition).
  // `header` goes first into a file without rows.
  static absl::StatusOr<MetricsWriter> Open(const std::string& path, bool append,
                                            const std::string& header = kMetricsHeader);
  MetricsWriter(MetricsWriter&& other) noexcept : file_(other.file_) { other.file_ = nullptr; }
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();

  absl::Status Append(const EpochMetrics& row);
  // A row as formatted (with its newline).
  absl::Status AppendRow(const std::string& row);

 private:
  explicit MetricsWriter(std::FILE* file, std::string path)
      : file_(file), path_(std::move(path)) {}
  std::FILE* file_;
  std::string path_;
};

// The progress display of rank 0.
class Progress {
 public:
  // `tty`: draw an in-place bar on `out`; otherwise print a plain line every
  // `log_period` iterations (0: none).
  Progress(std::FILE* out, bool tty, int64_t log_period)
      : out_(out), tty_(tty), log_period_(log_period) {}

  // Iteration `i` (0-based) of `total` in epoch `epoch` of `epochs`, this
  // process having started the epoch at iteration `first` (> 0: resumed
  // mid-epoch) `elapsed_s` ago: the rate and the ETA count only the
  // iterations since then.
  void Update(int64_t epoch, int64_t epochs, int64_t i, int64_t first, int64_t total,
              double loss, double lr, double elapsed_s);
  // Ends the bar's line (terminal) before a summary line.
  void Finish();

 private:
  std::FILE* out_;
  bool tty_;
  int64_t log_period_;
  bool open_line_ = false;
};

// A fresh run in a folder whose metrics.csv already has rows (an earlier
// run's: a fresh run has no checkpoint of its own) keeps them, as YOLOv5
// keeps earlier runs: renames metrics.csv, config.yaml and plots.svg to
// metrics.<N>.csv, config.<N>.yaml and plots.<N>.svg with the first free N.
// Returns the new metrics file's name, or "" when nothing had to move.
// Errors name the file that could not be renamed. Another task's record:
// `files` (its csv first, whose header is `header`).
absl::StatusOr<std::string> KeepEarlierMetrics(
    const std::string& output_dir,
    const std::vector<std::string>& files = {"metrics.csv", "config.yaml", "plots.svg"},
    const std::string& header = kMetricsHeader);

// Writes `contents` to `path` atomically: temporary file, fsync, rename,
// fsync of the folder. Errors name the path and the failing call.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);
// The same for contents in parts, written one after the other.
absl::Status WriteFileAtomically(const std::string& path,
                                 std::initializer_list<absl::string_view> parts);

}  // namespace elastrun::trainer

#endif  // ELASTRUN_TRAINER_METRICS_H_
