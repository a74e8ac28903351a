#!/usr/bin/env python3
"""`elastrun evolve`: parallel efficiency and search quality.

Part 1, parallel efficiency. One generation of 8 individuals with K = 1, 2,
4 at once (`--parallel K`), on this machine (each individual an `elastrun
run`) and on a cluster (a real elastrun-rendezvous and one elastrund of 4
slots on loopback: each individual a job). Two ratios:
  - vs 8 x one alone: 8 * t_one / (K * t_generation), where t_one is one
    individual trained alone (`elastrun run`; on the cluster one job's
    submit-to-finish time as the service records it): the issue's
    parallel efficiency, 100% when K at once take 1/K of the time.
  - vs 8/K x K by hand: 8 * t_K / (K * t_generation), where t_K is K
    individuals started at once by hand, without evolve (K `elastrun run`
    at once; K jobs submitted at once, first submit to last finish): what
    evolve itself loses, with the machine's own slowdown under K
    trainings at once taken out.
Each t_one and t_K is the median of --repeat tries. Two programs:
  - sleep: a shell individual that sleeps --sleep seconds and writes its
    metric to $ELASTRUN_RESULTS. It uses no CPU: every K within the slots
    can reach 100% on both ratios.
  - train: elastrun-train, the classifier, one epoch of Fashion-MNIST on
    one thread, every individual with the config's hyperparameters (one
    gene evolved in a range too narrow to change the cost). CPU bound: K is
    capped at this machine's cores, and two trainings at once on its two
    cores each run slower than one alone.

Part 2, search quality. The same objective for three searches with the
same budget of trainings: elastrun-train, the classifier, one epoch of
Fashion-MNIST, its test accuracy as a function of optimizer.lr0,
optimizer.momentum and optimizer.weight_decay (uniform in the bounds of
META below). The seed's GA (`elastrun evolve`, generations of 8), random
search (`elastrun evolve --generations 1`: the GA's first generation is
uniform within the bounds) and Optuna's TPE (python3-optuna's
TPESampler, each trial the same `elastrun run elastrun-train ...` with
the trial's values as overrides). The best test accuracy after each 8
trainings, the mean (and range) over --seeds rounds; each search's own
seed is the round's.

Standard library only, but Optuna for its row (skipped with a message
when /usr/bin/python3 cannot import it). See bench/README.md.
"""

import argparse
import csv
import datetime
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "fashion_mnist_mlp.yaml")
META = {
    "optimizer.lr0": (1e-4, 0.2),
    "optimizer.momentum": (0.5, 0.98),
    "optimizer.weight_decay": (0.0, 0.001),
}
SLEEP_PROGRAM = ('sleep {s}; printf \'{{"score": 1}}\\n\' > "$ELASTRUN_RESULTS"')


def run(argv, env=None, check=True):
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    wall = time.monotonic() - t0
    if check and p.returncode != 0:
        sys.exit(f"evolve_bench: {' '.join(argv[:4])}... exited {p.returncode}:\n"
                 f"{p.stdout[-3000:]}")
    return wall, p.stdout


class Cluster:
    """elastrun-rendezvous and one elastrund of `slots` slots on loopback."""

    def __init__(self, bindir, work, slots):
        self.work = work
        os.makedirs(work)
        self.token_file = os.path.join(work, "token")
        with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(secrets.token_hex(16))
        self.service = subprocess.Popen(
            [os.path.join(bindir, "elastrun-rendezvous"), "--listen", "127.0.0.1:0",
             "--state-dir", os.path.join(work, "state"), "--token-file", self.token_file],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.address = None
        for line in self.service.stdout:
            if "listening on " in line:
                self.address = line.split("listening on ", 1)[1].strip()
                break
        if not self.address:
            sys.exit("evolve_bench: elastrun-rendezvous did not start")
        self.daemon = subprocess.Popen(
            [os.path.join(bindir, "elastrund"), "--rendezvous", self.address, "--node-id",
             "bench0", "--slots", str(slots), "--state-dir", os.path.join(work, "dstate"),
             "--log-dir", os.path.join(work, "dlogs"), "--token-file", self.token_file,
             "--cred-socket", os.path.join(work, "cred.sock")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.flags = ["--rendezvous", self.address, "--token-file", self.token_file]
        # Registered once `elastrun nodes` lists the node.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            p = subprocess.run([os.path.join(bindir, "elastrun"), "nodes"] + self.flags,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if "bench0" in p.stdout and "ALIVE" in p.stdout:
                return
            time.sleep(0.2)
        sys.exit("evolve_bench: elastrund did not register")

    def stop(self):
        for p in (self.daemon, self.service):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=60)


def write_meta(path):
    with open(path, "w") as f:
        for name, (lo, hi) in META.items():
            f.write(f"{name}: [true, {lo}, {hi}]\n")


def evolve_argv(a, out, population, generations, parallel, meta, fitness, program,
                extra=()):
    return ([os.path.join(a.bindir, "elastrun"), "evolve", "--population", str(population),
             "--generations", str(generations), "--parallel", str(parallel), "--seed",
             str(a.seed), "--meta", meta, "--fitness", fitness, "--output-dir", out]
            + list(extra) + ["--"] + program)


def train_program(a, output_dir=None):
    argv = [os.path.join(a.bindir, "elastrun-train"), "--config", CONFIG, "train.epochs=1",
            "train.threads=1"]
    if output_dir:
        argv.append(f"train.output_dir={output_dir}")
    return argv


def job_seconds(a, job, extra):
    """(submit, finish) of a finished job as the service recorded them."""
    run([os.path.join(a.bindir, "elastrun"), "wait", job] + extra)
    _, status = run([os.path.join(a.bindir, "elastrun"), "status", job, "--output", "json"]
                    + extra)
    st = json.loads(status)
    return (datetime.datetime.fromisoformat(st["submit_time"]).timestamp(),
            datetime.datetime.fromisoformat(st["finish_time"]).timestamp())


def k_by_hand(a, where, progs, extra):
    """Seconds for K individuals started at once by hand, without evolve:
    K `elastrun run` at once, or K jobs submitted at once (first submit to
    last finish, as the service recorded them)."""
    if where == "local":
        t0 = time.monotonic()
        ps = [subprocess.Popen([os.path.join(a.bindir, "elastrun"), "run", "--nproc-per-node",
                                "1"] + prog, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for prog, env in progs]
        if any(p.wait() != 0 for p in ps):
            sys.exit("evolve_bench: an individual started by hand failed")
        return time.monotonic() - t0
    jobs = []
    for prog, env in progs:
        _, printed = run([os.path.join(a.bindir, "elastrun"), "submit", "--name", "bench-k"]
                         + extra + ["--"] + prog, env=env)
        jobs.append(printed.strip().splitlines()[0])
    times = [job_seconds(a, job, extra) for job in jobs]
    return max(f for _, f in times) - min(s for s, _ in times)


def part1(a, work):
    rows = []
    meta_sleep = os.path.join(work, "meta_sleep.yaml")
    with open(meta_sleep, "w") as f:
        f.write("x: [true, 0.0, 1.0]\n")
    # Part 1's trainings all cost what the one trained alone costs: one gene
    # in a range too narrow to change the training (the search space of
    # part 2 gives individuals of different speeds: a diverging lr runs
    # slower, which is not evolve's doing).
    meta_train = os.path.join(work, "meta_train.yaml")
    with open(meta_train, "w") as f:
        f.write("optimizer.weight_decay: [true, 0.0005, 0.0005001]\n")
    sleep_program = ["/bin/sh", "-c", SLEEP_PROGRAM.format(s=a.sleep)]
    cluster = Cluster(a.bindir, os.path.join(work, "cluster"), slots=4)
    count = iter(range(1_000_000))

    def individual(where, name, program):
        d = os.path.join(work, f"one_{where}_{name}_{next(count)}")
        os.makedirs(d)
        env = dict(os.environ, ELASTRUN_RESULTS=os.path.join(d, "r.json"))
        return (program if name == "sleep" else train_program(a, d)), env

    try:
        for where in a.where.split(","):
            extra = cluster.flags if where == "cluster" else []
            for name, program, meta, fitness, ks in (
                    ("sleep", sleep_program, meta_sleep, "score=1", (1, 2, 4)),
                    ("train", train_program(a), meta_train, "test_acc=1",
                     tuple(k for k in (1, 2, 4) if k <= (os.cpu_count() or 1)))):
                for k in ks:
                    # K individuals at once by hand (K = 1: one alone), as
                    # the generation would start them: the median of
                    # --repeat tries (one training's time varies by ~10%).
                    batch = statistics.median(
                        k_by_hand(a, where, [individual(where, name, program)
                                             for _ in range(k)], extra)
                        for _ in range(a.repeat))
                    if k == 1:
                        t_one = batch
                    out = os.path.join(work, f"gen_{where}_{name}_{k}")
                    t_gen, _ = run(evolve_argv(a, out, 8, 1, k, meta, fitness, program,
                                               extra))
                    rows.append((where, name, k, t_one, batch, t_gen))
                    print(f"  {where:7s} {name:5s} K={k}: one {t_one:.2f} s, {k} by hand "
                          f"{batch:.2f} s, generation {t_gen:.2f} s", flush=True)
    finally:
        cluster.stop()
    print("\n| where | individual | K | one alone (s) | K at once by hand (s) "
          "| generation of 8 (s) | vs 8 x one alone | vs 8/K x K by hand |")
    print("|---|---|---|---|---|---|---|---|")
    for where, name, k, t_one, batch, t_gen in rows:
        print(f"| {where} | {name} | {k} | {t_one:.2f} | {batch:.2f} | {t_gen:.1f} | "
              f"{100 * 8 * t_one / (k * t_gen):.0f}% | {100 * 8 * batch / (k * t_gen):.0f}% |")


def best_after(values, step):
    """The best so far after every `step` values."""
    out, best = [], float("-inf")
    for i, v in enumerate(values, 1):
        best = max(best, v)
        if i % step == 0:
            out.append(best)
    return out


def evolve_fitness(out):
    with open(os.path.join(out, "evolve.csv")) as f:
        rows = list(csv.DictReader(f))
    # Generation by generation, each in the order it finished.
    rows.sort(key=lambda r: int(r["generation"]))
    return [float(r["fitness"]) for r in rows]


OPTUNA_DRIVER = r"""
import json, os, subprocess, sys
import optuna
a = json.loads(sys.argv[1])
optuna.logging.set_verbosity(optuna.logging.WARNING)
def objective(trial):
    out = os.path.join(a["work"], f"trial_{trial.number}")
    over = [f"{k}={trial.suggest_float(k, lo, hi)!r}" for k, (lo, hi) in a["meta"].items()]
    p = subprocess.run([a["elastrun"], "run", "--nproc-per-node", "1"] + a["program"] + over
                       + [f"train.output_dir={out}"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if p.returncode != 0:
        return 0.0
    with open(os.path.join(out, "metrics.csv")) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    head = lines[0].split(",")
    return float(lines[-1].split(",")[head.index("test_acc")])
study = optuna.create_study(direction="maximize",
                            sampler=optuna.samplers.TPESampler(seed=a["seed"]))
study.optimize(objective, n_trials=a["trials"], n_jobs=a["parallel"])
trials = sorted(study.trials, key=lambda t: t.datetime_complete)
print(json.dumps([t.value for t in trials]))
"""


def one_search_round(a, work, seed):
    """{search: best-so-far after each 8 trainings} for one seed."""
    meta = os.path.join(work, "meta.yaml")
    write_meta(meta)
    n, gen = a.trainings, 8
    a_seed = argparse.Namespace(**vars(a))
    a_seed.seed = seed
    found = {}
    t0 = time.monotonic()
    out = os.path.join(work, f"ga_{seed}")
    run(evolve_argv(a_seed, out, gen, n // gen, a.parallel, meta, "test_acc=1",
                    train_program(a)))
    found["GA (elastrun evolve)"] = best_after(evolve_fitness(out), gen)
    out = os.path.join(work, f"random_{seed}")
    run(evolve_argv(a_seed, out, n, 1, a.parallel, meta, "test_acc=1", train_program(a)))
    found["random search"] = best_after(evolve_fitness(out), gen)
    check = subprocess.run(["/usr/bin/python3", "-c", "import optuna"],
                           stderr=subprocess.DEVNULL)
    if check.returncode == 0:
        spec = {"work": os.path.join(work, f"tpe_{seed}"), "meta": META, "seed": seed,
                "trials": n, "parallel": a.parallel,
                "elastrun": os.path.join(a.bindir, "elastrun"), "program": train_program(a)}
        _, printed = run(["/usr/bin/python3", "-c", OPTUNA_DRIVER, json.dumps(spec)])
        found["Optuna TPE"] = best_after(json.loads(printed.strip().splitlines()[-1]), gen)
    else:
        print("  Optuna TPE: skipped (/usr/bin/python3 cannot import optuna: "
              "scripts/setup.sh installs python3-optuna)")
    print(f"  seed {seed}: {time.monotonic() - t0:.0f} s: " +
          "; ".join(f"{k} {v[-1]:.4f}" for k, v in found.items()), flush=True)
    return found


def part2(a, work):
    seeds = [int(x) for x in a.seeds.split(",")]
    rounds = [one_search_round(a, work, seed) for seed in seeds]
    steps = list(range(8, a.trainings + 1, 8))
    print(f"\nBest test accuracy after N trainings: the mean over seeds {a.seeds} "
          "(min-max)")
    print("\n| search | " + " | ".join(f"N = {s}" for s in steps) + " |")
    print("|---|" + "---|" * len(steps))
    for name in rounds[0]:
        cells = []
        for i in range(len(steps)):
            v = [r[name][i] for r in rounds]
            cells.append(f"{statistics.mean(v):.4f} ({min(v):.4f}-{max(v):.4f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bindir", default=os.path.join(REPO, "build", "bin"))
    p.add_argument("--sleep", type=float, default=3.0,
                   help="seconds each sleep individual takes (default 3)")
    p.add_argument("--trainings", type=int, default=32,
                   help="part 2's budget per search, a multiple of 8 (default 32)")
    p.add_argument("--parallel", type=int, default=2,
                   help="part 2's trainings at once, every search alike (default 2)")
    p.add_argument("--seed", type=int, default=0, help="part 1's GA seed (default 0)")
    p.add_argument("--seeds", default="0,1,2",
                   help="part 2: one round of the three searches per seed (default 0,1,2)")
    p.add_argument("--repeat", type=int, default=3,
                   help="part 1: runs of one individual alone, their median (default 3)")
    p.add_argument("--part", choices=("1", "2", "all"), default="all")
    p.add_argument("--where", default="local,cluster",
                   help="part 1's modes, comma-separated (default local,cluster)")
    a = p.parse_args()
    if a.trainings % 8 or a.trainings < 8:
        sys.exit("evolve_bench: --trainings must be a multiple of 8")
    for binary in ("elastrun", "elastrun-train", "elastrun-rendezvous", "elastrund"):
        if not os.access(os.path.join(a.bindir, binary), os.X_OK):
            sys.exit(f"evolve_bench: {a.bindir}/{binary} is not built")
    work = tempfile.mkdtemp(prefix="evolve_bench-")
    try:
        print(f"evolve_bench: {os.cpu_count()} cores; work folder {work}", flush=True)
        if a.part in ("1", "all"):
            print("\nPart 1: one generation of 8, K at once", flush=True)
            part1(a, work)
        if a.part in ("2", "all"):
            print(f"\nPart 2: best test accuracy after the same trainings "
                  f"({a.trainings} per search, {a.parallel} at once)", flush=True)
            part2(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
