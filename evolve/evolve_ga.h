// The genetic algorithm of hyperparameter evolution, after seed 002 §5.4
// (YOLOv5 train.py's --evolve with --evolve_population): a population of
// individuals, each a value per gene (hyperparameter) within the meta
// table's bounds; per generation an adaptive elite size, tournament size,
// crossover rate and mutation rate; tournament selection, one-point
// crossover, uniform mutation, clipping to the bounds.
//
// Pure and torch-free: it never trains anything. Its caller evaluates each
// individual (trains it, reads its metrics, WeightedFitness) and hands the
// evaluated population back to NextGeneration.
//
// The seed's defects, fixed here (evolve_ga_reference.py transcribes the
// seed's code with the same fixes; evolve_ga_test.cc checks each):
//   1. Best individual: the seed prints population[argmax(fitness)] after
//      the population was replaced by the next generation, so it names an
//      unevaluated child. Here best() is the best *evaluated* individual.
//   2. Fitness: the seed ranks by mAP@0.5 alone (results[2]) although its
//      fitness is 0.1·mAP@0.5 + 0.9·mAP@0.5:0.95. Here WeightedFitness,
//      with those weights by default and configurable.
//   3. Randomness: the seed draws from Python's unseeded global `random`.
//      Here each Evolution owns a seeded generator (xoshiro256**, the same
//      stream on every machine and library): one seed, one run; two seeds,
//      two runs.
//   4. Aliasing: without crossover the seed's child *is* its parent's list,
//      so mutating the child mutates the parent (and every other child
//      taken from it). Here a child is always a copy.
//   5. Ties in the elite: the seed takes every individual whose fitness is
//      among the top elite_size values, so ties (failed trainings, all 0)
//      make more elites than elite_size and shift which ones the parents'
//      draw can reach. Here exactly elite_size, the best by fitness, ties to
//      the lower index, in index order as the seed lists them.
//   6. Bounds: the seed clips only mutated genes, so a given individual
//      outside the bounds stays outside; a tournament larger than the
//      population raises. Here given individuals are clipped and the
//      tournament and elite sizes are capped by the population.
#ifndef ELASTRUN_EVOLVE_EVOLVE_GA_H_
#define ELASTRUN_EVOLVE_EVOLVE_GA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace elastrun::evolve {

// One row of the meta table: a hyperparameter, whether evolution changes it,
// and its bounds (lower <= upper, both finite).
struct GeneBound {
  std::string name;
  bool evolve = true;
  double lower = 0.0;
  double upper = 1.0;
};

// The seed's meta table, YOLOv5's hyp names in YOLOv5's order (taken from
// trainer/detect/hyp.h's HypBounds, its one transcription): the loss and
// optimizer keys fixed, the augmentation keys evolved.
std::vector<GeneBound> DefaultMeta();

// The GA's settings; the defaults are the seed's ("GA configs").
struct GaOptions {
  int population = 50;              // individuals per generation, >= 2
  double mutation_rate_min = 0.01;  // per-gene mutation probability, late
  double mutation_rate_max = 0.5;   // per-gene mutation probability, early
  double crossover_rate_min = 0.5;  // crossover probability, late
  double crossover_rate_max = 1.0;  // crossover probability, early
  int elite_min = 2;                // elite size at generation 0
  int elite_max = 5;                // elite size approached at the last
  int tournament_min = 2;           // smallest tournament (and never below 2)
  int tournament_max = 10;          // tournament at generation 0
  double mutation_step = 0.1;       // a mutation adds U(-step, step), absolute
};

// A generation's adaptive sizes and rates, as the seed computes them from
// generation / generations (elite grows, tournament, crossover and
// mutation shrink), with the sizes capped by the population.
struct GenerationRates {
  int elite_size = 0;
  int tournament_size = 0;
  double crossover_rate = 0.0;
  double mutation_rate = 0.0;
};
GenerationRates RatesAt(const GaOptions& options, int generation, int generations);

// An individual: one value per meta gene, in the meta table's order, and
// its fitness once evaluated (higher is better, finite; a failed training
// is given 0 by the caller).
struct Individual {
  std::vector<double> genes;
  double fitness = 0.0;
};

// The weights of the fitness, a weighted sum of named metrics (the
// results' column names). Default: YOLOv5's utils/metrics.py fitness.
struct FitnessWeights {
  std::vector<std::pair<std::string, double>> weights = {{"metrics/mAP_0.5", 0.1},
                                                         {"metrics/mAP_0.5:0.95", 0.9}};
};

// sum(weight * metrics[name]). InvalidArgument when a weighted metric is
// missing from `metrics` or not finite (the message names it and lists the
// metrics there are).
absl::StatusOr<double> WeightedFitness(const std::map<std::string, double>& metrics,
                                       const FitnessWeights& weights);

// xoshiro256** seeded through splitmix64: the same stream from a seed on
// every machine, compiler and standard library (std:: distributions are
// not). evolve_ga_reference.py transcribes it. trainer/detect/augment.h's
// SampleRng is the same generator seeded per sample; it lives in the image
// loader's library, which evolution should not link: both belong in one
// common/ generator.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // A double in [0, 1): the top 53 bits of Next().
  double Uniform01();
  // a + (b - a) * Uniform01(), as Python's random.uniform.
  double Uniform(double a, double b);
  // An integer in [lo, hi] (lo <= hi), unbiased (rejection).
  int64_t IntIn(int64_t lo, int64_t hi);

 private:
  uint64_t s_[4];
};

// The evolution of one run: the meta table, the fixed genes' values, the GA
// settings and the random stream; it remembers the best evaluated
// individual. Not thread-safe; one owner drives it generation by generation.
class Evolution {
 public:
  // `base` gives the value of every gene that does not evolve (a hyp.yaml's
  // values; other keys are ignored). InvalidArgument (naming the gene or
  // option) for: an empty meta, a duplicate name, bounds not finite or
  // lower > upper, a fixed gene missing from `base`, population < 2,
  // min > max in a rate or size pair, a negative mutation_step.
  static absl::StatusOr<std::unique_ptr<Evolution>> Create(
      std::vector<GeneBound> meta, const std::map<std::string, double>& base,
      GaOptions options, uint64_t seed);

  // The first generation: the `given` individuals first, in order (the
  // seed's --evolve_population YAMLs; each gives every evolved gene, other
  // keys ignored; values clipped into bounds), then random individuals
  // (each evolved gene U(lower, upper), in meta order) up to the
  // population. Fixed genes take `base`'s values. InvalidArgument when an
  // individual lacks an evolved gene or a value is not finite (naming the
  // individual and gene), or more individuals are given than the
  // population holds.
  absl::StatusOr<std::vector<Individual>> InitialPopulation(
      const std::vector<std::map<std::string, double>>& given);

  // The population after `evaluated` (generation `generation` of
  // `generations`, 0-based, its fitness set by the caller): tournament
  // winners plus the elite as the parents' pool, then per child two parents
  // from the pool, one-point crossover over the evolved genes, mutation of
  // each evolved gene, clipping. Updates best(). InvalidArgument when
  // `evaluated` is not the population's size, an individual has the wrong
  // number of genes or a fitness that is not finite, or generation is not
  // in [0, generations).
  absl::StatusOr<std::vector<Individual>> NextGeneration(
      const std::vector<Individual>& evaluated, int generation, int generations);

  // The best individual evaluated so far (the first of equal fitness), and
  // the generation it was evaluated in; nullopt before any NextGeneration.
  const std::optional<Individual>& best() const { return best_; }
  int best_generation() const { return best_generation_; }

  const std::vector<GeneBound>& meta() const { return meta_; }
  // The genes of `individual` by name, for a hyp.yaml.
  std::map<std::string, double> Named(const Individual& individual) const;

 private:
  Evolution(std::vector<GeneBound> meta, std::vector<double> fixed, GaOptions options,
            uint64_t seed);
  double Clip(size_t gene, double value) const;

  std::vector<GeneBound> meta_;
  std::vector<size_t> evolved_;  // indices of the evolved genes, in meta order
  std::vector<double> fixed_;    // every gene's base value (0 for evolved ones)
  GaOptions options_;
  Rng rng_;
  std::optional<Individual> best_;
  int best_generation_ = -1;
};

}  // namespace elastrun::evolve

#endif  // ELASTRUN_EVOLVE_EVOLVE_GA_H_
