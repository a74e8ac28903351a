#include "evolve/evolve_flags.h"

#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace elastrun::evolve {

const char kEvolveIntro[] =
    "usage: elastrun evolve [FLAGS] -- PROGRAM ARGS...\n"
    "\n"
    "Evolves hyperparameters with YOLOv5's genetic algorithm (seed 002, its\n"
    "defects fixed: see evolve/evolve_ga.h): per generation, every individual is\n"
    "trained as its own `elastrun run --nproc-per-node N --max-restarts R\n"
    "PROGRAM ARGS...` on this machine, --parallel at once, and scored by\n"
    "--fitness from its metrics. An individual that fails gets fitness 0 and its\n"
    "reason in evolve.csv; its generation goes on.\n"
    "\n"
    "PROGRAM elastrun-train takes each hyperparameter as a config override (a\n"
    "YOLOv5 hyp name such as lr0 as hyp.lr0, the detector's section; a dotted\n"
    "name such as optimizer.lr0 as it is) and train.output_dir=DIR/ind_G_I; its\n"
    "metrics are the last row of results.csv (detector) or metrics.csv\n"
    "(classifier). Any other PROGRAM reads the hyperparameters from the YAML at\n"
    "$ELASTRUN_HYP (also written in place of {hyp} in ARGS) and writes its\n"
    "metrics as a JSON object to $ELASTRUN_RESULTS.\n"
    "\n"
    "Writes to --output-dir: evolve.csv (one row per individual as it finishes:\n"
    "generation, index, status, fitness, the fitness's metrics, the\n"
    "hyperparameters, the failure's reason), hyp_evolve.yaml (the best\n"
    "evaluated individual), evolve_population.yaml (the last population; it\n"
    "reads back with --evolve-population), ind_G_I/ (each training) and\n"
    "logs/ind_G_I.log.\n"
    "\n"
    "Example (the classifier, two hyperparameters):\n"
    "  elastrun evolve --generations 5 --population 8 --parallel 2 \\\n"
    "      --meta meta.yaml --fitness test_acc=1 -- \\\n"
    "      build/bin/elastrun-train --config configs/fashion_mnist_mlp.yaml\n"
    "with meta.yaml:\n"
    "  optimizer.lr0: [true, 0.001, 0.1]\n"
    "  optimizer.momentum: [true, 0.6, 0.98]\n";

const char kEvolveFooter[] =
    "Not yet implemented: the cluster mode (individuals as jobs of the service\n"
    "with --rendezvous), --nnodes, --prune and --output json.\n"
    "\n"
    "Exit codes: 0 every generation evaluated, 1 every individual failed or the\n"
    "run stopped on an error, 2 bad flags or input files (nothing trained).\n";

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
                  "YOLOv5's, over its hyp names)")
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
  app->add_option("--parallel", o.parallel, "individuals training at once (default 1)")
      ->type_name("K");
  app->add_option("--seed", o.seed, "seed of the GA's random stream (default 0)")
      ->type_name("S");
  app->add_option("--fitness", flags->fitness,
                  "a metric's weight in the fitness, repeatable (default "
                  "metrics/mAP_0.5=0.1 metrics/mAP_0.5:0.95=0.9; a classifier: test_acc=1)")
      ->type_name("COLUMN=W")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                  "workers of each individual (default 1)")
      ->type_name("N");
  app->add_option("--max-restarts,--max_restarts", o.max_restarts,
                  "restarts of each individual before it fails (default 0)")
      ->type_name("R");
  app->add_option("--output-dir", o.output_dir, "where the run's files go (default runs/evolve)")
      ->type_name("DIR");
}

absl::StatusOr<EvolveOptions> EvolveOptionsFrom(EvolveFlags flags,
                                                std::vector<std::string> program) {
  EvolveOptions o = std::move(flags.options);
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.generations < 1) return bad("--generations must be at least 1");
  if (o.population < 2) return bad("--population must be at least 2");
  if (o.parallel < 1) return bad("--parallel must be at least 1");
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
