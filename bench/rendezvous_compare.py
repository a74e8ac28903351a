#!/usr/bin/env python3
"""Rendezvous of N nodes, elastrun beside torchrun's c10d rendezvous, in one run.

Runs `elastrun-rendezvous-bench --scenarios join --state memory` (N simulated
daemons against the real elastrun-rendezvous over gRPC) and
`torch_rendezvous_bench.py` (N agents building torchrun's
DynamicRendezvousHandler over the C10d TCPStore backend) for the same N, one
after the other, and prints one table: the time from the first join to every
node holding its rank, median (min-max) of --reps trials each.

    python3 bench/rendezvous_compare.py --n 10,100 --reps 3
    python3 bench/rendezvous_compare.py --n 10,100,1000 --torch-n 10,100

torchrun's rendezvous polls its shared state once a second, so N=1000 takes
minutes or never finishes (bench/README.md); --torch-n limits its part. Both
benches keep their own deadlines; see their --help for what they measure.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there


def table_rows(text):
    """The rows of the last markdown table in `text`, as lists of cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|--") and not line.startswith("|-"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:] if rows else []  # drop the header


def run(cmd, what):
    print("running: " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):  # 1: some trial failed; its rows say which
        sys.exit("%s exited %d" % (what, p.returncode))
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="10,100", help="node counts (default 10,100)")
    ap.add_argument("--torch-n", help="node counts for torchrun (default: --n)")
    ap.add_argument("--reps", type=int, default=3, help="trials per cell (default 3)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="bound of one torchrun trial in seconds (default 120)")
    ap.add_argument("--bench", default=os.path.join(REPO, "build/bin/elastrun-rendezvous-bench"),
                    help="elastrun-rendezvous-bench (default build/bin/)")
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        sys.exit("no %s: build it first (ninja -C build elastrun-rendezvous-bench)" % args.bench)
    torch_n = args.torch_n or args.n
    ours = run([args.bench, "--n", args.n, "--scenarios", "join", "--state", "memory",
                "--reps", str(args.reps)], "elastrun-rendezvous-bench")
    theirs = ""
    if os.access(TORCH_PYTHON, os.X_OK):
        theirs = run([TORCH_PYTHON, os.path.join(HERE, "torch_rendezvous_bench.py"),
                      "--n", torch_n, "--reps", str(args.reps), "--mode", "threads",
                      "--timeout", str(args.timeout)], "torch_rendezvous_bench.py")
    ours_by_n = {int(r[0]): r[3] for r in table_rows(ours) if r and r[0].isdigit()}
    theirs_by_n = {int(r[0]): r[2] for r in table_rows(theirs) if r and r[0].isdigit()}
    print("\n| N | elastrun join s, median (min-max) | torchrun c10d s, median (min-max) |")
    print("|---:|---|---|")
    for n in sorted(set(ours_by_n) | set(theirs_by_n)):
        print("| %d | %s | %s |" % (n, ours_by_n.get(n, "-"),
                                    theirs_by_n.get(n, "not run" if theirs else "no torch")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
