#!/usr/bin/env python3
"""Goodput under faults: the CNN trained on 2 ranks while a random worker is
SIGKILLed every --interval seconds, under elastrun (`elastrun run --standby`,
build/bin/elastrun-train) and under torchrun (bench/ddp_reference.py, the
Python DDP reference, checkpointing every epoch and resuming from it as
YOLOv5's train.py does), each against the same run without faults.

Four runs of the same work (configs/fashion_mnist_cnn.yaml on synthetic data,
data.synthetic=true, 2 ranks, one intra-op thread each): elastrun without
faults, elastrun with faults, torchrun without faults, torchrun with faults.
A short fault-free elastrun run first measures images/s, and the training set
is sized so that the fault-free elastrun run takes --minutes (--train-size
skips that). Faults: at t = k x interval from the launcher's start, one of the
running workers, chosen by a seeded RNG, gets SIGKILL. Workers are the
launcher's children (/proc/PID/task/*/children); under `--standby` the
launcher also holds the next attempt's pre-started workers, in a process
group of their own started after the running attempt's: the running workers
are the group of the oldest child. No fault is injected once rank 0 printed
its final line.

From rank 0's log (progress line every iteration, train.log_period=1 /
--log-period 1): each attempt starts with the trainer's banner, preceded or
followed by a "resumed from ...: epoch E, iteration I" line (none: a fresh
start at step 0; without it the attempt's first progress line tells). Steps
redone per fault = the last step an attempt reached - the step the next one
resumed at. Goodput = useful-work time / total time = the fault-free run's
wall time / the faulted run's wall time (the same total work).

Standard library only; any python3 runs it (torchrun and the reference run
under /usr/bin/python3, which has python3-torch). Everything goes to a
temporary folder, removed at the end (--keep keeps it). Every run is bounded
(--timeout-factor) and killed with its process group when it overruns.

  python3 bench/goodput.py                        # 3-minute runs, a fault every 30 s
  python3 bench/goodput.py --minutes 5 --interval 20 --seed 2
  python3 bench/goodput.py --quick                # ~18 s runs: a smoke test
  python3 bench/goodput.py --launchers elastrun   # elastrun's two runs only
"""

import argparse
import contextlib
import csv
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from launch_bench import CONTRACT_VARS, TORCHRUN_PATCH  # torchrun as launch_bench runs it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = "/usr/bin/python3"
CONFIG = "configs/fashion_mnist_cnn.yaml"
MAX_RESTARTS = 1000
GLOBAL_BATCH = 2 * 128  # 2 ranks x the config's data.batch_size

PROGRESS = re.compile(r"epoch (\d+)/(\d+) iter (\d+)/(\d+)")
# ddp_reference.py: "resumed from <source>: epoch E, iteration I";
# elastrun-train: "resumed at epoch E, iteration I from the <tier> of rank R".
RESUMED = re.compile(r"resumed from (.*?):? epoch (\d+), iteration (\d+)")
RESUMED_AT = re.compile(r"resumed at epoch (\d+), iteration (\d+) from the (.*?) of rank")


def parse_resumed(line):
    """(source, epoch, iteration) of a resume line, or None."""
    m = RESUMED_AT.search(line)
    if m:
        return m.group(3), int(m.group(1)), int(m.group(2))
    m = RESUMED.search(line)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3))
    return None
BANNER = re.compile(r"(elastrun-train|ddp_reference): \d+ rank\(s\)")
RANK_PREFIX = re.compile(r"^\[rank\d+\]:")
FINAL = re.compile(r"final: epoch=(\d+) test_acc=([\d.]+) train_loss=([\d.]+)")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# ---- the launcher's workers ----------------------------------------------------

def proc_stat(pid):
    """(state, pgid, start time in ticks) of `pid`, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return rest[0], int(rest[2]), int(rest[19])


def children(pid):
    """`pid`'s child processes: /proc/PID/task/*/children, or where the
    kernel lacks those files (CONFIG_PROC_CHILDREN), every process's ppid."""
    kids, readable = set(), False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.update(int(k) for k in f.read().split())
            readable = True
        except OSError:
            pass
    if not readable:
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.add(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def running_workers(launcher_pid):
    """The live workers of the running attempt, sorted by pid (= local rank
    order as both launchers start them). Standbys of the next attempt are in
    a younger process group and are left out."""
    live = {}
    try:
        launcher_exe = os.readlink(f"/proc/{launcher_pid}/exe")
    except OSError:
        launcher_exe = None
    for kid in children(launcher_pid):
        try:
            # elastrun's own helper processes (its cgroup watchdog) run the
            # launcher's binary: not workers.
            if launcher_exe is not None and os.readlink(f"/proc/{kid}/exe") == launcher_exe:
                continue
        except OSError:
            continue
        st = proc_stat(kid)
        if st and st[0] not in "ZX":
            live[kid] = st
    if not live:
        return []
    oldest = min(live, key=lambda k: (live[k][2], k))
    return sorted(k for k, st in live.items() if st[1] == live[oldest][1])


# ---- one run --------------------------------------------------------------------

class LogWatcher(threading.Thread):
    """Reads the launcher's merged output: keeps (time, line), writes the
    log, and tracks rank 0's newest progress line for the live report."""

    def __init__(self, stream, log_path, t0, tag):
        super().__init__(daemon=True)
        self.stream, self.log_path, self.t0, self.tag = stream, log_path, t0, tag
        self.lines = []
        self.latest = None  # (epoch, epochs, iter, iters)
        self.finished = threading.Event()  # rank 0's final line

    def run(self):
        with open(self.log_path, "w") as log:
            for raw in self.stream:
                line = raw.decode(errors="replace").rstrip("\n")
                t = time.monotonic() - self.t0
                self.lines.append((t, line))
                log.write(f"{t:9.3f} {line}\n")
                m = PROGRESS.search(line)
                if m:
                    self.latest = tuple(int(g) for g in m.groups())
                elif parse_resumed(line):
                    print(f"    {self.tag} t={t:6.1f}s: {RANK_PREFIX.sub('', line).strip()}",
                          flush=True)
                elif FINAL.search(line):
                    self.finished.set()

    def where(self):
        if not self.latest:
            return "starting"
        e, n, i, t = self.latest
        return f"epoch {e}/{n} iter {i}/{t}"


class FaultInjector(threading.Thread):
    """SIGKILLs one running worker of `launcher` at t = k x interval (k >= 1)
    until `stop` is set or rank 0 is done; records (t, pid, where)."""

    def __init__(self, launcher, watcher, interval, rng, stop, t0, tag):
        super().__init__(daemon=True)
        self.launcher, self.watcher, self.interval = launcher, watcher, interval
        self.rng, self.stop, self.t0, self.tag = rng, stop, t0, tag
        self.kills = []

    def run(self):
        k = 1
        while not self.stop.wait(max(0.0, self.t0 + k * self.interval - time.monotonic())):
            k += 1
            # Between attempts (a launcher still restarting) wait for workers.
            while not self.stop.is_set() and not self.watcher.finished.is_set():
                workers = running_workers(self.launcher.pid)
                if workers:
                    break
                self.stop.wait(0.05)
            if self.stop.is_set() or self.watcher.finished.is_set():
                return
            index = self.rng.randrange(len(workers))
            where = self.watcher.where()
            try:
                os.kill(workers[index], signal.SIGKILL)
            except ProcessLookupError:
                continue
            t = time.monotonic() - self.t0
            self.kills.append((t, workers[index], where))
            print(f"    {self.tag} t={t:6.1f}s: SIGKILL worker {index} of {len(workers)} "
                  f"(pid {workers[index]}) at {where}", flush=True)


def run_one(cmd, env, tag, log_path, timeout, interval=None, rng=None):
    """Runs `cmd` in its own session, with faults when `interval` is set."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    watcher = LogWatcher(p.stdout, log_path, t0, tag)
    watcher.start()
    stop = threading.Event()
    injector = None
    if interval:
        injector = FaultInjector(p, watcher, interval, rng, stop, t0, tag)
        injector.start()
    status = "ok"
    next_report = 20.0
    while True:
        try:
            rc = p.wait(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            t = time.monotonic() - t0
            if t > timeout:
                status = f"did not finish in {timeout:.0f}s"
                rc = None
                break
            if t >= next_report:
                print(f"    {tag} t={t:6.1f}s: {watcher.where()}", flush=True)
                next_report += 20.0
    wall = time.monotonic() - t0
    stop.set()
    kill_group(p)
    watcher.join(timeout=10)
    if injector:
        injector.join(timeout=10)
    if rc not in (0, None):
        status = f"exit {rc}"
    return dict(status=status, wall=wall, lines=watcher.lines, log=log_path,
                kills=injector.kills if injector else [])


def kill_group(p):
    """The launcher's session: nothing it started outlives the run."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


# ---- reading the log -------------------------------------------------------------

def attempts(lines):
    """Rank 0's attempts, in order: dicts with resumed_at (global step the
    attempt started from), source (what it resumed from), first and last
    (global steps of its first and last progress lines)."""
    nb = next((int(m.group(4)) for _, l in lines for m in [PROGRESS.search(l)] if m), None)
    if nb is None:
        return []
    out, pending = [], None
    for _, line in lines:
        r = parse_resumed(line)
        if r:
            # "rank 1's checkpoint", "checkpoint /x/last.pt": what, not where.
            source = re.sub(r"rank \d+'s |\s*\S*/\S*", "", r[0]).strip()
            at = ((r[1] - 1) * nb + r[2], source)
            if out and out[-1]["first"] is None and out[-1]["resumed_at"] is None:
                out[-1]["resumed_at"], out[-1]["source"] = at
            else:
                pending = at
        elif BANNER.search(line):
            resumed = pending or (None, None)
            out.append(dict(resumed_at=resumed[0], source=resumed[1], first=None, last=None))
            pending = None
        else:
            m = PROGRESS.search(line)
            if m and not out:  # no banner seen: the run's first attempt
                out.append(dict(resumed_at=None, source=None, first=None, last=None))
            if m:
                step = (int(m.group(1)) - 1) * int(m.group(4)) + int(m.group(3))
                a = out[-1]
                a["first"] = step if a["first"] is None else a["first"]
                a["last"] = step if a["last"] is None else max(a["last"], step)
    for a in out:
        if a["resumed_at"] is None:
            # No resume line: a fresh start, or a format this bench does not
            # know; the first progress line (every iteration) tells.
            a["resumed_at"] = a["first"] - 1 if a["first"] is not None else 0
            a["source"] = "fresh start" if a["resumed_at"] == 0 else "(from progress)"
        if a["last"] is None:
            a["last"] = a["resumed_at"]
    return out


def summarize(result):
    tries = attempts(result["lines"])
    result["restarts"] = max(len(tries) - 1, 0)
    result["redone"] = [a["last"] - b["resumed_at"] for a, b in zip(tries, tries[1:])]
    result["sources"] = [b["source"] for b in tries[1:]]
    final = next((m for _, l in reversed(result["lines"]) for m in [FINAL.search(l)] if m),
                 None)
    result["final"] = (f"acc {float(final.group(2)):.4f} loss {float(final.group(3)):.4f}"
                       if final else "-")
    if result["status"] == "ok" and not final:
        result["status"] = "no final line"
    return result


# ---- the bench -------------------------------------------------------------------

def commands(args, tmp, name, train_size, resolved):
    """(cmd, env) for one run of `name` = elastrun-... or torchrun-..."""
    # Not a worker of an outer launcher's job.
    env = {k: v for k, v in os.environ.items()
           if k not in CONTRACT_VARS and not k.startswith("PET_")}
    out = os.path.join(tmp, name)
    if name.startswith("elastrun"):
        cmd = [args.elastrun, "run", "--nproc-per-node", "2", "--max-restarts",
               str(MAX_RESTARTS), "--standby", "--run-id", f"goodput-{name}",
               "--log-dir", os.path.join(tmp, "logs"),
               args.trainer, "--config", CONFIG, *overrides(args, train_size),
               "train.log_period=1", f"train.output_dir={out}"]
        return cmd, env
    cmd = [TORCH_PYTHON, "-c", TORCHRUN_PATCH, "--standalone", "--nproc_per_node",
           "2", "--max_restarts", str(MAX_RESTARTS), "--log_dir", os.path.join(tmp, "logs", name),
           os.path.join(ROOT, "bench/ddp_reference.py"), "--config", resolved,
           "--output-dir", out, "--log-period", "1",
           "--checkpoint-dir", os.path.join(out, "weights"), "--resume"]
    return cmd, env


def overrides(args, train_size):
    return ["data.synthetic=true", f"+data.synthetic_train_size={train_size}",
            f"+data.synthetic_test_size={args.test_size}", f"train.epochs={args.epochs}",
            "train.threads=1"]


def calibrate(args, tmp):
    """Images/s of fault-free elastrun on 2 ranks, from a short run."""
    size = GLOBAL_BATCH * (40 if args.quick else 120)
    cmd, env = commands(args, tmp, "elastrun-calibration", size, None)
    cmd = [c for c in cmd if not c.startswith("train.epochs=")] + ["train.epochs=1"]
    r = run_one(cmd, env, "calibration", os.path.join(tmp, "calibration.log"), 300)
    try:
        with open(os.path.join(tmp, "elastrun-calibration", "metrics.csv")) as f:
            ips = float(list(csv.DictReader(f))[-1]["images_per_sec"])
    except (OSError, IndexError, KeyError, ValueError) as e:
        tail = "\n".join(l for _, l in r["lines"][-20:])
        sys.exit(f"goodput: the calibration run failed ({r['status']}, {e}):\n{tail}")
    return ips


def check_binaries(args):
    missing = [b for b in (args.elastrun, args.trainer) if not os.access(b, os.X_OK)]
    if missing:
        sys.exit(f"goodput: {', '.join(missing)} missing: build them first (torch on): "
                 f"cmake -S . -B build -G Ninja && ninja -C build elastrun elastrun-train")
    if "torchrun" in args.launchers and subprocess.run(
            [TORCH_PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        sys.exit(f"goodput: {TORCH_PYTHON} cannot import torch (python3-torch), which the "
                 f"torchrun runs need; --launchers elastrun runs without it")


def fmt_redone(values):
    if not values:
        return "-"
    return f"{statistics.fmean(values):.1f} ({min(values)}-{max(values)})"


def print_table(args, results, train_size):
    nb = -(-train_size // GLOBAL_BATCH)
    print()
    print(f"CNN, synthetic data: {train_size} train / {args.test_size} test samples, "
          f"{args.epochs} epochs x {nb} steps on 2 ranks; a fault every {args.interval:g} s "
          f"(seed {args.seed}); load {loadavg():.2f} at the end")
    print()
    print("| launcher | faults | wall s | faults injected | restarts | steps redone per fault, "
          "mean (min-max) | s lost per fault | resumed from | goodput | final |")
    print("|---|---|---:|---:|---:|---|---:|---|---:|---|")
    for launcher in args.launchers:
        clean, faulted = results.get(f"{launcher}-clean"), results.get(f"{launcher}-faults")
        for label, r in (("none", clean), (f"every {args.interval:g} s", faulted)):
            if r is None:
                continue
            goodput, lost = "", ""
            if r is faulted and clean and clean["status"] == r["status"] == "ok":
                goodput = f"**{clean['wall'] / r['wall']:.1%}**"
                if r["kills"]:
                    lost = f"{(r['wall'] - clean['wall']) / len(r['kills']):.1f}"
            sources = ", ".join(f"{s} x{r['sources'].count(s)}"
                                for s in sorted(set(r["sources"]))) or "-"
            note = "" if r["status"] == "ok" else f" ({r['status']})"
            name = "elastrun run --standby" if launcher == "elastrun" else "torchrun"
            print(f"| {name} | {label} | {r['wall']:.1f}{note} | {len(r['kills'])} | "
                  f"{r['restarts']} | {fmt_redone(r['redone'])} | {lost} | {sources} | {goodput} | "
                  f"{r['final']} |")
    print()
    print("goodput = useful-work time / total time = fault-free wall time / faulted wall "
          "time (the same work); steps redone = last step reached - step resumed at; "
          "s lost per fault = (faulted - fault-free wall time) / faults.")


def add_shared_flags(ap):
    """The flags goodput.py and node_goodput.py share: the training set's
    size, the launchers, the binaries and --keep (parse_launchers checks)."""
    ap.add_argument("--train-size", type=int,
                    help="synthetic training samples (default: sized from a calibration run)")
    ap.add_argument("--launchers", default="elastrun,torchrun",
                    help="comma-separated: elastrun, torchrun (default: %(default)s)")
    ap.add_argument("--elastrun", default=os.path.join(ROOT, "build/bin/elastrun"),
                    help="the elastrun binary (default: build/bin/elastrun)")
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build/bin/elastrun-train"),
                    help="the trainer binary (default: build/bin/elastrun-train)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs)")


def parse_launchers(ap, args):
    """args.launchers as a list; an unknown name is a usage error."""
    args.launchers = [l for l in args.launchers.split(",") if l]
    for l in args.launchers:
        if l not in ("elastrun", "torchrun"):
            ap.error(f"--launchers: unknown {l!r} (elastrun, torchrun)")


def parse_args():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--minutes", type=float, help="fault-free elastrun run length (default 3)")
    ap.add_argument("--interval", type=float, help="seconds between faults (default 30)")
    ap.add_argument("--epochs", type=int, help="epochs per run (default 15, the config's)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: ~18 s runs, 8 epochs, a fault every 10 s")
    ap.add_argument("--test-size", type=int, default=1024,
                    help="synthetic test samples, evaluated after every epoch (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault RNG (default: %(default)s)")
    ap.add_argument("--timeout-factor", type=float, default=5.0,
                    help="a run is stopped after this x the calibrated run length + 60 s "
                         "(default: %(default)s)")
    add_shared_flags(ap)
    args = ap.parse_args()
    quick = args.quick
    # Quick: at least one fault in elastrun's run; longer than torchrun's
    # restart (its 5 s monitor interval + starting Python and torch), or its
    # run, which only checkpoints at the end of an epoch, could not advance.
    args.minutes = args.minutes or (0.3 if quick else 3.0)
    args.interval = args.interval or (10.0 if quick else 30.0)
    args.epochs = args.epochs or (8 if quick else 15)
    parse_launchers(ap, args)
    return args


def prepare(args, tmp):
    """Prints the run's first line; returns the training set's size
    (--train-size, else calibrated so that --epochs take --minutes on 2 ranks
    without faults) and the path of the resolved config (tmp/resolved.yaml)
    that elastrun-train's overrides make and the reference reads."""
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, nproc "
          f"{os.cpu_count()}, load {loadavg():.2f}; logs in {tmp}", flush=True)
    train_size = args.train_size
    if not train_size:
        ips = calibrate(args, tmp)
        samples = ips * args.minutes * 60 / args.epochs
        train_size = max(GLOBAL_BATCH * 4, int(samples) // GLOBAL_BATCH * GLOBAL_BATCH)
        print(f"calibration: {ips:,.0f} images/s on 2 ranks -> {train_size} samples per "
              f"epoch for {args.minutes:g} min", flush=True)
    resolved = os.path.join(tmp, "resolved.yaml")
    with open(resolved, "w") as f:
        subprocess.run([args.trainer, "--config", CONFIG, *overrides(args, train_size),
                        "--print-config"], cwd=ROOT, stdout=f, check=True, timeout=60)
    return train_size, resolved


@contextlib.contextmanager
def temporary_folder(prefix, keep):
    """A fresh folder for a bench's files, removed at the end unless `keep`
    (then its path is printed)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    args = parse_args()
    check_binaries(args)
    with temporary_folder("elastrun-goodput-", args.keep) as tmp:
        train_size, resolved = prepare(args, tmp)
        timeout = args.timeout_factor * args.minutes * 60 + 60
        results = {}
        for launcher in args.launchers:
            for kind in ("clean", "faults"):
                name = f"{launcher}-{kind}"
                cmd, env = commands(args, tmp, name, train_size, resolved)
                print(f"{name}: started (load {loadavg():.2f})", flush=True)
                r = run_one(cmd, env, name, os.path.join(tmp, name + ".log"), timeout,
                            args.interval if kind == "faults" else None,
                            random.Random(args.seed))
                results[name] = summarize(r)
                print(f"{name}: {r['status']}, {r['wall']:.1f} s, {len(r['kills'])} fault(s), "
                      f"{r['restarts']} restart(s), redone {r['redone']}", flush=True)
                if r["status"] != "ok":
                    print("  log tail:\n" + "\n".join(l for _, l in r["lines"][-15:]),
                          flush=True)
        print_table(args, results, train_size)


if __name__ == "__main__":
    main()
