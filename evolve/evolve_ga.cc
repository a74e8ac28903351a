#include "evolve/evolve_ga.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/xoshiro.h"
#include "trainer/detect/hyp.h"

namespace elastrun::evolve {
namespace {


absl::Status CheckPair(const char* what, double min, double max) {
  if (!(min <= max)) {
    return absl::InvalidArgumentError(absl::StrCat("evolve options: ", what, "_min (",
                                                   min, ") is above ", what, "_max (",
                                                   max, "); set min <= max"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<GeneBound> DefaultMeta() {
  std::vector<GeneBound> meta;
  for (const trainer::detect::HypBound& b : trainer::detect::HypBounds()) {
    meta.push_back({b.key, b.mutate, b.low, b.high});
  }
  return meta;
}

GenerationRates RatesAt(const GaOptions& o, int generation, int generations) {
  // The seed's formulas, term for term (Python's / is a double division and
  // int() truncates toward zero, as static_cast<int> does).
  const double progress = static_cast<double>(generation) / generations;
  GenerationRates r;
  r.elite_size = o.elite_min + static_cast<int>((o.elite_max - o.elite_min) * progress);
  r.tournament_size = std::max(std::max(2, o.tournament_min),
                               static_cast<int>(std::min(o.tournament_max, o.population) -
                                                generation / (generations / 10.0)));
  r.crossover_rate =
      std::max(o.crossover_rate_min,
               std::min(o.crossover_rate_max, o.crossover_rate_max - progress));
  r.mutation_rate = std::max(
      o.mutation_rate_min, std::min(o.mutation_rate_max, o.mutation_rate_max - progress));
  // Fix 6: random.sample raises for a tournament above the population.
  r.elite_size = std::min(r.elite_size, o.population);
  r.tournament_size = std::min(r.tournament_size, o.population);
  return r;
}

absl::StatusOr<double> WeightedFitness(const std::map<std::string, double>& metrics,
                                       const FitnessWeights& weights) {
  double sum = 0.0;
  for (const auto& [name, weight] : weights.weights) {
    const auto it = metrics.find(name);
    if (it == metrics.end()) {
      std::vector<std::string> names;
      for (const auto& [n, v] : metrics) names.push_back(n);
      return absl::InvalidArgumentError(absl::StrCat(
          "fitness: metric '", name, "' (weight ", weight,
          ") is not in the results; there are: ", absl::StrJoin(names, ", ")));
    }
    if (!std::isfinite(it->second)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fitness: metric '", name, "' is ", it->second, ", not a number"));
    }
    sum += weight * it->second;
  }
  return sum;
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(seed);
}

uint64_t Rng::Next() { return Xoshiro256Next(s_); }

double Rng::Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double Rng::Uniform(double a, double b) { return a + (b - a) * Uniform01(); }

int64_t Rng::IntIn(int64_t lo, int64_t hi) {
  const uint64_t n = static_cast<uint64_t>(hi - lo) + 1;
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: below it, x % n is biased
  uint64_t x;
  do {
    x = Next();
  } while (x < threshold);
  return lo + static_cast<int64_t>(x % n);
}

absl::StatusOr<std::unique_ptr<Evolution>> Evolution::Create(
    std::vector<GeneBound> meta, const std::map<std::string, double>& base,
    GaOptions options, uint64_t seed) {
  if (meta.empty()) return absl::InvalidArgumentError("evolve meta: no genes");
  std::set<std::string> names;
  std::vector<double> fixed(meta.size(), 0.0);
  for (size_t i = 0; i < meta.size(); ++i) {
    const GeneBound& g = meta[i];
    if (!names.insert(g.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("evolve meta: gene '", g.name, "' is listed twice"));
    }
    if (!std::isfinite(g.lower) || !std::isfinite(g.upper) || g.lower > g.upper) {
      return absl::InvalidArgumentError(
          absl::StrCat("evolve meta: gene '", g.name, "' has bounds [", g.lower, ", ",
                       g.upper, "]; want finite lower <= upper"));
    }
    if (!g.evolve) {
      const auto it = base.find(g.name);
      if (it == base.end() || !std::isfinite(it->second)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "evolve: gene '", g.name,
            "' does not evolve, so the hyperparameters must give it a value"));
      }
      fixed[i] = it->second;
    }
  }
  if (options.population < 2) {
    return absl::InvalidArgumentError(absl::StrCat("evolve options: population is ",
                                                   options.population, "; want >= 2"));
  }
  for (absl::Status s :
       {CheckPair("mutation_rate", options.mutation_rate_min, options.mutation_rate_max),
        CheckPair("crossover_rate", options.crossover_rate_min,
                  options.crossover_rate_max),
        CheckPair("elite", options.elite_min, options.elite_max),
        CheckPair("tournament", options.tournament_min, options.tournament_max)}) {
    if (!s.ok()) return s;
  }
  if (!(options.mutation_step >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("evolve options: mutation_step is ",
                                                   options.mutation_step, "; want >= 0"));
  }
  return std::unique_ptr<Evolution>(
      new Evolution(std::move(meta), std::move(fixed), options, seed));
}

Evolution::Evolution(std::vector<GeneBound> meta, std::vector<double> fixed,
                     GaOptions options, uint64_t seed)
    : meta_(std::move(meta)), fixed_(std::move(fixed)), options_(options), rng_(seed) {
  for (size_t i = 0; i < meta_.size(); ++i) {
    if (meta_[i].evolve) evolved_.push_back(i);
  }
}

double Evolution::Clip(size_t gene, double value) const {
  return std::min(std::max(value, meta_[gene].lower), meta_[gene].upper);
}

absl::StatusOr<std::vector<Individual>> Evolution::InitialPopulation(
    const std::vector<std::map<std::string, double>>& given) {
  const size_t size = static_cast<size_t>(options_.population);
  if (given.size() > size) {
    return absl::InvalidArgumentError(
        absl::StrCat("evolve: ", given.size(), " individuals given for a population of ",
                     size, "; raise the population or give fewer"));
  }
  std::vector<Individual> population;
  for (size_t k = 0; k < given.size(); ++k) {
    Individual ind{fixed_, 0.0};
    for (size_t g : evolved_) {
      const auto it = given[k].find(meta_[g].name);
      if (it == given[k].end() || !std::isfinite(it->second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("evolve: given individual ", k,
                         " has no number for evolved gene '", meta_[g].name, "'"));
      }
      ind.genes[g] = Clip(g, it->second);  // fix 6
    }
    population.push_back(std::move(ind));
  }
  while (population.size() < size) {
    Individual ind{fixed_, 0.0};
    for (size_t g : evolved_) ind.genes[g] = rng_.Uniform(meta_[g].lower, meta_[g].upper);
    population.push_back(std::move(ind));
  }
  return population;
}

absl::StatusOr<std::vector<Individual>> Evolution::NextGeneration(
    const std::vector<Individual>& evaluated, int generation, int generations) {
  const int size = options_.population;
  if (evaluated.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("evolve: ", evaluated.size(),
                     " individuals evaluated; the population is ", size));
  }
  if (generation < 0 || generation >= generations) {
    return absl::InvalidArgumentError(absl::StrCat("evolve: generation ", generation,
                                                   " is outside [0, ", generations, ")"));
  }
  for (int i = 0; i < size; ++i) {
    if (evaluated[i].genes.size() != meta_.size() ||
        !std::isfinite(evaluated[i].fitness)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "evolve: individual ", i, " has ", evaluated[i].genes.size(), " genes (want ",
          meta_.size(), ") and fitness ", evaluated[i].fitness,
          " (want a finite number; 0 for a failed training)"));
    }
  }
  // Fix 1: the best is taken from the evaluated individuals.
  for (const Individual& ind : evaluated) {
    if (!best_ || ind.fitness > best_->fitness) {
      best_ = ind;
      best_generation_ = generation;
    }
  }

  const GenerationRates rates = RatesAt(options_, generation, generations);
  // The parents' pool: tournament winners, then the elite.
  std::vector<int> selected;
  std::vector<int> order(size);
  for (int t = 0; t < size - rates.elite_size; ++t) {
    // random.sample(range(size), k): a partial Fisher-Yates shuffle.
    std::iota(order.begin(), order.end(), 0);
    for (int i = 0; i < rates.tournament_size; ++i) {
      std::swap(order[i], order[rng_.IntIn(i, size - 1)]);
    }
    int winner = order[0];  // the first of the highest, as list.index(max)
    for (int i = 1; i < rates.tournament_size; ++i) {
      if (evaluated[order[i]].fitness > evaluated[winner].fitness) winner = order[i];
    }
    selected.push_back(winner);
  }
  // Fix 5: exactly elite_size elites, ties to the lower index.
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return evaluated[a].fitness > evaluated[b].fitness;
  });
  std::vector<int> elite(order.begin(), order.begin() + rates.elite_size);
  std::sort(elite.begin(), elite.end());
  selected.insert(selected.end(), elite.begin(), elite.end());

  std::vector<Individual> next;
  const int genes = static_cast<int>(evolved_.size());
  for (int c = 0; c < size; ++c) {
    const Individual& p1 = evaluated[selected[rng_.IntIn(0, size - 1)]];
    const Individual& p2 = evaluated[selected[rng_.IntIn(0, size - 1)]];
    Individual child{p1.genes, 0.0};  // fix 4: a copy, never the parent itself
    // randint(1, genes - 1) needs two genes; with one, crossover is a copy.
    if (rng_.Uniform(0, 1) < rates.crossover_rate && genes >= 2) {
      const int point = static_cast<int>(rng_.IntIn(1, genes - 1));
      for (int j = point; j < genes; ++j)
        child.genes[evolved_[j]] = p2.genes[evolved_[j]];
    }
    for (size_t g : evolved_) {
      if (rng_.Uniform(0, 1) < rates.mutation_rate) {
        child.genes[g] += rng_.Uniform(-options_.mutation_step, options_.mutation_step);
        child.genes[g] = Clip(g, child.genes[g]);
      }
    }
    for (size_t g = 0; g < meta_.size(); ++g) {
      if (!meta_[g].evolve) child.genes[g] = fixed_[g];
    }
    next.push_back(std::move(child));
  }
  return next;
}

std::map<std::string, double> Evolution::Named(const Individual& individual) const {
  std::map<std::string, double> named;
  for (size_t g = 0; g < meta_.size() && g < individual.genes.size(); ++g) {
    named[meta_[g].name] = individual.genes[g];
  }
  return named;
}

}  // namespace elastrun::evolve
