#include "evolve/evolve_trial.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "evolve/evolve_io.h"
#include "nlohmann/json.hpp"

namespace elastrun::evolve {
namespace {

std::string HypPath(const Trial& trial) { return trial.dir + "/hyp.yaml"; }
std::string ResultsPath(const Trial& trial) { return trial.dir + "/results.json"; }

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": not written"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The rows of a CSV with a header, by column name (names and values
// trimmed: YOLOv5 pads its columns); a value that is not a number is left
// out of its row. A last line without its newline (the writer is mid-line)
// is not read.
absl::StatusOr<std::vector<std::map<std::string, double>>> CsvRows(const std::string& path) {
  absl::StatusOr<std::string> text = ReadAll(path);
  if (!text.ok()) return text.status();
  std::vector<std::string> lines;
  absl::string_view whole = *text;
  if (const size_t end = whole.rfind('\n'); end != absl::string_view::npos) {
    whole = whole.substr(0, end + 1);
  } else {
    whole = {};
  }
  for (absl::string_view line : absl::StrSplit(whole, '\n', absl::SkipWhitespace())) {
    lines.emplace_back(absl::StripAsciiWhitespace(line));
  }
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no header"));
  const std::vector<std::string> names = absl::StrSplit(lines.front(), ',');
  std::vector<std::map<std::string, double>> rows;
  for (size_t l = 1; l < lines.size(); ++l) {
    const std::vector<std::string> values = absl::StrSplit(lines[l], ',');
    if (names.size() != values.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", l + 1, ": ", values.size(),
                                                     " fields, the header has ", names.size()));
    }
    std::map<std::string, double>& row = rows.emplace_back();
    for (size_t i = 0; i < names.size(); ++i) {
      double v = 0.0;
      if (absl::SimpleAtod(absl::StripAsciiWhitespace(values[i]), &v)) {
        row[std::string(absl::StripAsciiWhitespace(names[i]))] = v;
      }
    }
  }
  return rows;
}

absl::StatusOr<std::map<std::string, double>> LastCsvRow(const std::string& path) {
  absl::StatusOr<std::vector<std::map<std::string, double>>> rows = CsvRows(path);
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no row of metrics"));
  return rows->back();
}

// The results CSV of `trial`: --results's, else elastrun-train's
// results.csv (detector) or metrics.csv (classifier); "" for neither.
std::string CsvOf(const TrialLauncher& launcher, const Trial& trial) {
  if (!launcher.results_csv.empty()) {
    const std::string p = absl::StrReplaceAll(launcher.results_csv, {{"{dir}", trial.dir}});
    return absl::StartsWith(p, "/") ? p : trial.dir + "/" + p;
  }
  if (!IsTrainer(launcher.program)) return "";
  std::error_code ec;
  if (std::filesystem::exists(trial.dir + "/metrics.csv", ec)) return trial.dir + "/metrics.csv";
  return trial.dir + "/results.csv";
}

absl::StatusOr<std::map<std::string, double>> ReadJsonMetrics(const std::string& path) {
  absl::StatusOr<std::string> text = ReadAll(path);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected a JSON object of metric names to numbers"));
  }
  std::map<std::string, double> metrics;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.value().is_number()) metrics[it.key()] = it.value().get<double>();
  }
  return metrics;
}

}  // namespace

bool IsTrainer(const std::vector<std::string>& program) {
  return !program.empty() &&
         std::filesystem::path(program[0]).filename() == "elastrun-train";
}

std::string TrainerKey(const std::string& name) {
  // `++`: set or add; the detector's config need not list every hyp key.
  return absl::StrContains(name, '.') ? name : "++hyp." + name;
}

std::vector<std::string> ProgramArgs(const TrialLauncher& launcher, const Trial& trial) {
  std::vector<std::string> args = launcher.program;
  if (IsTrainer(args)) {
    for (const auto& [name, value] : trial.hyp) {
      args.push_back(absl::StrCat(TrainerKey(name), "=", FormatNumber(value)));
    }
    args.push_back("train.output_dir=" + trial.dir);
    return args;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    args[i] = absl::StrReplaceAll(args[i], {{"{hyp}", HypPath(trial)}, {"{dir}", trial.dir}});
  }
  return args;
}

absl::StatusOr<TrialCommand> ProgramCommand(const TrialLauncher& launcher, const Trial& trial) {
  TrialCommand cmd;
  cmd.argv = ProgramArgs(launcher, trial);
  if (IsTrainer(launcher.program)) return cmd;
  std::string yaml;
  for (const auto& [name, value] : trial.hyp) {
    absl::StrAppend(&yaml, name, ": ", FormatNumber(value), "\n");
  }
  std::error_code ec;
  std::filesystem::create_directories(trial.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(trial.dir, ": ", ec.message()));
  std::filesystem::remove(ResultsPath(trial), ec);
  if (absl::Status st = WriteFileAtomically(HypPath(trial), yaml); !st.ok()) return st;
  cmd.env = {"ELASTRUN_HYP=" + HypPath(trial), "ELASTRUN_RESULTS=" + ResultsPath(trial)};
  return cmd;
}

TrialCommand LocalCommand(const TrialLauncher& launcher, TrialCommand cmd) {
  std::vector<std::string> argv = {launcher.elastrun,
                                   "run",
                                   "--nproc-per-node",
                                   absl::StrCat(launcher.nproc_per_node),
                                   "--max-restarts",
                                   absl::StrCat(launcher.max_restarts)};
  argv.insert(argv.end(), cmd.argv.begin(), cmd.argv.end());
  cmd.argv = std::move(argv);
  return cmd;
}

absl::StatusOr<std::map<std::string, double>> ReadTrialMetrics(const TrialLauncher& launcher,
                                                               const Trial& trial) {
  const std::string csv = CsvOf(launcher, trial);
  if (csv.empty()) return ReadJsonMetrics(ResultsPath(trial));
  std::error_code ec;
  if (!std::filesystem::exists(csv, ec) && launcher.results_csv.empty()) {
    return absl::NotFoundError(
        absl::StrCat(trial.dir, ": the training wrote neither results.csv nor metrics.csv"));
  }
  return LastCsvRow(csv);
}

absl::StatusOr<std::vector<std::map<std::string, double>>> ReadTrialRows(
    const TrialLauncher& launcher, const Trial& trial) {
  const std::string csv = CsvOf(launcher, trial);
  if (csv.empty()) {
    return absl::FailedPreconditionError(
        "the program reports its metrics once (results.json), not per epoch: give its "
        "results CSV with --results FILE");
  }
  return CsvRows(csv);
}

}  // namespace elastrun::evolve
