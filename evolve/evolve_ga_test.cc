#include "evolve/evolve_ga.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/test_files.h"

namespace elastrun::evolve {
namespace {

using ::elastrun::trainer::testing::RunCommand;
using ::elastrun::trainer::testing::TestDir;
using ::testing::HasSubstr;

// The fixed genes' values: the middle of their bounds.
std::map<std::string, double> Base(const std::vector<GeneBound>& meta) {
  std::map<std::string, double> base;
  for (const GeneBound& g : meta) {
    if (!g.evolve) base[g.name] = (g.lower + g.upper) / 2;
  }
  return base;
}

// The stand-in for a training, written the same in evolve_ga_reference.py's
// test_fitness: every 7th individual from the 4th fails (0), the others a
// weighted sum of their genes, floored in "coarse" mode (many ties).
double TestFitness(int index, const std::vector<double>& genes, bool coarse) {
  if (index % 7 == 3) return 0.0;
  double f = 0.0;
  for (size_t j = 0; j < genes.size(); ++j)
    f += static_cast<double>((j % 3) + 1) * genes[j];
  return coarse ? std::floor(f) : f;
}

std::unique_ptr<Evolution> MakeEvolution(const std::vector<GeneBound>& meta,
                                         const GaOptions& options, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<Evolution>> e =
      Evolution::Create(meta, Base(meta), options, seed);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// The populations of a run of `generations`, the initial one first.
std::vector<std::vector<Individual>> Evolve(
    Evolution& e, const GaOptions& options,
    const std::vector<std::map<std::string, double>>& given, int generations,
    bool coarse) {
  std::vector<std::vector<Individual>> populations;
  absl::StatusOr<std::vector<Individual>> population = e.InitialPopulation(given);
  EXPECT_TRUE(population.ok()) << population.status();
  if (!population.ok()) return populations;
  for (int g = 0; g < generations; ++g) {
    populations.push_back(*population);
    for (int i = 0; i < options.population; ++i) {
      (*population)[i].fitness = TestFitness(i, (*population)[i].genes, coarse);
    }
    population = e.NextGeneration(*population, g, generations);
    EXPECT_TRUE(population.ok()) << population.status();
    if (!population.ok()) return populations;
  }
  populations.push_back(*population);
  return populations;
}

struct ReferenceCase {
  std::string label;
  std::vector<GeneBound> meta;
  GaOptions options;
  uint64_t seed;
  int generations;
  bool coarse;
  std::vector<std::map<std::string, double>> given;
};

void ExpectMatchesReference(const ReferenceCase& c) {
  SCOPED_TRACE(c.label);
  nlohmann::json spec;
  spec["seed"] = c.seed;
  for (const GeneBound& g : c.meta) {
    spec["meta"].push_back(
        {{"name", g.name}, {"evolve", g.evolve}, {"lower", g.lower}, {"upper", g.upper}});
  }
  spec["base"] = Base(c.meta);
  const GaOptions& o = c.options;
  spec["options"] = {{"population", o.population},
                     {"mutation_rate_min", o.mutation_rate_min},
                     {"mutation_rate_max", o.mutation_rate_max},
                     {"crossover_rate_min", o.crossover_rate_min},
                     {"crossover_rate_max", o.crossover_rate_max},
                     {"elite_min", o.elite_min},
                     {"elite_max", o.elite_max},
                     {"tournament_min", o.tournament_min},
                     {"tournament_max", o.tournament_max},
                     {"mutation_step", o.mutation_step}};
  spec["given"] = nlohmann::json::array();
  for (const auto& g : c.given) spec["given"].push_back(g);
  spec["generations"] = c.generations;
  spec["fitness"] = c.coarse ? "coarse" : "linear";
  const std::string path = absl::StrCat(TestDir(), "/", c.label, ".json");
  std::ofstream(path) << spec.dump();

  int status = 0;
  const std::string out = RunCommand(
      absl::StrCat("/usr/bin/python3 ", ELASTRUN_EVOLVE_GA_REFERENCE, " ", path),
      &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json ref = nlohmann::json::parse(out);

  std::unique_ptr<Evolution> e = MakeEvolution(c.meta, o, c.seed);
  ASSERT_NE(e, nullptr);
  const auto ours = Evolve(*e, o, c.given, c.generations, c.coarse);
  ASSERT_EQ(ours.size(), ref["populations"].size());
  for (size_t g = 0; g < ours.size(); ++g) {
    ASSERT_EQ(ours[g].size(), ref["populations"][g].size()) << "generation " << g;
    for (size_t i = 0; i < ours[g].size(); ++i) {
      // Exact: the same draws and the same double operations.
      ASSERT_EQ(ours[g][i].genes, ref["populations"][g][i].get<std::vector<double>>())
          << "generation " << g << " individual " << i;
    }
  }
  ASSERT_TRUE(e->best().has_value());
  EXPECT_EQ(e->best()->genes, ref["best"].get<std::vector<double>>());
  EXPECT_EQ(e->best()->fitness, ref["best_fitness"].get<double>());
  EXPECT_EQ(e->best_generation(), ref["best_generation"].get<int>());
}

TEST(EvolveGaTest, MatchesTheSeedsTranscriptionGenerationAfterGeneration) {
  if (!std::filesystem::exists("/usr/bin/python3")) {
    GTEST_SKIP() << "no /usr/bin/python3 to run evolve_ga_reference.py";
  }
  GaOptions small;
  small.population = 12;
  // A given individual outside the bounds (clipped) and one inside.
  std::map<std::string, double> far, near;
  for (const GeneBound& g : DefaultMeta()) {
    far[g.name] = g.upper + 5;
    near[g.name] = (g.lower + g.upper) / 3;
  }
  ExpectMatchesReference({"linear", DefaultMeta(), small, 7, 30, false, {far, near}});
  ExpectMatchesReference({"coarse_ties", DefaultMeta(), small, 11, 30, true, {}});
  GaOptions seeds = GaOptions{};  // the seed's settings, 50 individuals
  ExpectMatchesReference({"seed_settings", DefaultMeta(), seeds, 3, 12, false, {near}});
  // One evolved gene (no crossover point), a tournament above the population.
  GaOptions tiny;
  tiny.population = 3;
  tiny.tournament_min = 6;
  tiny.elite_min = 4;
  tiny.elite_max = 5;
  ExpectMatchesReference(
      {"tiny", {{"a", true, -1, 1}, {"b", false, 0, 2}}, tiny, 5, 10, false, {}});
  GaOptions two;
  two.population = 6;
  two.mutation_step = 3;
  ExpectMatchesReference({"two_genes_big_steps",
                          {{"a", true, -1, 1}, {"b", true, 0, 0.5}, {"c", false, 0, 2}},
                          two,
                          9,
                          40,
                          true,
                          {}});
}

TEST(EvolveGaTest, BoundsHeldAndFixedGenesUnchangedOver50Generations) {
  for (double step : {0.1, 10.0}) {
    GaOptions o;
    o.population = 20;
    o.mutation_step = step;
    const std::vector<GeneBound> meta = DefaultMeta();
    const std::map<std::string, double> base = Base(meta);
    std::unique_ptr<Evolution> e = MakeEvolution(meta, o, 42);
    ASSERT_NE(e, nullptr);
    Rng fitness_rng(99);
    std::map<std::string, double> outside;
    for (const GeneBound& g : meta) outside[g.name] = g.lower - 1;
    absl::StatusOr<std::vector<Individual>> population = e->InitialPopulation({outside});
    ASSERT_TRUE(population.ok()) << population.status();
    for (int gen = 0; gen <= 50; ++gen) {
      for (size_t i = 0; i < population->size(); ++i) {
        const Individual& ind = (*population)[i];
        ASSERT_EQ(ind.genes.size(), meta.size());
        for (size_t g = 0; g < meta.size(); ++g) {
          ASSERT_GE(ind.genes[g], meta[g].lower) << meta[g].name << " gen " << gen;
          ASSERT_LE(ind.genes[g], meta[g].upper) << meta[g].name << " gen " << gen;
          if (!meta[g].evolve) {
            ASSERT_EQ(ind.genes[g], base.at(meta[g].name));
          }
        }
      }
      if (gen == 50) break;
      for (Individual& ind : *population) ind.fitness = fitness_rng.Uniform01();
      population = e->NextGeneration(*population, gen, 50);
      ASSERT_TRUE(population.ok()) << population.status();
    }
  }
}

TEST(EvolveGaTest, SameSeedSamePopulationsOtherSeedDifferent) {
  GaOptions o;
  o.population = 10;
  std::unique_ptr<Evolution> a = MakeEvolution(DefaultMeta(), o, 1);
  std::unique_ptr<Evolution> b = MakeEvolution(DefaultMeta(), o, 1);
  std::unique_ptr<Evolution> c = MakeEvolution(DefaultMeta(), o, 2);
  const auto pa = Evolve(*a, o, {}, 8, false);
  const auto pb = Evolve(*b, o, {}, 8, false);
  const auto pc = Evolve(*c, o, {}, 8, false);
  ASSERT_EQ(pa.size(), 9u);
  for (size_t g = 0; g < pa.size(); ++g) {
    for (size_t i = 0; i < pa[g].size(); ++i) {
      EXPECT_EQ(pa[g][i].genes, pb[g][i].genes)
          << "generation " << g << " individual " << i;
    }
  }
  EXPECT_NE(pa[0][0].genes, pc[0][0].genes);
  EXPECT_NE(pa.back()[0].genes, pc.back()[0].genes);
}

TEST(EvolveGaTest, BestIsTheBestEvaluatedIndividual) {
  GaOptions o;
  o.population = 8;
  std::unique_ptr<Evolution> e = MakeEvolution(DefaultMeta(), o, 5);
  absl::StatusOr<std::vector<Individual>> population = e->InitialPopulation({});
  ASSERT_TRUE(population.ok());
  EXPECT_FALSE(e->best().has_value());
  for (int i = 0; i < o.population; ++i)
    (*population)[i].fitness = i == 5 ? 0.9 : 0.1 * (i % 3);
  const std::vector<Individual> evaluated = *population;
  absl::StatusOr<std::vector<Individual>> next = e->NextGeneration(evaluated, 0, 10);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(e->best().has_value());
  EXPECT_EQ(e->best()->genes, evaluated[5].genes);
  EXPECT_EQ(e->best()->fitness, 0.9);
  EXPECT_EQ(e->best_generation(), 0);
  // The seed's pick, population[argmax] after the replacement, is a child.
  EXPECT_NE((*next)[5].genes, evaluated[5].genes);

  // A worse generation keeps the best; a better one replaces it.
  for (Individual& ind : *next) ind.fitness = 0.5;
  const std::vector<Individual> second = *next;
  next = e->NextGeneration(second, 1, 10);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(e->best()->genes, evaluated[5].genes);
  for (Individual& ind : *next) ind.fitness = 0.5;
  (*next)[2].fitness = 0.95;
  const std::vector<Individual> third = *next;
  ASSERT_TRUE(e->NextGeneration(third, 2, 10).ok());
  EXPECT_EQ(e->best()->genes, third[2].genes);
  EXPECT_EQ(e->best_generation(), 2);
}

TEST(EvolveGaTest, WeightedFitnessNotMapAtHalfAlone) {
  const std::map<std::string, double> a = {{"metrics/precision", 0.9},
                                           {"metrics/mAP_0.5", 0.7},
                                           {"metrics/mAP_0.5:0.95", 0.3}};
  const std::map<std::string, double> b = {{"metrics/precision", 0.1},
                                           {"metrics/mAP_0.5", 0.6},
                                           {"metrics/mAP_0.5:0.95", 0.4}};
  absl::StatusOr<double> fa = WeightedFitness(a, FitnessWeights{});
  absl::StatusOr<double> fb = WeightedFitness(b, FitnessWeights{});
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_DOUBLE_EQ(*fa, 0.1 * 0.7 + 0.9 * 0.3);
  EXPECT_DOUBLE_EQ(*fb, 0.1 * 0.6 + 0.9 * 0.4);
  EXPECT_GT(*fb, *fa);  // the seed's mAP@0.5 ranks a first

  FitnessWeights precision{{{"metrics/precision", 1.0}}};
  EXPECT_DOUBLE_EQ(*WeightedFitness(a, precision), 0.9);

  absl::StatusOr<double> missing =
      WeightedFitness({{"metrics/mAP_0.5", 0.5}}, FitnessWeights{});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("metrics/mAP_0.5:0.95"));
  EXPECT_FALSE(WeightedFitness({{"metrics/mAP_0.5", NAN}, {"metrics/mAP_0.5:0.95", 0.1}},
                               FitnessWeights{})
                   .ok());
}

TEST(EvolveGaTest, RatesFollowTheSeed) {
  GaOptions o;  // the seed's settings, 300 generations
  GenerationRates r = RatesAt(o, 0, 300);
  EXPECT_EQ(r.elite_size, 2);
  EXPECT_EQ(r.tournament_size, 10);
  EXPECT_EQ(r.crossover_rate, 1.0);
  EXPECT_EQ(r.mutation_rate, 0.5);
  r = RatesAt(o, 150, 300);
  EXPECT_EQ(r.elite_size, 3);
  EXPECT_EQ(r.tournament_size, 5);
  EXPECT_EQ(r.crossover_rate, 0.5);
  EXPECT_EQ(r.mutation_rate, 0.01);
  r = RatesAt(o, 299, 300);
  EXPECT_EQ(r.elite_size, 4);
  EXPECT_EQ(r.tournament_size, 2);
  o.population = 3;
  r = RatesAt(o, 0, 300);
  EXPECT_EQ(r.tournament_size, 3);  // capped by the population
}

TEST(EvolveGaTest, RejectsBadMetaOptionsAndIndividuals) {
  const std::map<std::string, double> base = {{"b", 1}};
  GaOptions o;
  EXPECT_THAT(Evolution::Create({{"a", true, 0, 1}, {"a", true, 0, 1}}, base, o, 1)
                  .status()
                  .message(),
              HasSubstr("listed twice"));
  EXPECT_THAT(Evolution::Create({{"a", true, 2, 1}}, base, o, 1).status().message(),
              HasSubstr("'a' has bounds"));
  EXPECT_THAT(Evolution::Create({{"c", false, 0, 1}}, base, o, 1).status().message(),
              HasSubstr("'c' does not evolve"));
  o.population = 1;
  EXPECT_THAT(Evolution::Create({{"a", true, 0, 1}}, base, o, 1).status().message(),
              HasSubstr("population"));
  o.population = 2;
  o.elite_min = 6;
  EXPECT_THAT(Evolution::Create({{"a", true, 0, 1}}, base, o, 1).status().message(),
              HasSubstr("elite_min"));

  o = GaOptions{};
  o.population = 2;
  auto e = Evolution::Create({{"a", true, 0, 1}, {"b", false, 0, 2}}, base, o, 1);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT((*e)->InitialPopulation({{{"a", 0.5}}, {{"a", 0.5}}, {{"a", 0.5}}})
                  .status()
                  .message(),
              HasSubstr("3 individuals given for a population of 2"));
  EXPECT_THAT((*e)->InitialPopulation({{{"b", 0.5}}}).status().message(),
              HasSubstr("no number for evolved gene 'a'"));
  absl::StatusOr<std::vector<Individual>> p = (*e)->InitialPopulation({{{"a", 0.25}}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].genes, (std::vector<double>{0.25, 1.0}));
  EXPECT_EQ((*e)->Named((*p)[0]),
            (std::map<std::string, double>{{"a", 0.25}, {"b", 1.0}}));
  (*p)[1].fitness = NAN;
  EXPECT_FALSE((*e)->NextGeneration(*p, 0, 3).ok());
  (*p)[1].fitness = 0;
  EXPECT_FALSE((*e)->NextGeneration(*p, 3, 3).ok());
  p->pop_back();
  EXPECT_FALSE((*e)->NextGeneration(*p, 0, 3).ok());
}

TEST(EvolveGaTest, RngDrawsInRange) {
  Rng rng(123);
  int counts[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 5000; ++i) {
    const double u = rng.Uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const int64_t k = rng.IntIn(-2, 2);
    ASSERT_GE(k, -2);
    ASSERT_LE(k, 2);
    ++counts[k + 2];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
  EXPECT_NE(Rng(1).Next(), Rng(2).Next());
}

}  // namespace
}  // namespace elastrun::evolve
