#include "evolve/evolve_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "trainer/detect/hyp.h"

extern char** environ;

namespace elastrun::evolve {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Starts `cmd` in its own process group with stdout and stderr into `log`;
// the child gets SIGTERM if this process dies (so a lost evolve leaves no
// training behind, and --resume trains those individuals again).
absl::StatusOr<pid_t> StartChild(const TrialCommand& cmd, const std::string& log) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& add : cmd.env) replaced |= add.substr(0, add.find('=')) == name;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const std::string& add : cmd.env) env_strings.push_back(add);
  std::vector<char*> argv, envp;
  for (const std::string& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(log, ": ", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execve(argv[0], argv.data(), envp.data());
    dprintf(STDERR_FILENO, "elastrun evolve: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fd);
  return pid;
}

// "exit code N" / "killed by SIGX" for a wait status.
std::string Describe(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
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

// One run of the evolution: its files, the GA, the children.
class Driver {
 public:
  Driver(const EvolveOptions& o, std::ostream& out, std::ostream& err) : o_(o), out_(out), err_(err) {}

  // Reads the inputs and prepares the output folder; the exit code on error.
  std::optional<int> Prepare();
  int Run();

 private:
  struct Slot {
    int index = 0;
    Trial trial;
    std::string log;
  };

  std::string IndName(int g, int i) const { return absl::StrCat("ind_", g, "_", i); }
  Trial TrialOf(int g, int i, const Individual& ind) const;
  absl::Status CheckTrainerKeys(const Trial& trial);
  // Trains the individuals of generation `g` not yet in evolve.csv; sets
  // every fitness of `population`.
  absl::Status Evaluate(int g, std::vector<Individual>& population);
  absl::Status Record(const EvolveRow& row);
  void Progress(int g, size_t queued, size_t running) const;

  const EvolveOptions& o_;
  std::ostream& out_;
  std::ostream& err_;
  TrialLauncher launcher_;
  std::vector<GeneBound> meta_;
  std::vector<std::string> metric_names_, gene_names_;
  std::unique_ptr<Evolution> evolution_;
  std::vector<Individual> population_;
  std::map<std::pair<int, int>, EvolveRow> finished_;  // (generation, index)
  std::optional<EvolveRow> best_;
  std::ofstream csv_;
  int done_ = 0, failed_ = 0;          // in the current generation
  int trained_ = 0;                    // trainings finished by this process
  absl::Duration trained_time_;        // their wall time, summed
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
  if (!o_.meta_file.empty()) {
    absl::StatusOr<std::vector<GeneBound>> meta = LoadMeta(o_.meta_file);
    if (!meta.ok()) return usage(meta.status());
    meta_ = *std::move(meta);
  } else {
    meta_ = DefaultMeta();
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
  if (IsTrainer(o_.program)) {
    if (absl::Status st = CheckTrainerKeys(TrialOf(0, 0, population_[0])); !st.ok()) {
      return usage(st);
    }
  }
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
  absl::StatusOr<pid_t> pid = StartChild(cmd, log);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the program does not take these hyperparameters (", Describe(status), " from ",
      cmd.argv[0], " --print-config with them):\n", Tail(log, 5),
      "each --meta name is a hyp.yaml key (given to elastrun-train as hyp.KEY) or a "
      "config key (optimizer.lr0)"));
}

absl::Status Driver::Record(const EvolveRow& row) {
  csv_ << EvolveCsvLine(row, metric_names_) << "\n" << std::flush;
  if (!csv_) return absl::InternalError(o_.output_dir + "/evolve.csv: cannot be written");
  (row.status == "done" ? done_ : failed_)++;
  return absl::OkStatus();
}

void Driver::Progress(int g, size_t queued, size_t running) const {
  std::string eta = "unknown";
  if (trained_ > 0) {
    const int64_t left =
        static_cast<int64_t>(queued + running) +
        static_cast<int64_t>(o_.generations - g - 1) * o_.population;
    const absl::Duration per = trained_time_ / trained_;
    eta = FormatEta(per * left / std::max<int64_t>(1, std::min<int64_t>(o_.parallel, left)));
  }
  out_ << absl::StrFormat("generation %d/%d: queued %d, running %d, done %d, failed %d; ",
                          g + 1, o_.generations, queued, running, done_, failed_)
       << (best_ ? absl::StrCat("best fitness ", FormatNumber(best_->fitness))
                 : std::string("best fitness -"))
       << "; ETA " << eta << "\n"
       << std::flush;
}

absl::Status Driver::Evaluate(int g, std::vector<Individual>& population) {
  done_ = failed_ = 0;
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
    (row.status == "done" ? done_ : failed_)++;
  }
  std::map<pid_t, Slot> running;
  std::map<pid_t, absl::Time> started;
  while (!queue.empty() || !running.empty()) {
    while (!queue.empty() && static_cast<int>(running.size()) < o_.parallel) {
      const int i = queue.front();
      queue.pop_front();
      Slot slot{i, TrialOf(g, i, population[i]),
                absl::StrCat(o_.output_dir, "/logs/", IndName(g, i), ".log")};
      EvolveRow row{g, i, "failed", 0.0, {}, population[i].genes, ""};
      absl::StatusOr<TrialCommand> cmd = CommandFor(launcher_, slot.trial);
      absl::StatusOr<pid_t> pid = cmd.ok() ? StartChild(*cmd, slot.log) : cmd.status();
      if (!pid.ok()) {
        row.reason = std::string(pid.status().message());
        population[i].fitness = 0.0;
        if (absl::Status st = Record(row); !st.ok()) return st;
        continue;
      }
      started[*pid] = o_.clock->Now();
      running.emplace(*pid, std::move(slot));
    }
    Progress(g, queue.size(), running.size());
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;  // not an individual
    const Slot slot = std::move(it->second);
    running.erase(it);
    trained_time_ += o_.clock->Now() - started[pid];
    ++trained_;
    EvolveRow row{g, slot.index, "failed", 0.0, {}, population[slot.index].genes, ""};
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      row.reason = absl::StrCat("elastrun run: ", Describe(status), "; log ", slot.log);
    } else {
      absl::StatusOr<std::map<std::string, double>> metrics =
          ReadTrialMetrics(launcher_, slot.trial);
      absl::StatusOr<double> fitness =
          metrics.ok() ? WeightedFitness(*metrics, o_.fitness) : metrics.status();
      if (!fitness.ok()) {
        row.reason = std::string(fitness.status().message());
      } else {
        row.status = "done";
        row.fitness = *fitness;
        for (const std::string& m : metric_names_) row.metrics[m] = metrics->at(m);
      }
    }
    population[slot.index].fitness = row.fitness;
    if (absl::Status st = Record(row); !st.ok()) return st;
    finished_[{g, slot.index}] = row;
  }
  Progress(g, 0, 0);
  return absl::OkStatus();
}

int Driver::Run() {
  for (int g = 0; g < o_.generations; ++g) {
    if (absl::Status st = Evaluate(g, population_); !st.ok()) {
      err_ << "elastrun evolve: " << st.message() << "\n";
      return kExitFailed;
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
