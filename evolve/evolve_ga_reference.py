#!/usr/bin/env python3
"""Seed 002 §5.4's genetic algorithm (YOLOv5 train.py --evolve), transcribed
line for line, for evolve_ga_test.cc to check evolve/evolve_ga.cc against.

What differs from the seed, and only this:
  - `random` is replaced by Rng, a transcription of evolve_ga.cc's seeded
    xoshiro256** (random.uniform -> rng.uniform, random.randint ->
    rng.randint, random.sample -> rng.sample: a partial Fisher-Yates), so
    both consume the same draws in the same order (fix 3);
  - train() is replaced by a fitness function of the genes (test_fitness,
    also written in the test), standing in for the weighted fitness (fix 2);
  - the fixes named in evolve_ga.h: best is the best *evaluated* individual
    (1), a child is a copy of its parent (4), exactly elite_size elites,
    ties to the lower index (5), given individuals clipped, tournament and
    elite capped by the population (6). Each is marked `# fix N`.

Usage: evolve_ga_reference.py SPEC.json. SPEC: {seed, meta: [{name, evolve,
lower, upper}], base: {name: value}, options: {GaOptions' fields},
given: [{name: value}], generations, fitness: "linear" | "coarse"}.
Prints {populations: [[genes per individual] per generation, the initial
one first], best, best_fitness, best_generation} as JSON.
"""
import json
import math
import sys

M64 = (1 << 64) - 1


class Rng:
    """xoshiro256** seeded through splitmix64, as evolve_ga.cc's Rng."""

    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        result = (self.rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self.rotl(s[3], 45)
        return result

    def random(self):
        return (self.next() >> 11) * 2.0**-53

    def uniform(self, a, b):
        return a + (b - a) * self.random()

    def randint(self, lo, hi):
        n = hi - lo + 1
        threshold = (1 << 64) % n
        while True:
            x = self.next()
            if x >= threshold:
                return lo + x % n

    def sample(self, population_range, k):
        order = list(population_range)
        for i in range(k):
            j = self.randint(i, len(order) - 1)
            order[i], order[j] = order[j], order[i]
        return order[:k]


def test_fitness(index, genes, mode):
    """The test's stand-in for train(): written the same in evolve_ga_test.cc."""
    if index % 7 == 3:
        return 0.0  # a failed training
    f = 0.0
    for j, v in enumerate(genes):
        f += ((j % 3) + 1) * v
    return math.floor(f) if mode == "coarse" else f


def main():
    spec = json.load(open(sys.argv[1]))
    random = Rng(spec["seed"])
    o = spec["options"]
    pop_size = o["population"]
    mutation_rate_min, mutation_rate_max = o["mutation_rate_min"], o["mutation_rate_max"]
    crossover_rate_min, crossover_rate_max = o["crossover_rate_min"], o["crossover_rate_max"]
    min_elite_size, max_elite_size = o["elite_min"], o["elite_max"]
    tournament_size_min, tournament_size_max = o["tournament_min"], o["tournament_max"]
    step = o["mutation_step"]
    evolve = spec["generations"]

    meta = {m["name"]: (m["evolve"], m["lower"], m["upper"]) for m in spec["meta"]}
    hyp = {k: spec["base"].get(k, 0.0) for k in meta}
    hyp_GA = {k: v for k, v in hyp.items() if meta[k][0]}
    keys = list(meta.keys())
    lower_limit = [meta[k][1] for k in hyp_GA.keys()]
    upper_limit = [meta[k][2] for k in hyp_GA.keys()]
    gene_ranges = [(lower_limit[i], upper_limit[i]) for i in range(len(upper_limit))]

    def generate_individual(input_ranges, individual_length):
        return [random.uniform(*input_ranges[i]) for i in range(individual_length)]

    def clip(j, v):
        return min(max(v, gene_ranges[j][0]), gene_ranges[j][1])

    initial_values = [[clip(j, g[k]) for j, k in enumerate(hyp_GA.keys())]  # fix 6
                      for g in spec["given"]]
    population = [generate_individual(gene_ranges, len(hyp_GA))
                  for _ in range(pop_size - len(initial_values))]
    population = initial_values + population  # given ones first, in order

    def full(individual):  # hyp.update(hyp_GA): every gene, in meta order
        hyp.update(dict(zip(hyp_GA.keys(), individual)))
        return [hyp[k] for k in keys]

    populations = [[full(ind) for ind in population]]
    best, best_fitness, best_generation = None, None, -1
    for generation in range(evolve):
        elite_size = min_elite_size + int((max_elite_size - min_elite_size) * (generation / evolve))
        elite_size = min(elite_size, pop_size)  # fix 6

        fitness_scores = [test_fitness(i, full(ind), spec["fitness"])
                          for i, ind in enumerate(population)]
        for i, f in enumerate(fitness_scores):  # fix 1
            if best is None or f > best_fitness:
                best, best_fitness, best_generation = full(population[i]), f, generation

        selected_indices = []
        for _ in range(pop_size - elite_size):
            tournament_size = max(
                max(2, tournament_size_min),
                int(min(tournament_size_max, pop_size) - (generation / (evolve / 10))),
            )
            tournament_size = min(tournament_size, pop_size)  # fix 6
            tournament_indices = random.sample(range(pop_size), tournament_size)
            tournament_fitness = [fitness_scores[j] for j in tournament_indices]
            winner_index = tournament_indices[tournament_fitness.index(max(tournament_fitness))]
            selected_indices.append(winner_index)

        # fix 5: exactly elite_size, ties to the lower index, in index order
        ranked = sorted(range(pop_size), key=lambda i: (-fitness_scores[i], i))
        elite_indices = sorted(ranked[:elite_size])
        selected_indices.extend(elite_indices)

        next_generation = []
        for _ in range(pop_size):
            parent1_index = selected_indices[random.randint(0, pop_size - 1)]
            parent2_index = selected_indices[random.randint(0, pop_size - 1)]
            crossover_rate = max(
                crossover_rate_min, min(crossover_rate_max, crossover_rate_max - (generation / evolve))
            )
            if random.uniform(0, 1) < crossover_rate and len(hyp_GA) >= 2:
                crossover_point = random.randint(1, len(hyp_GA) - 1)
                child = population[parent1_index][:crossover_point] + population[parent2_index][crossover_point:]
            else:
                child = list(population[parent1_index])  # fix 4: a copy
            mutation_rate = max(
                mutation_rate_min, min(mutation_rate_max, mutation_rate_max - (generation / evolve))
            )
            for j in range(len(hyp_GA)):
                if random.uniform(0, 1) < mutation_rate:
                    child[j] += random.uniform(-step, step)
                    child[j] = min(max(child[j], gene_ranges[j][0]), gene_ranges[j][1])
            next_generation.append(child)
        population = next_generation
        populations.append([full(ind) for ind in population])

    json.dump({"populations": populations, "best": best, "best_fitness": best_fitness,
               "best_generation": best_generation}, sys.stdout)


if __name__ == "__main__":
    main()
