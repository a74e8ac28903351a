#!/usr/bin/env python3
"""The training thread's stall per snapshot and per checkpoint (issue 10),
beside Python's torch.save + fsync of the same state, in one run.

    ninja -C build snapshot_bench
    python3 bench/snapshot_compare.py            # mlp, cnn, big; 7 reps
    python3 bench/snapshot_compare.py --quick    # smoke run: mlp, cnn; 3 reps

Per model it runs build/bin/snapshot_bench (C++: memcpy, snapshot,
checkpoint stall, background persist, old checkpoint) and then this file
again under the torch interpreter (--torch-save-worker: an equivalent
torch.nn model with SGD momentum state, saved with torch.save + fsync), and
prints one table of medians and whether a snapshot stalls <= 2x a plain
memcpy of the state. The harness is standard library only; see
bench/README.md.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("mlp", "cnn", "big")
TARGET_RATIO = 2.0  # A snapshot may stall at most this many memcpys.
HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the torch side (runs under the interpreter that has torch) ----

def build_torch_model(name):
    """The C++ bench's model (trainer/models.cc) in torch.nn: same shapes,
    same layers. Returns (model, batch input)."""
    import torch
    from torch import nn
    if name == "cnn":
        layers, channels = [], 1
        for width in (32, 64):
            layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False),
                       nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
            channels = width
        layers += [nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                   nn.Dropout(0.25), nn.Linear(128, 10)]
        model = nn.Sequential(*layers).to(memory_format=torch.channels_last)
        x = torch.randn(128, 1, 28, 28).contiguous(memory_format=torch.channels_last)
        return model, x
    hidden, dropout = ((4096, 2048, 512), 0.0) if name == "big" else ((256, 256), 0.1)
    layers, width = [nn.Flatten()], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers), torch.randn(64, 1, 28, 28)


def torch_optimizer(model):
    """SGD with YOLOv5's three groups, as trainer/optimizer.cc builds it."""
    import torch
    bias, decay, norm = [], [], []
    for module in model.modules():
        for pname, p in module.named_parameters(recurse=False):
            if pname == "bias":
                bias.append(p)
            elif pname == "weight" and "Norm" in type(module).__name__:
                norm.append(p)
            else:
                decay.append(p)
    groups = [{"params": bias, "weight_decay": 0.0},
              {"params": decay, "weight_decay": 5e-4},
              {"params": norm, "weight_decay": 0.0}]
    return torch.optim.SGD([g for g in groups if g["params"]], lr=0.01,
                           momentum=0.937, nesterov=True)


def torch_save_worker(args):
    import torch
    torch.set_num_threads(1)
    model, x = build_torch_model(args.model)
    optimizer = torch_optimizer(model)
    model.train()
    y = torch.randint(0, 10, (x.shape[0],))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()  # The momentum buffers exist from here on.
    folder = tempfile.mkdtemp(prefix="elastrun-snapshot-compare-", dir=args.disk_dir)
    path = os.path.join(folder, "state.pt")
    samples = []
    try:
        for i in range(args.warmup + args.reps):
            start = time.perf_counter()
            with open(path, "wb") as f:
                torch.save({"model": model.state_dict(),
                            "optimizer": optimizer.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            ms = (time.perf_counter() - start) * 1e3
            if i >= args.warmup:
                samples.append(ms)
        size = os.path.getsize(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"model": args.model, "params": params, "bytes": size,
                      "save_ms": samples}))


# ---- the harness (standard library only) ----

def median(values):
    return statistics.median(values) if values else float("nan")


def make_row(cpp, py):
    """One table row from the C++ bench's JSON line and the torch worker's
    (None: not measured). ValueError when the two models differ."""
    if py and py["params"] != cpp["params"]:
        raise ValueError(f"{cpp['model']}: the torch model has {py['params']} parameters,"
                         f" the C++ one {cpp['params']}: not the same model")
    memcpy_ms = median(cpp["memcpy_ms"])
    snapshot_ms = median(cpp["snapshot_ms"])
    return {
        "model": cpp["model"],
        "description": cpp["description"],
        "mb": cpp["bytes"] / 1e6,
        "memcpy_ms": memcpy_ms,
        "snapshot_ms": snapshot_ms,
        "ratio": snapshot_ms / memcpy_ms if memcpy_ms > 0 else float("inf"),
        "checkpoint_ms": median(cpp["checkpoint_ms"]),
        "persist_ms": median(cpp["persist_ms"]),
        "old_ms": median(cpp["old_ms"]),
        "serialize_ms": median(cpp["serialize_ms"]),
        "python_ms": median(py["save_ms"]) if py else float("nan"),
        "python_mb": py["bytes"] / 1e6 if py else float("nan"),
        "spread": {k: (min(cpp[k]), max(cpp[k])) for k in ("memcpy_ms", "snapshot_ms")},
    }


def format_table(rows):
    """A Markdown table of the rows' medians."""
    head = ("| model | MB | memcpy ms | snapshot ms | snapshot/memcpy | checkpoint stall ms"
            " | background persist ms | old checkpoint ms | python torch.save+fsync ms |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['model']} ({r['description']}) | {r['mb']:.2f} | {r['memcpy_ms']:.3f}"
            f" | {r['snapshot_ms']:.3f} | {r['ratio']:.2f}x | {r['checkpoint_ms']:.3f}"
            f" | {r['persist_ms']:.1f} | {r['old_ms']:.1f} | {r['python_ms']:.1f} |")
    return "\n".join(lines)


def verdict(rows):
    """Whether every model's snapshot stalls <= TARGET_RATIO memcpys, and a
    sentence saying so."""
    misses = [r for r in rows if not r["ratio"] <= TARGET_RATIO]
    worst = max(rows, key=lambda r: r["ratio"])
    if not misses:
        return True, (f"target holds: every snapshot stalls <= {TARGET_RATIO:g}x a memcpy"
                      f" of its state (worst {worst['model']}, {worst['ratio']:.2f}x)")
    names = ", ".join(f"{r['model']} {r['ratio']:.2f}x" for r in misses)
    return False, f"target missed: snapshot > {TARGET_RATIO:g}x memcpy for {names}"


def run_json(cmd):
    """Runs `cmd`, returns its stdout's JSON lines; exits with its stderr on
    failure."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated of mlp,cnn,big (default all)")
    ap.add_argument("--reps", type=int, default=None, help="measured repetitions (7; quick 3)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured repetitions first")
    ap.add_argument("--quick", action="store_true", help="smoke run: mlp,cnn, 3 reps")
    ap.add_argument("--build-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="the interpreter with torch (Debian's python3-torch)")
    ap.add_argument("--shm-dir", default="/dev/shm", help="parent of the snapshot memory")
    ap.add_argument("--disk-dir", default=tempfile.gettempdir(),
                    help="parent of the checkpoint files (a disk, not tmpfs)")
    ap.add_argument("--no-python", action="store_true", help="skip torch.save")
    ap.add_argument("--torch-save-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    default_models = "mlp,cnn" if args.quick else ",".join(MODELS)
    args.models = [m for m in (args.models or default_models).split(",") if m]
    for m in args.models:
        if m not in MODELS:
            ap.error(f"--models: unknown model {m!r}; valid: {', '.join(MODELS)}")
    if args.reps is None:
        args.reps = 3 if args.quick else 7
    if args.reps < 1 or args.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    if args.torch_save_worker:
        return torch_save_worker(args)
    binary = os.path.join(args.build_dir, "bin", "snapshot_bench")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not found: build it with `ninja -C build snapshot_bench`"
                 " (a torch build: ELASTRUN_WITH_TORCH=ON)")
    load_before = os.getloadavg()
    rows = []
    for model in args.models:
        common = ["--reps", str(args.reps), "--warmup", str(args.warmup)]
        cpp = run_json([binary, "--json", "--models", model, "--shm-dir", args.shm_dir,
                        "--disk-dir", args.disk_dir] + common)[0]
        py = None
        if not args.no_python:
            py = run_json([args.python, os.path.abspath(__file__), "--torch-save-worker",
                           "--model", model, "--disk-dir", args.disk_dir] + common)[0]
        try:
            rows.append(make_row(cpp, py))
        except ValueError as e:
            sys.exit(str(e))
        print(f"{model}: done", file=sys.stderr, flush=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores,"
          f" load {load_before[0]:.2f} before / {os.getloadavg()[0]:.2f} after;"
          f" medians of {args.reps} after {args.warmup} warm-up;"
          f" snapshots in {args.shm_dir}, checkpoints in {args.disk_dir}")
    print()
    print(format_table(rows))
    print()
    for r in rows:
        (m0, m1), (s0, s1) = r["spread"]["memcpy_ms"], r["spread"]["snapshot_ms"]
        print(f"{r['model']}: memcpy {m0:.3f}-{m1:.3f} ms, snapshot {s0:.3f}-{s1:.3f} ms"
              f" (min-max); old checkpoint's SerializeState {r['serialize_ms']:.1f} ms;"
              f" torch.save file {r['python_mb']:.2f} MB")
    print(verdict(rows)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
