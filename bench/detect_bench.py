#!/usr/bin/env python3
"""Detector training throughput: elastrun-train's YOLOv5n (trainer/detect/,
LibTorch, c10d::Reducer) vs YOLOv5's train.py written out in Python
(bench/detect_reference.py, python3-torch DDP), Gloo, CPU, one intra-op
thread per rank, the same data.

The dataset is made once, in a temporary folder, by
`build/bin/elastrun-detect-data DIR --train N --val M --size S` (PNG when the
torch interpreter has no PIL, JPEG otherwise). Then, per repetition (the
sides interleaved, so drift in the machine's load hits both alike):

  python    torchrun --standalone --nproc_per_node P bench/detect_reference.py
            --data DIR/data.yaml --img S --batch B --epochs E
            (torch 1.13's torchrun, with launch_bench.py's Std.from_str patch
            for Python 3.11)
  elastrun  elastrun run --nproc-per-node P elastrun-train --config
            configs/detect_fashion_yolov5n.yaml data.yaml=DIR/data.yaml
            data.batch_size=B data.image_size=S train.epochs=E ++hyp.mosaic=0 ...
            (every augmentation of hyp.yaml set to 0: the reference has none)

A run's figure is the images/s of its last epoch: elastrun-train's last
"epoch ... img/s" line (or metrics.csv's images_per_sec), the reference's
JSON line with every earlier epoch left out as warm-up (with --epochs 1,
its first 3 iterations, while elastrun-train's epoch includes its own).
A cell is the median (min-max) over repetitions; the ratio is a side's
median / the Python median.

When the elastrun side cannot run (no config yet, no binary) it prints
"elastrun side: not available: <reason>" and the Python side alone.

Standard library only; any python3 runs it. Everything goes to a temporary
folder, removed at the end (--keep keeps it); every run is bounded
(--timeout) and killed with its process group when it overruns.

  python3 bench/detect_bench.py                        # 512 images, S=128, B=32, 2 ranks, 2 epochs
  python3 bench/detect_bench.py --img 256 --batch 16 --reps 3
  python3 bench/detect_bench.py --sides python --train 64 --batch 16 --epochs 3
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp_bench import fmt_cell, loadavg, run_bounded  # noqa: E402
from launch_bench import TORCHRUN_PATCH  # noqa: E402

ROOT = os.path.dirname(HERE)
TORCH_PYTHON = "/usr/bin/python3"
CONFIG = "configs/detect_fashion_yolov5n.yaml"
SIDES = ("python", "elastrun", "loader")
LABELS = {"python": "Python DDP (YOLOv5 train.py)", "elastrun": "elastrun-train",
          "loader": "elastrun loader alone, one rank's (1 thread, mosaic on)"}
# YOLOv5's augmentations, all off for elastrun-train, as the reference has
# none (YOLOv5's train.py with augment=False: letterbox only).
NO_AUGMENT = [f"++hyp.{k}=0" for k in (
    "mosaic", "mixup", "copy_paste", "hsv_h", "hsv_s", "hsv_v", "degrees", "translate",
    "scale", "shear", "perspective", "flipud", "fliplr")]
EPOCH_IPS = re.compile(r"epoch\s+(\d+)\s*/\s*\d+.*?([\d][\d,]*(?:\.\d+)?)\s*img/s")


def make_parser():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sides", default="python,elastrun,loader",
                    help="comma-separated: python, elastrun (default: %(default)s)")
    ap.add_argument("--train", type=int, default=512, help="training images (default %(default)s)")
    ap.add_argument("--val", type=int, default=32, help="validation images (default %(default)s)")
    ap.add_argument("--img", type=int, default=128, help="image size S (default %(default)s)")
    ap.add_argument("--batch", type=int, default=32, help="batch per rank B (default %(default)s)")
    ap.add_argument("--nproc", type=int, default=2, help="ranks (default %(default)s)")
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per run; the last one is measured (default %(default)s)")
    ap.add_argument("--reps", type=int, default=1, help="repetitions (default %(default)s)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds per run before its process group is killed (default %(default)s)")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build/bin"),
                    help="elastrun, elastrun-train and elastrun-detect-data (default: build/bin)")
    ap.add_argument("--config", default=CONFIG, help="elastrun-train's config (default %(default)s)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for elastrun-train (repeatable)")
    ap.add_argument("--reference-arg", action="append", default=[], metavar="ARG",
                    help="an argument for detect_reference.py, e.g. --reference-arg=--ema=off")
    ap.add_argument("--python", default=TORCH_PYTHON,
                    help="the interpreter with torch for the reference (default: %(default)s)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return ap


def has_pil(python):
    return subprocess.run([python, "-c", "import PIL.Image"], capture_output=True).returncode == 0


def make_dataset(args, tmp):
    """elastrun-detect-data; returns data.yaml's path."""
    out = os.path.join(tmp, "data")
    fmt = "jpg" if has_pil(args.python) else "png"
    cmd = [os.path.join(args.bin_dir, "elastrun-detect-data"), out, "--train", str(args.train),
           "--val", str(args.val), "--size", str(args.img), "--format", fmt]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    print(f"# dataset: {args.train} train + {args.val} val {args.img}x{args.img} {fmt} images "
          f"in {time.monotonic() - t0:.1f}s", flush=True)
    return os.path.join(out, "data.yaml")


def elastrun_unavailable(args):
    """Why the elastrun side cannot run, or None."""
    for name in ("elastrun", "elastrun-train"):
        if not os.access(os.path.join(args.bin_dir, name), os.X_OK):
            return f"{os.path.join(args.bin_dir, name)} is not built"
    config = os.path.join(ROOT, args.config)
    if not os.path.exists(config):
        return f"{args.config} does not exist yet"
    return None


def iterations_per_epoch(args):
    """What DistributedSampler gives each rank (padded), in batches."""
    return math.ceil(math.ceil(args.train / args.nproc) / args.batch)


def python_ips(log):
    with open(log, errors="replace") as f:
        for line in reversed(f.read().splitlines()):
            if line.startswith("{") and '"side": "python"' in line:
                r = json.loads(line)
                return r["images_per_sec"], r
    raise ValueError("no JSON line")


def elastrun_ips(log, output_dir):
    """The last epoch's images/s: metrics.csv when it has the column, else
    the last "epoch E/N ... img/s" line."""
    metrics = os.path.join(output_dir, "metrics.csv")
    if os.path.exists(metrics):
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        if rows and "images_per_sec" in rows[-1]:
            return float(rows[-1]["images_per_sec"]), {"epochs": len(rows)}
    found = None
    with open(log, errors="replace") as f:
        for line in f:
            m = EPOCH_IPS.search(line)
            if m:
                found = (float(m.group(2).replace(",", "")), {"epoch": int(m.group(1))})
    if found is None:
        raise ValueError("no metrics.csv and no 'epoch ... img/s' line")
    return found


def loader_ips(log):
    """images/s from elastrun-detect-loader-bench's line."""
    with open(log) as f:
        m = re.findall(r"([0-9.]+) images/s", f.read())
    if not m:
        raise ValueError("no 'images/s' line")
    return float(m[-1])


def one_run(args, tmp, side, rep, data_yaml):
    name = f"{side}-{rep}"
    log = os.path.join(tmp, name + ".log")
    env = dict(os.environ)
    if side == "python":
        nb = iterations_per_epoch(args)
        warmup = (args.epochs - 1) * nb if args.epochs > 1 else min(3, nb - 1)
        cmd = [args.python, "-c", TORCHRUN_PATCH, "--standalone",
               "--nproc_per_node", str(args.nproc),
               os.path.join(HERE, "detect_reference.py"), "--data", data_yaml,
               "--img", str(args.img), "--batch", str(args.batch), "--epochs", str(args.epochs),
               "--warmup-iters", str(warmup), "--threads", "1", *args.reference_arg]
    elif side == "loader":
        out = None
        cmd = [os.path.join(args.bin_dir, "elastrun-detect-loader-bench"), data_yaml,
               "--image-size", str(args.img), "--batch", str(args.batch), "--workers", "1",
               "--augment", "--batches", "40"]
    else:
        out = os.path.join(tmp, name)
        cmd = [os.path.join(args.bin_dir, "elastrun"), "run", "--nproc-per-node",
               str(args.nproc), "--log-dir", os.path.join(tmp, name + "-logs"),
               os.path.join(args.bin_dir, "elastrun-train"), "--config", args.config,
               f"data.yaml={data_yaml}", f"data.batch_size={args.batch}",
               f"data.image_size={args.img}", f"train.epochs={args.epochs}",
               f"train.output_dir={out}", "train.checkpoint_period=0", "train.threads=1",
               "train.log_period=0", *NO_AUGMENT, *args.set]
    load0 = loadavg()
    t0 = time.monotonic()
    status = run_bounded(cmd, env, args.timeout, log)
    result = {"status": status, "wall": time.monotonic() - t0, "load": (load0, loadavg())}
    if status == "ok":
        try:
            if side == "python":
                result["ips"], result["detail"] = python_ips(log)
            elif side == "loader":
                result["ips"], result["detail"] = loader_ips(log), {}
            else:
                result["ips"], result["detail"] = elastrun_ips(log, out)
        except (OSError, ValueError, KeyError) as e:
            result["status"] = f"no figure ({e})"
    if result["status"] != "ok":
        with open(log, errors="replace") as f:
            result["tail"] = f.read()[-2000:]
    return result


def main():
    args = make_parser().parse_args()
    sides = [s for s in args.sides.split(",") if s]
    for s in sides:
        if s not in SIDES:
            sys.exit(f"unknown side {s!r} (python, elastrun, loader)")
    if args.train < 1 or args.batch < 1 or args.nproc < 1 or args.epochs < 1 or args.img % 32:
        sys.exit("--train, --batch, --nproc, --epochs must be >= 1 and --img a multiple of 32")
    if args.epochs == 1 and iterations_per_epoch(args) < 2:
        sys.exit("one epoch of one iteration per rank leaves the reference nothing to time "
                 "after its warm-up: more --train images or --epochs")
    if "elastrun" in sides:
        why = elastrun_unavailable(args)
        if why:
            print(f"elastrun side: not available: {why}", flush=True)
            sides.remove("elastrun")

    tmp = tempfile.mkdtemp(prefix="elastrun-detect-bench-")
    results = {s: [] for s in sides}
    try:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, nproc "
              f"{os.cpu_count()}, load {loadavg():.2f}; YOLOv5n, {args.nproc} ranks x batch "
              f"{args.batch}, {args.img}x{args.img}, {args.epochs} epoch(s), Gloo, 1 thread "
              f"per rank; elastrun overrides {args.set or 'none'}", flush=True)
        data_yaml = make_dataset(args, tmp)
        for rep in range(args.reps):
            for side in sides:
                r = one_run(args, tmp, side, rep, data_yaml)
                results[side].append(r)
                extra = f"{r['ips']:,.1f} img/s" if "ips" in r else r["status"]
                print(f"{side:8s} rep {rep}: {extra}, wall {r['wall']:.1f}s, "
                      f"load {r['load'][0]:.2f}->{r['load'][1]:.2f}", flush=True)
                if side == "python" and "detail" in r:
                    print(f"  {json.dumps(r['detail'])}", flush=True)
                if "tail" in r:
                    print("  log tail:\n" + r["tail"], flush=True)

        print()
        print(f"images/s of the last epoch, median (min-max) of {args.reps} run(s); "
              f"load {loadavg():.2f} at the end")
        print()
        print("| side | images/s | ratio (vs Python) | loads (start of run) |")
        print("|---|---|---|---|")
        med = {s: statistics.median([r["ips"] for r in results[s] if "ips" in r])
               for s in sides if any("ips" in r for r in results[s])}
        for side in sides:
            runs = results[side]
            vals = [r["ips"] for r in runs if "ips" in r]
            ratio = (f"{med[side] / med['python']:.2f}x"
                     if side in med and med.get("python") else "")
            failed = [r["status"] for r in runs if r["status"] != "ok"]
            note = f" [{len(failed)} failed: {failed[0]}]" if failed else ""
            loads = " ".join(f"{r['load'][0]:.1f}" for r in runs)
            print(f"| {LABELS[side]} | {fmt_cell(vals)}{note} | {ratio} | {loads} |")
        if "loader" in med and "elastrun" in med:
            per_rank = med["elastrun"] / args.nproc
            print(f"\nthe loader alone (mosaic, hsv, flips; one thread) feeds "
                  f"{med['loader']:,.0f} images/s; training takes {per_rank:,.0f} per rank: "
                  f"{med['loader'] / per_rank:.1f}x faster than training")
    finally:
        if args.keep:
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
