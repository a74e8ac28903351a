#include "evolve/evolve_flags.h"

#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace elastrun::evolve {

const char kEvolveIntro[] =
    "usage: elastrun evolve [FLAGS] -- PROGRAM ARGS...\n"
    "\n"
    "Evolves hyperparameters with YOLOv5's genetic algorithm (seed 002, its\n"
    "defects fixed: see the README): per generation, every individual is one\n"
    "training of PROGRAM ARGS, scored by --fitness from its metrics. With a\n"
    "service (--rendezvous or $ELASTRUN_RENDEZVOUS) each individual is a job of\n"
    "the cluster (--nnodes x --nproc-per-node workers, --max-restarts), the\n"
    "whole generation submitted at once and placed by free slots; the output\n"
    "folder must be the same path on the nodes (a shared file system), as the\n"
    "workers write there. Without one, each is an `elastrun run` on this\n"
    "machine, --parallel at once. A worker failure restarts the individual as\n"
    "in any job; one that fails for good gets fitness 0 and its reason in\n"
    "evolve.csv, and its generation goes on.\n"
    "\n"
    "PROGRAM elastrun-train takes each hyperparameter as a config override (a\n"
    "YOLOv5 hyp name such as lr0 as ++hyp.lr0, the detector's section; a dotted\n"
    "name such as optimizer.lr0 as it is) and train.output_dir=DIR/ind_G_I; its\n"
    "metrics are the last row of results.csv (detector) or metrics.csv\n"
    "(classifier). Any other PROGRAM reads the hyperparameters from the YAML at\n"
    "$ELASTRUN_HYP (also written in place of {hyp} in ARGS; {dir} becomes the\n"
    "individual's folder) and gives its metrics as the last row of its results\n"
    "CSV, by column names (--results), or as a JSON object it writes to\n"
    "$ELASTRUN_RESULTS. YOLOv5's own train.py, for instance:\n"
    "  elastrun evolve --results exp/results.csv -- \\\n"
    "      python3 train.py --hyp {hyp} --project {dir} --name exp --exist-ok\n"
    "\n"
    "Writes to --output-dir: evolve.csv (one row per individual as it finishes:\n"
    "generation, index, status, fitness, the fitness's metrics, the\n"
    "hyperparameters, the failure's reason), hyp_evolve.yaml (the best\n"
    "evaluated individual), evolve_population.yaml (the last population; it\n"
    "reads back with --evolve-population), evolve.svg (fitness against each\n"
    "hyperparameter), ind_G_I/ (each training) and logs/ind_G_I.log (a job's\n"
    "log as the service kept it). Progress: a line per individual started and\n"
    "ended, and generation g/G with individuals queued, running, done and\n"
    "failed, the best fitness and an ETA; --output json prints each as a JSON\n"
    "object per line.\n"
    "\n"
    "Losing `elastrun evolve` loses nothing: --resume DIR reads the finished\n"
    "individuals from evolve.csv and, on a service, adopts the jobs still\n"
    "running (never submitting an individual twice); locally the trainings\n"
    "stop with it and run again.\n"
    "\n"
    "--prune (Ray Tune's ASHA, which YOLOv5 lacks): at epochs E, E*eta,\n"
    "E*eta^2, ... (--prune-grace E, --prune-eta eta) an individual whose fitness\n"
    "from its results CSV is below the top 1/eta of its generation's there is\n"
    "stopped and its slot reused; it is written with status pruned and the\n"
    "fitness of that epoch.\n"
    "\n"
    "Example (the classifier, two hyperparameters):\n"
    "  elastrun evolve --generations 5 --population 8 --parallel 2 \\\n"
    "      --meta meta.yaml --fitness test_acc=1 -- \\\n"
    "      build/bin/elastrun-train --config configs/fashion_mnist_mlp.yaml\n"
    "with meta.yaml:\n"
    "  optimizer.lr0: [true, 0.001, 0.1]\n"
    "  optimizer.momentum: [true, 0.6, 0.98]\n";

const char kEvolveFooter[] =
    "Exit codes: 0 every generation evaluated, 1 every individual failed or the\n"
    "run stopped on an error, 2 bad flags or input files (nothing trained), 3\n"
    "the service could not be reached (--resume continues).\n";

void AddEvolveFlags(CLI::App* app, EvolveFlags* flags) {
  EvolveOptions& o = flags->options;
  app->add_option("--generations", o.generations, "generations to evaluate (default 10)")
      ->type_name("G");
  app->add_option("--population", o.population, "individuals per generation (default 50)")
      ->type_name("P");
  app->add_option("--hyp", o.hyp_file,
                  "YAML of the values of the genes that do not evolve (default: "
                  "YOLOv5's hyp.scratch-low)")
      ->type_name("FILE");
  app->add_option("--meta", o.meta_file,
                  "the meta table as YAML, `name: [evolve, lower, upper]` (default: "
                  "YOLOv5's, over its hyp names, without copy_paste and anchors, which "
                  "the detector does not take)")
      ->type_name("FILE");
  app->add_option("--evolve-population", o.population_dir,
                  "the first individuals: the YAMLs of DIR (a mapping or a list of "
                  "them each); the rest are random within the bounds")
      ->type_name("DIR");
  app->add_option("--resume", o.output_dir,
                  "continue the run in DIR from its evolve.csv, with the flags it was "
                  "started with (--generations may grow)")
      ->type_name("DIR")
      ->each([&o](const std::string&) { o.resume = true; });
  app->add_option("--parallel", o.parallel,
                  "individuals training at once (default: 1 on this machine, the "
                  "whole generation on a service)")
      ->type_name("K");
  app->add_option("--seed", o.seed, "seed of the GA's random stream (default 0)")
      ->type_name("S");
  app->add_option("--fitness", flags->fitness,
                  "a metric's weight in the fitness, repeatable (default "
                  "metrics/mAP_0.5=0.1 metrics/mAP_0.5:0.95=0.9; a classifier: test_acc=1)")
      ->type_name("COLUMN=W")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                  "workers of each individual per node (default 1)")
      ->type_name("N");
  app->add_option("--nnodes", o.nnodes,
                  "nodes of each individual, N or MIN:MAX (default 1; above 1 needs a "
                  "service)")
      ->type_name("N|MIN:MAX");
  app->add_option("--results", o.results_csv,
                  "the program's results CSV, relative to its folder {dir}: its last row "
                  "holds the --fitness columns (default: elastrun-train's, else "
                  "$ELASTRUN_RESULTS)")
      ->type_name("FILE");
  app->add_flag("--prune", o.prune,
                "stop individuals below their generation's top 1/eta at epoch milestones "
                "(ASHA)");
  app->add_option("--prune-grace", o.prune_grace,
                  "the first milestone, in epochs (default 1)")
      ->type_name("E");
  app->add_option("--prune-eta", o.prune_eta,
                  "the milestones' ratio and the kept share 1/eta (default 3)")
      ->type_name("ETA");
  app->add_option("--output", flags->output, "text for people (default), or json for scripts")
      ->type_name("text|json");
  app->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "restarts of each individual before it fails (default 0)")
      ->type_name("R");
  app->add_option("--output-dir", o.output_dir, "where the run's files go (default runs/evolve)")
      ->type_name("DIR");
}

absl::StatusOr<EvolveOptions> EvolveOptionsFrom(EvolveFlags flags,
                                                std::vector<std::string> program,
                                                bool cluster) {
  EvolveOptions o = std::move(flags.options);
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.generations < 1) return bad("--generations must be at least 1");
  if (o.population < 2) return bad("--population must be at least 2");
  if (o.parallel < 0) return bad("--parallel must be at least 1");
  if (flags.output != "text" && flags.output != "json") {
    return bad(absl::StrCat("--output: \"", flags.output, "\" is not text or json"));
  }
  o.json = flags.output == "json";
  {
    const std::vector<std::string> parts = absl::StrSplit(o.nnodes, ':');
    int lo = 0, hi = 0;
    if (parts.size() > 2 || !absl::SimpleAtoi(parts.front(), &lo) ||
        !absl::SimpleAtoi(parts.back(), &hi) || lo < 1 || hi < lo) {
      return bad(absl::StrCat("--nnodes \"", o.nnodes,
                              "\" is not N or MIN:MAX with 1 <= MIN <= MAX"));
    }
    if (hi > 1 && !cluster) {
      return bad(absl::StrCat("--nnodes ", o.nnodes,
                              ": individuals of several nodes need a service (--rendezvous or "
                              "$ELASTRUN_RENDEZVOUS); on this machine each is one node"));
    }
  }
  if (o.prune_grace < 1) return bad("--prune-grace must be at least 1");
  if (!(o.prune_eta > 1.0)) return bad("--prune-eta must be greater than 1");
  if (o.nproc_per_node < 1) return bad("--nproc-per-node must be at least 1");
  if (o.max_restarts < 0) return bad("--max-restarts must not be negative");
  if (o.output_dir.empty()) return bad("--output-dir is empty");
  if (!flags.fitness.empty()) {
    o.fitness.weights.clear();
    for (const std::string& f : flags.fitness) {
      const size_t eq = f.rfind('=');
      double w = 0.0;
      if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(f.substr(eq + 1), &w) ||
          !std::isfinite(w)) {
        return bad(absl::StrCat("--fitness \"", f,
                                "\" is not COLUMN=WEIGHT (e.g. metrics/mAP_0.5=0.1)"));
      }
      o.fitness.weights.emplace_back(f.substr(0, eq), w);
    }
  }
  if (program.empty()) return bad("no program: give it after \"--\" (-- PROGRAM ARGS...)");
  o.program = std::move(program);
  return o;
}

}  // namespace elastrun::evolve
