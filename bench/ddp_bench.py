#!/usr/bin/env python3
"""Training throughput: elastrun-train (LibTorch, c10d::Reducer) vs PyTorch's
Python DDP (bench/ddp_reference.py, python3-torch), Fashion-MNIST MLP and CNN,
Gloo, one intra-op thread per rank.

For each model and repetition, four runs (interleaved, so drift in the
machine's load hits every setup alike):
  cpp-1     build/bin/elastrun-train, one process (no process group)
  cpp-2     elastrun run --nproc-per-node 2 build/bin/elastrun-train
  python-1  /usr/bin/python3 bench/ddp_reference.py, one process
  python-2  elastrun run --nproc-per-node 2 bench/ddp_reference.py
            (ELASTRUN_PYTHON=/usr/bin/python3; the same launcher as cpp-2)
Both programs get the same resolved config (`elastrun-train --print-config`
with the same overrides) and write metrics.csv with images_per_sec per epoch
(all ranks' training images / rank 0's training seconds, evaluation and
start-up excluded). A run's figure is the mean over its epochs; a cell is the
median (min-max) over repetitions.

Standard library only; any python3 runs it. Everything goes to a temporary
folder, removed at the end; every run is bounded (--timeout) and killed with
its process group when it overruns.

  python3 bench/ddp_bench.py                          # mlp (3 epochs) + cnn (1 epoch), 3 reps
  python3 bench/ddp_bench.py --models mlp --reps 5
  python3 bench/ddp_bench.py --models cnn --cnn-epochs 1 --reps 2
  python3 bench/ddp_bench.py --models cnn --set model.channels_last=false
"""

import argparse
import csv
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = "/usr/bin/python3"
CONFIGS = {"mlp": "configs/fashion_mnist_mlp.yaml", "cnn": "configs/fashion_mnist_cnn.yaml"}
# What elastrun-train does with mallopt at start (trainer/main.cc), for the
# reference through glibc's tunables (--tuned-malloc-reference).
REFERENCE_MALLOC_TUNABLES = ("glibc.malloc.mmap_threshold=33554432:"
                             "glibc.malloc.trim_threshold=536870912")
SETUPS = ["cpp-1", "cpp-2", "python-1", "python-2"]
LABELS = {
    "cpp-1": "elastrun-train, 1 process",
    "cpp-2": "elastrun-train, 2 ranks",
    "python-1": "Python reference, 1 process",
    "python-2": "Python DDP, 2 ranks",
}


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_bounded(cmd, env, timeout, log_path):
    """Runs cmd in its own session; on timeout kills its process group."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            return "timeout"
    # The launcher's workers are in its group; make sure none outlives it.
    try:
        os.killpg(p.pid, 0)
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return "ok" if rc == 0 else f"rc={rc}"


def read_metrics(path):
    """(images/s of each epoch, test_acc, train_loss after the last) from metrics.csv."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no epoch rows")
    ips = [float(r["images_per_sec"]) for r in rows]
    return ips, float(rows[-1]["test_acc"]), float(rows[-1]["train_loss"])


def resolve_config(args, model, path):
    """Writes the config both programs train from (--print-config) to path."""
    with open(path, "w") as f:
        subprocess.run([args.trainer, "--config", CONFIGS[model],
                        f"train.epochs={args.epochs[model]}", "train.threads=1",
                        *args.set, "--print-config"], cwd=ROOT, stdout=f, check=True, timeout=60)


def one_run(args, tmp, model, setup, rep, resolved):
    """setup: cpp-N or python-N; N > 1 runs under `elastrun run --nproc-per-node N`."""
    name = f"{model}-{setup}-{rep}"
    out = os.path.join(tmp, name)
    log = os.path.join(tmp, name + ".log")
    nproc = setup.split("-")[1]
    launcher = [args.elastrun, "run", "--nproc-per-node", nproc,
                "--log-dir", os.path.join(tmp, name + "-logs")]
    env = dict(os.environ)
    if setup.startswith("cpp"):
        prog = [args.trainer, "--config", CONFIGS[model], f"train.epochs={args.epochs[model]}",
                f"train.output_dir={out}", "train.checkpoint_period=0", "train.threads=1",
                *args.set]
    else:
        env["ELASTRUN_PYTHON"] = args.python
        if args.tuned_malloc_reference:
            env["GLIBC_TUNABLES"] = REFERENCE_MALLOC_TUNABLES
        prog = ["bench/ddp_reference.py", "--config", resolved, "--output-dir", out]
        if nproc == "1":
            prog = [args.python] + prog
    cmd = prog if nproc == "1" else launcher + prog
    load0 = loadavg()
    t0 = time.monotonic()
    status = run_bounded(cmd, env, args.timeout, log)
    wall = time.monotonic() - t0
    result = {"status": status, "wall": wall, "load": (load0, loadavg()), "log": log}
    if status == "ok":
        try:
            result["epoch_ips"], result["acc"], result["loss"] = read_metrics(
                os.path.join(out, "metrics.csv"))
            result["ips"] = statistics.fmean(result["epoch_ips"])
        except (OSError, ValueError) as e:
            result["status"] = f"no metrics ({e})"
    if result["status"] != "ok":
        with open(log, errors="replace") as f:
            result["tail"] = f.read()[-2000:]
    return result


def fmt_cell(values):
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med:,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def make_parser():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the four runs (default: %(default)s)")
    ap.add_argument("--mlp-epochs", type=int, default=3, help="epochs per MLP run (default: %(default)s)")
    ap.add_argument("--cnn-epochs", type=int, default=1, help="epochs per CNN run (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run before its process group is killed (default: %(default)s)")
    ap.add_argument("--elastrun", default=os.path.join(ROOT, "build/bin/elastrun"), help="the elastrun binary (default: build/bin/elastrun)")
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build/bin/elastrun-train"), help="the trainer binary (default: build/bin/elastrun-train)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both trainers, e.g. model.channels_last=false "
                         "(repeatable)")
    ap.add_argument("--tuned-malloc-reference", action="store_true",
                    help="give the Python runs elastrun-train's malloc settings (mmap threshold "
                         "32 MiB, trim threshold 512 MiB, as GLIBC_TUNABLES)")
    ap.add_argument("--python", default=TORCH_PYTHON,
                    help="the interpreter with torch for the reference (default: %(default)s)")
    return ap


def main():
    args = make_parser().parse_args()
    args.epochs = {"mlp": args.mlp_epochs, "cnn": args.cnn_epochs}
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in CONFIGS:
            sys.exit(f"unknown model {m!r} (mlp, cnn)")

    tmp = tempfile.mkdtemp(prefix="elastrun-ddp-bench-")
    results = {}
    try:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, nproc "
              f"{os.cpu_count()}, load {loadavg():.2f}; overrides {args.set or 'none'}; "
              f"reference malloc {'tuned' if args.tuned_malloc_reference else 'glibc default'}",
              flush=True)
        for model in models:
            resolved = os.path.join(tmp, f"{model}.yaml")
            resolve_config(args, model, resolved)
            for rep in range(args.reps):
                for setup in SETUPS:
                    r = one_run(args, tmp, model, setup, rep, resolved)
                    results.setdefault((model, setup), []).append(r)
                    extra = (f"{r['ips']:,.0f} img/s test_acc {r['acc']:.4f} "
                             f"train_loss {r['loss']:.4f}" if "ips" in r else r["status"])
                    print(f"{model} {setup:8s} rep {rep}: {extra}, wall {r['wall']:.1f}s, "
                          f"load {r['load'][0]:.2f}->{r['load'][1]:.2f}", flush=True)
                    if "tail" in r:
                        print("  log tail:\n" + r["tail"], flush=True)

        print()
        epochs = ", ".join(f"{m} {args.epochs[m]} epoch(s)" for m in models)
        print(f"images/s, median (min-max) of {args.reps} runs ({epochs}); "
              f"load {loadavg():.2f} at the end")
        print()
        print("| model | setup | images/s | vs Python (same setup) | scaling efficiency "
              "| test_acc | loads (start of run) |")
        print("|---|---|---|---|---|---|---|")
        for model in models:
            med = {}
            for setup in SETUPS:
                vals = [r["ips"] for r in results[(model, setup)] if "ips" in r]
                med[setup] = statistics.median(vals) if vals else None
            for setup in SETUPS:
                runs = results[(model, setup)]
                vals = [r["ips"] for r in runs if "ips" in r]
                lang, n = setup.split("-")
                vs = ""
                if lang == "cpp" and med[setup] and med.get(f"python-{n}"):
                    vs = f"{med[setup] / med[f'python-{n}']:.2f}x"
                eff = ""
                if n == "2" and med[setup] and med.get(f"{lang}-1"):
                    eff = f"{med[setup] / (2 * med[f'{lang}-1']):.0%}"
                accs = sorted({f"{r['acc']:.4f}" for r in runs if "acc" in r})
                loads = " ".join(f"{r['load'][0]:.1f}" for r in runs)
                failed = [r["status"] for r in runs if r["status"] != "ok"]
                note = f" [{len(failed)} failed: {failed[0]}]" if failed else ""
                print(f"| {model} | {LABELS[setup]} | {fmt_cell(vals)}{note} | {vs} | {eff} "
                      f"| {', '.join(accs)} | {loads} |")
        print()
        print("vs Python: elastrun-train's median / the Python median with the same number "
              "of processes; scaling efficiency: 2-rank median / (2 x 1-process median).")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
