#include "evolve/evolve_run.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/config.h"
#include "evolve/evolve_io.h"
#include "evolve/evolve_plots.h"
#include "evolve/evolve_trial.h"
#include "nlohmann/json.hpp"
#include "trainer/detect/hyp.h"

namespace elastrun::evolve {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

// The exit code of an error from the service's backend: the CLI's codes.
std::optional<int> ExitCodeOf(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    default:
      return kExitFailed;
  }
}

// The last `n` lines of `path`, for an error message.
std::string Tail(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const std::string& l : lines) absl::StrAppend(&out, "  ", l, "\n");
  return out;
}

std::string FormatEta(absl::Duration d) {
  const int64_t s = absl::ToInt64Seconds(d);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s % 3600 / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

// The hyp.yaml values every run starts from: the detector's defaults
// (hyp.scratch-low), then --hyp.
absl::StatusOr<std::map<std::string, double>> BaseValues(const std::string& hyp_file) {
  absl::StatusOr<trainer::detect::Hyp> defaults = trainer::detect::LoadHyp("", nullptr);
  if (!defaults.ok()) return defaults.status();
  absl::StatusOr<config::Node> node =
      config::LoadConfigFromString(trainer::detect::HypToYaml(*defaults), "<default hyp>");
  if (!node.ok()) return node.status();
  std::map<std::string, double> base;
  for (const config::MapEntry& e : node->entries()) {
    if (e.value.kind() == config::Node::Kind::kInt ||
        e.value.kind() == config::Node::Kind::kDouble) {
      base[e.key] = e.value.as_double();
    }
  }
  if (hyp_file.empty()) return base;
  absl::StatusOr<std::map<std::string, double>> given = LoadNumbers(hyp_file);
  if (!given.ok()) return given.status();
  for (const auto& [k, v] : *given) base[k] = v;
  return base;
}

// The q-quantile of `v` (0 <= q <= 1), interpolated linearly between
// neighbours as numpy.percentile does (Ray Tune's ASHA cutoff).
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// One run of the evolution: its files, the GA, the trainings.
class Driver {
 public:
  Driver(EvolveOptions o, std::ostream& out, std::ostream& err)
      : o_(std::move(o)), out_(out), err_(err) {}

  // Reads the inputs and prepares the output folder; the exit code on error.
  std::optional<int> Prepare();
  int Run();

 private:
  // A training under way.
  struct Running {
    int index = 0;
    Trial trial;
    std::string log;
    absl::Time started;
    size_t rungs_seen = 0;  // milestones already judged (--prune)
    std::optional<EvolveRow> pruned;  // its row once --prune stopped it
  };

  std::string IndName(int g, int i) const { return absl::StrCat("ind_", g, "_", i); }
  Trial TrialOf(int g, int i, const Individual& ind) const;
  absl::Status CheckTrainerKeys(const Trial& trial);
  // Trains the individuals of generation `g` not yet in evolve.csv; sets
  // every fitness of `population`.
  absl::Status Evaluate(int g, std::vector<Individual>& population);
  absl::Status Record(const EvolveRow& row);
  void Progress(int g, size_t queued, size_t running) const;
  // One event of an individual: a line, or a JSON object with --output json.
  void Note(const std::string& event, const std::string& name, const std::string& text,
            const nlohmann::json& extra = nlohmann::json::object()) const;
  // The milestone epochs (--prune) up to `epochs`.
  std::vector<int> Rungs(size_t epochs) const;
  // --prune: records the milestones `r` reached since last time; when
  // `judge`, stops it if it is below the cutoff at one. Errors stop the run.
  absl::Status JudgeRungs(const std::string& name, Running& r, bool judge);

  EvolveOptions o_;
  std::ostream& out_;
  std::ostream& err_;
  TrialLauncher launcher_;
  std::unique_ptr<TrialBackend> backend_;
  int parallel_ = 1;
  std::vector<GeneBound> meta_;
  std::vector<std::string> metric_names_, gene_names_;
  std::unique_ptr<Evolution> evolution_;
  std::vector<Individual> population_;
  std::map<std::pair<int, int>, EvolveRow> finished_;  // (generation, index)
  std::optional<EvolveRow> best_;
  std::ofstream csv_;
  int done_ = 0, failed_ = 0, pruned_ = 0;  // in the current generation
  int trained_ = 0;                    // trainings finished by this process
  absl::Duration trained_time_;        // their wall time, summed
  std::map<int, std::vector<double>> rung_fitness_;  // epoch -> this generation's values
};

std::optional<int> Driver::Prepare() {
  auto usage = [&](const absl::Status& st) {
    err_ << "elastrun evolve: " << st.message() << "\n";
    return std::optional<int>(kExitUsage);
  };
  launcher_.elastrun = o_.elastrun;
  if (launcher_.elastrun.empty()) {
    std::error_code ec;
    launcher_.elastrun = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return usage(absl::InternalError("cannot find the elastrun binary"));
  }
  launcher_.nproc_per_node = o_.nproc_per_node;
  launcher_.max_restarts = o_.max_restarts;
  launcher_.program = o_.program;
  launcher_.results_csv = o_.results_csv;
  if (o_.prune && (o_.prune_grace < 1 || !(o_.prune_eta > 1.0))) {
    return usage(absl::InvalidArgumentError(
        "--prune-grace must be at least 1 and --prune-eta greater than 1"));
  }
  if (o_.prune && !IsTrainer(o_.program) && o_.results_csv.empty()) {
    return usage(absl::InvalidArgumentError(
        "--prune reads each individual's metrics per epoch: give the program's results CSV "
        "with --results FILE"));
  }
  if (!o_.meta_file.empty()) {
    absl::StatusOr<std::vector<GeneBound>> meta = LoadMeta(o_.meta_file);
    if (!meta.ok()) return usage(meta.status());
    meta_ = *std::move(meta);
  } else {
    // The seed's table but two genes the detector does not take: it has
    // no segment labels for copy_paste, and 3 anchors per output layer
    // (the seed evolves their count, 2 to 10).
    for (GeneBound& g : DefaultMeta()) {
      if (g.name != "copy_paste" && g.name != "anchors") meta_.push_back(std::move(g));
    }
  }
  absl::StatusOr<std::map<std::string, double>> base = BaseValues(o_.hyp_file);
  if (!base.ok()) return usage(base.status());
  GaOptions ga;
  ga.population = o_.population;
  absl::StatusOr<std::unique_ptr<Evolution>> evolution =
      Evolution::Create(meta_, *base, ga, o_.seed);
  if (!evolution.ok()) return usage(evolution.status());
  evolution_ = *std::move(evolution);
  std::vector<std::map<std::string, double>> given;
  if (!o_.population_dir.empty()) {
    absl::StatusOr<std::vector<std::map<std::string, double>>> loaded =
        LoadIndividuals(o_.population_dir);
    if (!loaded.ok()) return usage(loaded.status());
    given = *std::move(loaded);
  }
  absl::StatusOr<std::vector<Individual>> first = evolution_->InitialPopulation(given);
  if (!first.ok()) return usage(first.status());
  population_ = *std::move(first);
  for (const GeneBound& g : meta_) gene_names_.push_back(g.name);
  for (const auto& [name, w] : o_.fitness.weights) metric_names_.push_back(name);

  std::error_code ec;
  std::filesystem::create_directories(o_.output_dir + "/logs", ec);
  if (ec) return usage(absl::InternalError(absl::StrCat(o_.output_dir, ": ", ec.message())));
  // Absolute: the individuals' folders are named to programs that run
  // elsewhere (another working folder, another node).
  o_.output_dir = std::filesystem::canonical(o_.output_dir, ec).string();
  if (ec) return usage(absl::InternalError(absl::StrCat(o_.output_dir, ": ", ec.message())));
  const std::string csv = o_.output_dir + "/evolve.csv";
  const bool exists = std::filesystem::exists(csv, ec);
  if (o_.resume) {
    if (!exists) return usage(absl::NotFoundError(absl::StrCat(csv, ": nothing to resume")));
    absl::StatusOr<std::vector<EvolveRow>> rows = ReadEvolveCsv(csv, metric_names_, gene_names_);
    if (!rows.ok()) return usage(rows.status());
    for (EvolveRow& row : *rows) finished_[{row.generation, row.index}] = std::move(row);
    out_ << "elastrun evolve: resuming " << o_.output_dir << ": " << finished_.size()
         << " individuals already evaluated\n";
  } else if (exists) {
    return usage(absl::AlreadyExistsError(absl::StrCat(
        csv, " exists: continue it with --resume ", o_.output_dir,
        ", or give another --output-dir")));
  }
  csv_.open(csv, std::ios::app);
  if (!csv_) return usage(absl::InternalError(absl::StrCat(csv, ": cannot be written")));
  if (!exists) csv_ << EvolveCsvHeader(metric_names_, gene_names_) << "\n" << std::flush;
  if (IsTrainer(o_.program) && std::filesystem::exists(o_.program[0], ec)) {
    if (absl::Status st = CheckTrainerKeys(TrialOf(0, 0, population_[0])); !st.ok()) {
      return usage(st);
    }
  }
  if (o_.cluster) {
    absl::StatusOr<std::unique_ptr<TrialBackend>> backend = o_.cluster(o_);
    if (!backend.ok()) {
      err_ << "elastrun evolve: " << backend.status().message() << "\n";
      return ExitCodeOf(backend.status());
    }
    backend_ = *std::move(backend);
  } else {
    backend_ = NewLocalBackend(launcher_);
  }
  parallel_ = o_.parallel > 0 ? o_.parallel : o_.cluster ? o_.population : 1;
  return std::nullopt;
}

Trial Driver::TrialOf(int g, int i, const Individual& ind) const {
  Trial t;
  t.hyp = evolution_->Named(ind);
  t.dir = absl::StrCat(o_.output_dir, "/", IndName(g, i));
  return t;
}

// elastrun-train --print-config with the overrides of an individual: a
// gene the program's config does not take is an error before anything
// trains.
absl::Status Driver::CheckTrainerKeys(const Trial& trial) {
  TrialCommand cmd;
  cmd.argv = ProgramArgs(launcher_, trial);
  cmd.argv.push_back("--print-config");
  const std::string log = o_.output_dir + "/logs/check_config.log";
  std::error_code ec;
  std::filesystem::remove(log, ec);
  absl::StatusOr<std::string> ended = RunToEnd(cmd, log);
  if (!ended.ok()) return ended.status();
  if (ended->empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the program does not take these hyperparameters (", *ended, " from ", cmd.argv[0],
      " --print-config with them):\n", Tail(log, 5),
      "each --meta name is a hyp.yaml key (given to elastrun-train as ++hyp.KEY) or a "
      "config key (optimizer.lr0)"));
}

absl::Status Driver::Record(const EvolveRow& row) {
  csv_ << EvolveCsvLine(row, metric_names_) << "\n" << std::flush;
  if (!csv_) return absl::InternalError(o_.output_dir + "/evolve.csv: cannot be written");
  (row.status == "done" ? done_ : row.status == "pruned" ? pruned_ : failed_)++;
  return absl::OkStatus();
}

void Driver::Note(const std::string& event, const std::string& name, const std::string& text,
                  const nlohmann::json& extra) const {
  if (o_.json) {
    nlohmann::json j = extra;
    j["event"] = event;
    j["individual"] = name;
    out_ << j.dump() << "\n" << std::flush;
    return;
  }
  out_ << name << ": " << text << "\n" << std::flush;
}

void Driver::Progress(int g, size_t queued, size_t running) const {
  std::optional<int64_t> eta_s;
  if (trained_ > 0) {
    const int64_t left =
        static_cast<int64_t>(queued + running) +
        static_cast<int64_t>(o_.generations - g - 1) * o_.population;
    const absl::Duration per = trained_time_ / trained_;
    eta_s = absl::ToInt64Seconds(per * left /
                                 std::max<int64_t>(1, std::min<int64_t>(parallel_, left)));
  }
  if (o_.json) {
    nlohmann::json j = {{"event", "progress"}, {"generation", g + 1},
                        {"generations", o_.generations}, {"queued", queued},
                        {"running", running}, {"done", done_},
                        {"failed", failed_}, {"pruned", pruned_}};
    j["best_fitness"] = best_ ? nlohmann::json(best_->fitness) : nlohmann::json(nullptr);
    j["eta_s"] = eta_s ? nlohmann::json(*eta_s) : nlohmann::json(nullptr);
    out_ << j.dump() << "\n" << std::flush;
    return;
  }
  out_ << absl::StrFormat("generation %d/%d: queued %d, running %d, done %d, failed %d", g + 1,
                          o_.generations, queued, running, done_, failed_)
       << (o_.prune ? absl::StrCat(", pruned ", pruned_) : "") << "; "
       << (best_ ? absl::StrCat("best fitness ", FormatNumber(best_->fitness))
                 : std::string("best fitness -"))
       << "; ETA " << (eta_s ? FormatEta(absl::Seconds(*eta_s)) : "unknown") << "\n"
       << std::flush;
}

std::vector<int> Driver::Rungs(size_t epochs) const {
  std::vector<int> rungs;
  double at = o_.prune_grace;
  while (at <= static_cast<double>(epochs)) {
    const int epoch = static_cast<int>(std::lround(at));
    if (rungs.empty() || epoch > rungs.back()) rungs.push_back(epoch);
    at *= o_.prune_eta;
  }
  return rungs;
}

absl::Status Driver::JudgeRungs(const std::string& name, Running& r, bool judge) {
  if (!o_.prune || r.pruned) return absl::OkStatus();
  absl::StatusOr<std::vector<std::map<std::string, double>>> rows =
      ReadTrialRows(launcher_, r.trial);
  if (!rows.ok()) {
    if (absl::IsNotFound(rows.status())) return absl::OkStatus();  // not written yet
    return rows.status();
  }
  const std::vector<int> rungs = Rungs(rows->size());
  for (; r.rungs_seen < rungs.size(); ++r.rungs_seen) {
    const int epoch = rungs[r.rungs_seen];
    const std::map<std::string, double>& metrics = (*rows)[epoch - 1];
    absl::StatusOr<double> fitness = WeightedFitness(metrics, o_.fitness);
    if (!fitness.ok()) return fitness.status();
    std::vector<double>& seen = rung_fitness_[epoch];
    seen.push_back(*fitness);
    const double cutoff = Quantile(seen, 1.0 - 1.0 / o_.prune_eta);
    if (!judge || !(*fitness < cutoff)) continue;
    const std::string why =
        absl::StrCat("pruned at epoch ", epoch, ": fitness ", FormatNumber(*fitness),
                     " below the generation's top 1/", FormatNumber(o_.prune_eta), " (",
                     FormatNumber(cutoff), ")");
    EvolveRow row{-1, r.index, "pruned", *fitness, {}, {}, why};
    for (const std::string& m : metric_names_) row.metrics[m] = metrics.at(m);
    r.pruned = row;
    Note("pruned", name, why, {{"epoch", epoch}, {"fitness", *fitness}, {"cutoff", cutoff}});
    if (absl::Status st = backend_->Stop(name, why); !st.ok() && !absl::IsNotFound(st)) {
      return st;
    }
    break;
  }
  return absl::OkStatus();
}

absl::Status Driver::Evaluate(int g, std::vector<Individual>& population) {
  done_ = failed_ = pruned_ = 0;
  rung_fitness_.clear();
  std::deque<int> queue;
  for (int i = 0; i < static_cast<int>(population.size()); ++i) {
    auto it = finished_.find({g, i});
    if (it == finished_.end()) {
      queue.push_back(i);
      continue;
    }
    const EvolveRow& row = it->second;
    for (size_t k = 0; k < row.genes.size(); ++k) {
      if (FormatNumber(row.genes[k]) != FormatNumber(population[i].genes[k])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "evolve.csv's individual ", g, ",", i, " has ", gene_names_[k], "=",
            FormatNumber(row.genes[k]), " where this run's GA gives ",
            FormatNumber(population[i].genes[k]),
            ": resume with the --seed, --population, --meta, --hyp and --evolve-population "
            "the run was started with"));
      }
    }
    population[i].fitness = row.fitness;
    (row.status == "done" ? done_ : row.status == "pruned" ? pruned_ : failed_)++;
    if (row.status != "failed") {  // its milestones count for the others' cutoffs
      Running past{i, TrialOf(g, i, population[i]), "", {}, 0, {}};
      if (absl::Status st = JudgeRungs(IndName(g, i), past, /*judge=*/false); !st.ok()) {
        err_ << "elastrun evolve: warning: " << IndName(g, i) << ": " << st.message() << "\n";
      }
    }
  }
  std::map<std::string, Running> running;
  while (!queue.empty() || !running.empty()) {
    while (!queue.empty() && static_cast<int>(running.size()) < parallel_) {
      const int i = queue.front();
      queue.pop_front();
      const std::string name = IndName(g, i);
      Running r{i, TrialOf(g, i, population[i]),
                absl::StrCat(o_.output_dir, "/logs/", name, ".log"), o_.clock->Now(), 0, {}};
      absl::StatusOr<TrialCommand> cmd = ProgramCommand(launcher_, r.trial);
      absl::Status st = cmd.ok() ? backend_->Start(name, *cmd, r.log) : cmd.status();
      if (!st.ok()) {
        if (absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ||
            absl::IsUnauthenticated(st) || absl::IsPermissionDenied(st) ||
            absl::IsFailedPrecondition(st) || absl::IsInvalidArgument(st)) {
          // The service, or a job spec it refuses (too many workers for
          // its nodes): every individual alike. Stop; --resume goes on.
          return absl::Status(st.code(), absl::StrCat(name, ": ", st.message()));
        }
        EvolveRow row{g, i, "failed", 0.0, {}, population[i].genes, std::string(st.message())};
        population[i].fitness = 0.0;
        Note("failed", name, absl::StrCat("failed: ", row.reason), {{"reason", row.reason}});
        if (absl::Status rec = Record(row); !rec.ok()) return rec;
        finished_[{g, i}] = row;
        continue;
      }
      const std::string where = backend_->Where(name);
      Note("started", name, absl::StrCat("started (", where, ")"), {{"where", where}});
      running.emplace(name, std::move(r));
    }
    const size_t waiting = std::min<size_t>(backend_->Waiting(), running.size());
    Progress(g, queue.size() + waiting, running.size() - waiting);
    absl::StatusOr<std::optional<TrialEnd>> ended =
        backend_->WaitAny(o_.prune ? o_.poll : absl::InfiniteDuration());
    if (!ended.ok()) return ended.status();
    if (!ended->has_value()) {
      for (auto& [name, r] : running) {
        if (absl::Status st = JudgeRungs(name, r, /*judge=*/true); !st.ok()) {
          return absl::Status(st.code(), absl::StrCat(name, ": ", st.message()));
        }
      }
      continue;
    }
    const TrialEnd end = **ended;
    auto it = running.find(end.name);
    if (it == running.end()) continue;
    Running r = std::move(it->second);
    running.erase(it);
    trained_time_ += o_.clock->Now() - r.started;
    ++trained_;
    EvolveRow row{g, r.index, "failed", 0.0, {}, population[r.index].genes, ""};
    if (r.pruned) {
      row.status = "pruned";
      row.fitness = r.pruned->fitness;
      row.metrics = r.pruned->metrics;
      row.reason = r.pruned->reason;
    } else if (!end.succeeded) {
      row.reason = end.reason;
      Note("failed", end.name, absl::StrCat("failed: ", row.reason), {{"reason", row.reason}});
    } else {
      absl::StatusOr<std::map<std::string, double>> metrics = ReadTrialMetrics(launcher_, r.trial);
      absl::StatusOr<double> fitness =
          metrics.ok() ? WeightedFitness(*metrics, o_.fitness) : metrics.status();
      if (!fitness.ok()) {
        row.reason = std::string(fitness.status().message());
        Note("failed", end.name, absl::StrCat("failed: ", row.reason), {{"reason", row.reason}});
      } else {
        row.status = "done";
        row.fitness = *fitness;
        for (const std::string& m : metric_names_) row.metrics[m] = metrics->at(m);
        Note("done", end.name, absl::StrCat("done, fitness ", FormatNumber(*fitness)),
             {{"fitness", *fitness}});
        if (absl::Status st = JudgeRungs(end.name, r, /*judge=*/false); !st.ok()) {
          err_ << "elastrun evolve: warning: " << end.name << ": " << st.message() << "\n";
        }
      }
    }
    population[r.index].fitness = row.fitness;
    if (absl::Status st = Record(row); !st.ok()) return st;
    finished_[{g, r.index}] = row;
  }
  Progress(g, 0, 0);
  return absl::OkStatus();
}

int Driver::Run() {
  for (int g = 0; g < o_.generations; ++g) {
    if (absl::Status st = Evaluate(g, population_); !st.ok()) {
      err_ << "elastrun evolve: " << st.message() << "\n"
           << "elastrun evolve: continue with --resume " << o_.output_dir << "\n";
      return *ExitCodeOf(st) == kExitUsage ? kExitFailed : *ExitCodeOf(st);
    }
    for (int i = 0; i < static_cast<int>(population_.size()); ++i) {
      const EvolveRow& row = finished_.at({g, i});
      if (row.status == "done" && (!best_ || row.fitness > best_->fitness)) best_ = row;
    }
    absl::Status st = WriteFileAtomically(o_.output_dir + "/evolve_population.yaml",
                                          PopulationYaml(population_, meta_, g));
    if (st.ok() && best_) {
      st = WriteFileAtomically(o_.output_dir + "/hyp_evolve.yaml", HypEvolveYaml(*best_, meta_));
    }
    if (st.ok()) {
      // Fitness against each hyperparameter (YOLOv5's evolve.png); a plot
      // that cannot be drawn costs a warning, not the run.
      const absl::Status plot =
          WriteEvolvePlot(o_.output_dir + "/evolve.csv", o_.output_dir + "/evolve.svg");
      if (!plot.ok()) err_ << "elastrun evolve: warning: evolve.svg: " << plot.message() << "\n";
    }
    if (st.ok() && g + 1 < o_.generations) {
      absl::StatusOr<std::vector<Individual>> next =
          evolution_->NextGeneration(population_, g, o_.generations);
      if (next.ok()) {
        population_ = *std::move(next);
      } else {
        st = next.status();
      }
    }
    if (!st.ok()) {
      err_ << "elastrun evolve: " << st.message() << "\n";
      return kExitFailed;
    }
  }
  if (!best_) {
    err_ << "elastrun evolve: every individual failed; their reasons are in " << o_.output_dir
         << "/evolve.csv\n";
    return kExitFailed;
  }
  if (o_.json) {
    out_ << nlohmann::json({{"event", "finished"},
                            {"best_fitness", best_->fitness},
                            {"generation", best_->generation},
                            {"index", best_->index},
                            {"hyp_evolve", o_.output_dir + "/hyp_evolve.yaml"}})
                .dump()
         << "\n";
    return 0;
  }
  out_ << "elastrun evolve: best fitness " << FormatNumber(best_->fitness) << " (generation "
       << best_->generation << ", individual " << best_->index << "): " << o_.output_dir
       << "/hyp_evolve.yaml\n";
  return 0;
}

}  // namespace

int RunEvolve(const EvolveOptions& options, std::ostream& out, std::ostream& err) {
  Driver driver(options, out, err);
  if (std::optional<int> code = driver.Prepare(); code) return *code;
  return driver.Run();
}

}  // namespace elastrun::evolve
