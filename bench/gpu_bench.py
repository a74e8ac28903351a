#!/usr/bin/env python3
"""GPU benchmarks (issue 13): the CNN's training images/s on a GPU,
elastrun-train vs PyTorch's Python DDP (bench/ddp_reference.py) in fp32, AMP
float16 and AMP bfloat16; and the restart time of a worker that trains on the
GPU under `elastrun run` (with and without --standby) and torchrun.

(a) throughput: configs/fashion_mnist_cnn.yaml with train.device=cuda (each
    rank its LOCAL_RANK's GPU), real Fashion-MNIST when its files are in
    data.root, else data.synthetic with the same sizes (the table says
    which). Per precision one resolved config feeds both programs; 1 rank
    (alone, no process group) and, with several GPUs, one rank per GPU under
    `elastrun run`. Runs go through ddp_bench.py's one_run; a cell is the
    median (min-max) of every epoch's images/s but each run's first (the
    warm-up: CUDA context, cuDNN, allocator).
(b) restart: launch_bench.py's trials with ddp_reference.py (fp32, the same
    config) as the worker, on 1 rank and one per GPU: every rank writes its
    ready file once its first iteration is done (loss on the host), so the
    restart figure (SIGKILL of a rank -> every rank of the next attempt past
    its first iteration) includes the interpreter or standby, `import torch`,
    the data, the CUDA context, NCCL's setup with several ranks, and the
    first step. torchrun is `python3 -c <launch_bench's patch>` =
    torch.distributed.run's main, same interpreter.

Without a usable GPU it says so and exits 77. `--device cpu` runs the same
comparisons on the CPU (train.device=cpu, Gloo); with `--quick` on a tiny
synthetic config (how it is tested). Standard library only; the programs
it starts run under --python (default: the first of this interpreter and
/usr/bin/python3 that has torch).

  python3 bench/gpu_bench.py                         # a GPU machine: both tables
  python3 bench/gpu_bench.py --bin-dir BUILD/bin --parts throughput --epochs 8
  python3 bench/gpu_bench.py --device cpu --quick    # the same on a CPU, in seconds
"""

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import ddp_bench
import launch_bench

ROOT = ddp_bench.ROOT
REFERENCE = os.path.join(ROOT, "bench/ddp_reference.py")
PRECISIONS = {
    "fp32": ["train.amp=false"],
    "amp float16": ["train.amp=true", "train.amp_dtype=float16"],
    "amp bfloat16": ["train.amp=true", "train.amp_dtype=bfloat16"],
}
PROGRAMS = {"cpp": "elastrun-train", "python": "Python DDP (ddp_reference.py)"}
LAUNCHERS = launch_bench.LAUNCHERS
# --quick: a tiny CNN on a tiny synthetic set; seconds per run on a CPU.
QUICK_SET = ["data.synthetic=true", "+data.synthetic_train_size=384",
             "+data.synthetic_test_size=128", "data.batch_size=32",
             "model.channels=[4,8]", "model.hidden=16"]
PROBE = r"""
import json, torch
ok = torch.cuda.is_available()
print(json.dumps(dict(torch=torch.__version__, cuda=torch.version.cuda, usable=ok,
                      gpus=[torch.cuda.get_device_name(i)
                            for i in range(torch.cuda.device_count())] if ok else [])))
"""


def probe_torch(python):
    """What `python`'s torch sees (dict), or None when it has no torch."""
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def nvidia_smi():
    """(driver version, the CUDA version the driver supports) or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=60)
        full = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"CUDA Version:\s*([\d.]+)", full.stdout)
    driver = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else "?"
    return driver, m.group(1) if m else "?"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def choose_python(args):
    """args.python, or the first candidate with torch; (python, probe) or exits 77."""
    candidates = [args.python] if args.python else [sys.executable, "/usr/bin/python3"]
    for python in candidates:
        info = probe_torch(python)
        if info is not None:
            return python, info
    print(f"gpu_bench: no Python with torch ({', '.join(candidates)}); give one with "
          "--python. Nothing measured.", file=sys.stderr)
    sys.exit(77)


def describe_machine(args, python, info):
    """The line that names the machine; exits 77 when --device cuda finds no GPU."""
    torch_part = f"torch {info['torch']} ({python})"
    if args.device == "cpu":
        return f"CPU: {cpu_name()}, nproc {os.cpu_count()}; {torch_part}"
    smi = nvidia_smi()
    if not info["usable"]:
        why = ("nvidia-smi not found" if smi is None else
               f"driver {smi[0]}, but torch sees no GPU")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        print(f"gpu_bench: no usable GPU here ({why}; {torch_part}; CUDA_VISIBLE_DEVICES "
              f"{'unset' if visible is None else repr(visible)}). Nothing measured; "
              "--device cpu --quick runs the same comparisons on the CPU.", file=sys.stderr)
        sys.exit(77)
    names = sorted(set(info["gpus"]))
    driver, cuda = smi if smi else ("?", "?")
    return (f"GPU: {len(info['gpus'])} x {' + '.join(names)}, driver {driver} (CUDA "
            f"{cuda}); {torch_part}, built for CUDA {info['cuda']}; CPU: {cpu_name()}, "
            f"nproc {os.cpu_count()}")


def base_overrides(args):
    """(overrides for both programs, what the data is)."""
    dev = [f"train.device={args.device}"]
    if args.quick:
        return dev + QUICK_SET, "synthetic, tiny (--quick: 384 train / 128 test, CNN 4-8-16)"
    if os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
        return dev, "Fashion-MNIST (/usr/share/datasets/fashion-mnist)"
    return dev + ["data.synthetic=true"], ("synthetic, Fashion-MNIST's sizes (60,000 / "
                                           "10,000; no dataset-fashion-mnist here)")


def throughput(args, tmp, ranks, overrides, data_note):
    """Table (a). Returns (the fp32 resolved config, the restart bench's; whether
    every run succeeded)."""
    dargs = ddp_bench.make_parser().parse_args([
        "--elastrun", args.elastrun, "--trainer", args.trainer, "--python", args.python,
        "--timeout", str(args.timeout)])
    dargs.epochs = {"cnn": args.epochs}
    cells, fp32_config = {}, None
    for prec, prec_set in PRECISIONS.items():
        dargs.set = overrides + prec_set
        ptmp = os.path.join(tmp, prec.replace(" ", "-"))
        os.mkdir(ptmp)
        resolved = os.path.join(ptmp, "cnn.yaml")
        ddp_bench.resolve_config(dargs, "cnn", resolved)
        fp32_config = fp32_config or resolved
        if "throughput" not in args.parts:
            break
        for run in range(args.runs):
            for n in ranks:
                for prog in PROGRAMS:
                    r = ddp_bench.one_run(dargs, ptmp, "cnn", f"{prog}-{n}", run, resolved)
                    cells.setdefault((prec, n, prog), []).append(r)
                    what = (f"{statistics.median(r['epoch_ips'][1:]):,.0f} img/s after the "
                            f"warm-up" if "epoch_ips" in r else r["status"])
                    print(f"{prec} {n} rank(s) {prog}: {what}, wall {r['wall']:.1f}s",
                          file=sys.stderr, flush=True)
                    if "tail" in r:
                        print("  log tail:\n" + r["tail"], file=sys.stderr, flush=True)
    if cells:
        print_throughput(args, cells, ranks, data_note)
    return fp32_config, all(r["status"] == "ok" for runs in cells.values() for r in runs)


def print_throughput(args, cells, ranks, data_note):
    print()
    print(f"## (a) CNN training images/s on {args.device}, data: {data_note}; "
          f"{args.runs} run(s) x {args.epochs} epochs, the first epoch of each run "
          "left out (warm-up)")
    print()
    rows = []
    for prec in PRECISIONS:
        for n in ranks:
            ips = {}
            for prog in PROGRAMS:
                runs = cells.get((prec, n, prog), [])
                ips[prog] = [x for r in runs if "epoch_ips" in r for x in r["epoch_ips"][1:]]
            for prog, label in PROGRAMS.items():
                runs = cells.get((prec, n, prog), [])
                failed = [r["status"] for r in runs if r["status"] != "ok"]
                vs = ""
                if prog == "cpp" and ips["cpp"] and ips["python"]:
                    vs = f"{statistics.median(ips['cpp']) / statistics.median(ips['python']):.2f}x"
                acc = ", ".join(sorted({f"{r['acc']:.4f}" for r in runs if "acc" in r}))
                loss = ", ".join(sorted({f"{r['loss']:.4f}" for r in runs if "loss" in r}))
                note = f" [{len(failed)} failed: {failed[0]}]" if failed else ""
                rows.append([prec, str(n), label, ddp_bench.fmt_cell(ips[prog]) + note, vs, acc, loss])
    launch_bench.print_table(["precision", "ranks", "trainer", "images/s, median (min-max)",
                              "elastrun-train / Python", "test_acc", "train_loss"], rows)
    print()
    print("images/s: all ranks' training images / rank 0's seconds per epoch (metrics.csv "
          "on both sides; evaluation and start-up outside it). test_acc, train_loss: after "
          "the last epoch (the same training gives the same on both sides; AMP on a GPU "
          "may differ in the last digits).")


# The workers of table (b): launch_bench's worker kind and its label.
RESTART_WORKERS = {"python": "ddp_reference.py", "train": "elastrun-train"}


def restart(args, tmp, ranks, config):
    """Table (b): launch_bench's trials with the reference and with
    elastrun-train (ELASTRUN_TRAIN_READY_DIR; it trains on until stopped) as
    GPU workers, from the same fp32 config."""
    worker_args = {
        "python": ["--config", config, "--output-dir", os.path.join(tmp, "restart-out")],
        # Resolved, so scheduler.epochs is a number: both follow the long run.
        "train": ["--config", config, "train.epochs=100000", "scheduler.epochs=100000",
                  "train.log_period=0", "train.output_dir=" + os.path.join(tmp, "restart-train")],
    }
    notes, rows = [], []
    for n in ranks:
        for worker, label in RESTART_WORKERS.items():
            largs = launch_bench.make_parser().parse_args([
                "--elastrun", args.elastrun, "--python", args.python,
                "--python-worker", REFERENCE, "--train-worker", args.trainer,
                "--worker-args", shlex.join(worker_args[worker]),
                "--reps", str(args.restart_reps), "--timeout", str(args.timeout)])
            cells = {l: launch_bench.run_cell(l, worker, n, largs, notes) for l in LAUNCHERS}
            for launcher, c in cells.items():
                t = cells["torchrun"]
                status = f" [{c['status']}]" if c["status"] else ""
                rows.append([str(n), label, launcher, launch_bench.fmt(c["launch"]) + status,
                             launch_bench.fmt(c["restart"]),
                             launch_bench.fmt(c["standby_idle"]) if c["standby_idle"] else "",
                             "" if launcher == "torchrun" else
                             launch_bench.ratio(t["restart"], c["restart"])])
    print()
    print(f"## (b) restart of a worker training on {args.device} (fp32): "
          f"seconds, median (min-max) of {args.restart_reps}")
    print()
    launch_bench.print_table(["ranks", "worker", "launcher", "launch (first step)",
                              "restart (first step)", "standbys idle",
                              "restart torchrun/this"], rows)
    for note in notes:
        print(f"- {note}")
    print()
    print("launch: launcher started -> every rank past its first iteration; restart: "
          "SIGKILL of one rank -> every rank of the next attempt past its first iteration; "
          "standbys idle: how long the --standby trials waited before the kill (not in "
          "restart). torchrun runs with its defaults.")
    return not notes


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="where the ranks train (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny synthetic config, 2 epochs, 1 restart trial per cell")
    ap.add_argument("--parts", default="throughput,restart",
                    help="comma-separated: throughput, restart (default: %(default)s)")
    ap.add_argument("--ranks", help="comma-separated rank counts (default: 1, and the GPU "
                    "count when over 1; 1 on a CPU)")
    ap.add_argument("--epochs", type=int, help="epochs per run, the first a warm-up "
                    "(default: 5; 2 with --quick)")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs per throughput cell (default: %(default)s)")
    ap.add_argument("--restart-reps", type=int,
                    help="trials per restart cell (default: 5; 1 with --quick)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds per run or trial (default: %(default)s)")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build/bin"),
                    help="where elastrun and elastrun-train are (default: build/bin)")
    ap.add_argument("--python", help="the interpreter with torch for the reference and "
                    "torchrun (default: this one, else /usr/bin/python3)")
    args = ap.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    if not set(args.parts) <= {"throughput", "restart"} or not args.parts:
        ap.error(f"--parts {','.join(args.parts)!r}: throughput and/or restart")
    args.epochs = args.epochs or (2 if args.quick else 5)
    if args.epochs < 2:
        ap.error("--epochs: at least 2 (the first is a warm-up)")
    args.restart_reps = args.restart_reps or (1 if args.quick else 5)
    sys.stdout.reconfigure(line_buffering=True)

    args.python, info = choose_python(args)
    machine = describe_machine(args, args.python, info)
    args.elastrun = os.path.join(args.bin_dir, "elastrun")
    args.trainer = os.path.join(args.bin_dir, "elastrun-train")
    for b in (args.elastrun, args.trainer):
        if not os.access(b, os.X_OK):
            ap.error(f"{b} not found: build first (ninja -C build elastrun elastrun-train) "
                     "or give --bin-dir")
    gpus = len(info["gpus"]) if args.device == "cuda" else 1
    ranks = ([int(x) for x in args.ranks.split(",") if x] if args.ranks else
             [1] + ([gpus] if gpus > 1 else []))
    overrides, data_note = base_overrides(args)

    print(f"# gpu_bench {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine}")
    tmp = tempfile.mkdtemp(prefix="elastrun-gpu-bench-")
    try:
        config, ok = throughput(args, tmp, ranks, overrides, data_note)
        if "restart" in args.parts:
            ok = restart(args, tmp, ranks, config) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
