#!/usr/bin/env python3
"""Goodput under node loss: 2 nodes x 1 rank in torchrun's multi-node form on
loopback, the non-host node killed every --interval seconds and started again
--down seconds later, under elastrun (build/bin/elastrun-train) and under
torchrun's elastic agent (bench/ddp_reference.py with YOLOv5's per-epoch
last.pt), each also without faults.

A node is a launcher process in a session of its own, with its own folder:
`elastrun run --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d
--rdzv-endpoint 127.0.0.1:PORT --rdzv-id ID --max-restarts 1000 --rdzv-conf
is_host=1|0,last_call_timeout=S ...` or torchrun's same flags (underscored,
torch 1.13). Node 0 hosts the rendezvous (its store or service lives there)
and is never killed; node 1 is the one that fails: at t = k x interval from
the start (while a whole interval is left after it), SIGKILL to its launcher
and every process it started, at once (its process groups, its session, its
marker); --down later the same command starts it again. Each run lasts
--minutes of wall time (less if training ends) and is then killed with
everything it started.

The same work on both sides: configs/fashion_mnist_cnn.yaml on synthetic
data, one intra-op thread per rank; a short fault-free elastrun run sizes the
training set so that its --epochs take --minutes on 2 ranks, as goodput.py
does (a multiple of the global batch at both world sizes: no padding).

Measures (see bench/README.md):
  samples redone = over every rank's sample log (elastrun-train's
    ELASTRUN_TRAIN_SAMPLE_LOG=DIR, ddp_reference.py --sample-log DIR; one
    line per batch when it starts) and every attempt, per epoch: samples
    trained - distinct samples; attributed to the fault before the moment the
    harness read the repeated batch.
  stall = the time with no training: a gap between two of rank 0's progress
    lines (train.log_period=1 / --log-period 1; harness-timestamped as they
    arrive) longer than max(4 x usual, usual + 0.5 s), usual = the median
    gap of its kind (between iterations at the same world size, or across
    an epoch's end), counted above usual.
  goodput = 1 - (stall + redone time) / training time, from rank 0's first
    progress line to the end; redone time = redone samples x the median
    iteration time / samples per iteration at the world size of the moment.
    Training at world size 1 while a node is down is capacity lost, not
    work lost: it does not count against goodput.

Standard library only; torchrun and the reference run under /usr/bin/python3.
Everything goes to a temporary folder, removed at the end (--keep keeps it).

  python3 bench/node_goodput.py                    # the issue's protocol: 3-minute runs, ~14 min
  python3 bench/node_goodput.py --quick            # smoke: 45 s faulted runs, ~2 min
  python3 bench/node_goodput.py --launchers elastrun --no-clean --keep
"""

import argparse
import bisect
import collections
import os
import re
import signal
import statistics
import subprocess
import threading
import time
import uuid

from goodput import (CONFIG, GLOBAL_BATCH, MAX_RESTARTS, PROGRESS, TORCH_PYTHON, LogWatcher,
                     add_shared_flags, check_binaries, children, loadavg, overrides,
                     parse_launchers, prepare, temporary_folder)
from launch_bench import CONTRACT_VARS, MARKER_VAR, TORCHRUN_PATCH, cleanup, marked_pids, \
    session_pids, stat_of
from multinode_bench import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = 2
BATCH = GLOBAL_BATCH // NODES  # the config's data.batch_size, 1 rank per node
SAMPLE_FILE = re.compile(r"^rank\d+\.log$")
WORLD = re.compile(r"(?:elastrun-train|ddp_reference): (\d+) rank\(s\)")
STALL_FACTOR, STALL_FLOOR_S = 4.0, 0.5


# ---- the nodes -------------------------------------------------------------------

def descendants(pid):
    out, todo = set(), [pid]
    while todo:
        for kid in children(todo.pop()):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out


class Node:
    """One "node": a launcher in a session of its own, its output read by a
    goodput.LogWatcher (times from the run's t0); killed with all it started
    and started again with the same command. Not thread-safe: the fault
    thread owns the failing node, the main thread the host."""

    def __init__(self, name, cmd, env, folder, t0, tag):
        self.name, self.cmd, self.env, self.folder, self.t0, self.tag = \
            name, cmd, env, folder, t0, tag
        self.proc, self.marker, self.watchers, self.killed = None, None, [], False

    def start(self):
        self.marker = uuid.uuid4().hex  # per start: never another node's processes
        self.killed = False
        env = dict(self.env, **{MARKER_VAR: self.marker})
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        watcher = LogWatcher(self.proc.stdout, os.path.join(
            self.folder, f"console.{len(self.watchers)}.log"), self.t0, f"{self.tag} {self.name}")
        watcher.start()
        self.watchers.append(watcher)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL to the launcher and everything it started, all at once (a
        machine losing power), then launch_bench.cleanup's sweep (bounded,
        5 s) and the reap. Returns how many processes outlived it."""
        pids = ({self.proc.pid} | descendants(self.proc.pid) | set(session_pids(self.proc.pid))
                | set(marked_pids(self.marker)))
        groups = {int(st[2]) for st in map(stat_of, pids) if st} | {self.proc.pid}
        for group in groups - {0, os.getpgrp()}:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        left = cleanup(self.proc, self.marker)
        self.killed = True
        self.watchers[-1].join(timeout=5)
        return left

    def lines(self):
        return [l for w in self.watchers for l in w.lines]

    def finished(self):
        return any(w.finished.is_set() for w in self.watchers)


def where(nodes):
    """Rank 0's newest progress, "epoch E/N iter I/T", whichever node has it."""
    newest = (-1.0, "starting")
    for node in nodes:
        for w in node.watchers:
            for t, line in reversed(w.lines[-50:]):
                m = PROGRESS.search(line)
                if m:
                    newest = max(newest, (t, m.group(0)))
                    break
    return newest[1]


class SampleTail(threading.Thread):
    """Reads the rank<R>.log sample logs in `folders` as they grow, every
    `period` s, and stamps each whole line with the time it was read:
    lines = [(t, epoch, iteration, (sample index, ...))]."""

    def __init__(self, folders, t0, period=0.2):
        super().__init__(daemon=True)
        self.folders, self.t0, self.period = folders, t0, period
        self.lines, self.offsets, self.partial = [], {}, {}
        self.stop = threading.Event()
        self.bad = 0  # lines that are not "<attempt> <epoch> <iteration> <index>..."

    def poll(self):
        t = time.monotonic() - self.t0
        for folder in self.folders:
            try:
                names = sorted(n for n in os.listdir(folder) if SAMPLE_FILE.match(n))
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as f:
                        f.seek(self.offsets.get(path, 0))
                        data = f.read()
                except OSError:
                    continue
                self.offsets[path] = self.offsets.get(path, 0) + len(data)
                *whole, self.partial[path] = (self.partial.get(path, b"") + data).split(b"\n")
                for raw in whole:
                    fields = raw.split()
                    try:
                        self.lines.append((t, int(fields[1]), int(fields[2]),
                                           tuple(int(k) for k in fields[3:])))
                    except (IndexError, ValueError):
                        self.bad += 1

    def run(self):
        while not self.stop.wait(self.period):
            self.poll()

    def finish(self):
        self.stop.set()
        self.join(timeout=10)
        self.poll()


# ---- one run ---------------------------------------------------------------------

def node_commands(args, folder, launcher, port, run_id, train_size, resolved):
    """(cmd, env) of each node; node 0 hosts the rendezvous."""
    env = {k: v for k, v in os.environ.items()
           if k not in CONTRACT_VARS and not k.startswith(("PET_", "ELASTRUN_TOKEN"))}
    out = []
    for i in range(NODES):
        node = os.path.join(folder, f"node{i}")
        os.makedirs(os.path.join(node, "samples"))
        conf = f"is_host={int(i == 0)}"
        if args.last_call is not None:
            conf += f",last_call_timeout={args.last_call:g}"
        flags = ["--nnodes", f"1:{NODES}", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                 "--max-restarts", str(MAX_RESTARTS), "--rdzv-conf", conf,
                 "--log-dir", os.path.join(node, "logs")]
        if launcher == "elastrun":
            # Pre-started workers take over at a re-form, as in goodput.py.
            standby = ["--standby"] if args.standby else []
            cmd = [args.elastrun, "run", *flags, *standby, args.trainer, "--config", CONFIG,
                   *overrides(args, train_size), "train.log_period=1",
                   f"train.output_dir={os.path.join(node, 'out')}"]
            node_env = dict(env, ELASTRUN_TRAIN_SAMPLE_LOG=os.path.join(node, "samples"))
        else:  # torch 1.13 knows only the underscored flags
            flags = ["--" + f[2:].replace("-", "_") if f.startswith("--") else f for f in flags]
            # One last.pt both nodes read, as YOLOv5 on a shared file system.
            cmd = [TORCH_PYTHON, "-c", TORCHRUN_PATCH, *flags,
                   os.path.join(ROOT, "bench/ddp_reference.py"), "--config", resolved,
                   "--output-dir", os.path.join(node, "out"), "--log-period", "1",
                   "--checkpoint-dir", os.path.join(folder, "weights"), "--resume",
                   "--sample-log", os.path.join(node, "samples")]
            node_env = env
        out.append((cmd, node_env))
    return out


def inject_faults(nodes, args, duration, stop, t0, tag, faults, notes):
    """Thread body: kills nodes[1] at t = k x interval (k >= 1) while a whole
    interval is left after it, and starts it again --down later; appends
    {kill: t, where: rank 0's progress then, back: t started again} to
    `faults`."""
    node, k = nodes[1], 1
    while (k + 1) * args.interval <= duration:
        if stop.wait(max(0.0, t0 + k * args.interval - time.monotonic())):
            return
        k += 1
        t = time.monotonic() - t0
        if node.alive():
            at = where(nodes)
            left = node.kill()
            faults.append(dict(kill=t, where=at, back=None))
            print(f"    {tag} t={t:6.1f}s: killed node 1 (rank 0 at {at})", flush=True)
            if left:
                notes.append(f"t={t:.1f}s: {left} process(es) of node 1 outlived the kill")
        else:
            notes.append(f"t={t:.1f}s: node 1 had already exited ({node.proc.returncode}); "
                         f"not a fault")
            node.kill()
        if stop.wait(max(0.0, t0 + t + args.down - time.monotonic())):
            return
        node.start()
        back = time.monotonic() - t0
        if faults and faults[-1]["kill"] == t:
            faults[-1]["back"] = back
        print(f"    {tag} t={back:6.1f}s: node 1 started again", flush=True)


def run_nodes(args, tmp, launcher, kind, train_size, resolved):
    """One run: both nodes, faults when kind == 'faults'. Returns its record."""
    name = f"{launcher}-{kind}"
    folder = os.path.join(tmp, name)
    port, run_id = free_port(), f"node-goodput-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    nodes = [Node(f"node{i}", cmd, env, os.path.join(folder, f"node{i}"), t0, name)
             for i, (cmd, env) in enumerate(
                 node_commands(args, folder, launcher, port, run_id, train_size, resolved))]
    tail = SampleTail([os.path.join(n.folder, "samples") for n in nodes], t0)
    tail.start()
    for n in nodes:
        n.start()
    duration = args.minutes * 60
    stop, faults, notes = threading.Event(), [], []
    injector = None
    if kind == "faults":
        injector = threading.Thread(target=inject_faults, daemon=True, args=(
            nodes, args, duration, stop, t0, name, faults, notes))
        injector.start()
    status, end, next_report = "ran --minutes", None, 20.0
    host = nodes[0]
    while True:
        t = time.monotonic() - t0
        if t >= duration:
            end = duration
            break
        if any(n.finished() for n in nodes):
            status = "finished"
            break
        if not host.alive():
            status, end = f"host exited {host.proc.returncode}", t
            break
        if t >= next_report:
            print(f"    {name} t={t:6.1f}s: {where(nodes)}", flush=True)
            next_report += 20.0
        stop.wait(0.1)
    stop.set()
    if injector:
        injector.join(timeout=30)
    if status == "finished":  # let the launchers end the run themselves, bounded
        deadline = time.monotonic() + 30
        while any(n.alive() for n in nodes) and time.monotonic() < deadline:
            time.sleep(0.1)
    wall = time.monotonic() - t0
    for n in nodes:
        if n.proc.poll() not in (None, 0) and not n.killed and n is not host:
            notes.append(f"node 1's launcher exited {n.proc.returncode} on its own")
        if n.kill():
            notes.append(f"{n.name}: processes outlived the final kill")
    tail.finish()
    if tail.bad:
        notes.append(f"{tail.bad} unreadable sample-log line(s)")
    lines = sorted(l for n in nodes for l in n.lines())
    return dict(name=name, launcher=launcher, kind=kind, status=status, wall=wall, end=end,
                lines=lines, samples=tail.lines, faults=faults, notes=notes)


# ---- reading a run ---------------------------------------------------------------

def progress_events(lines):
    """Rank 0's progress lines, by arrival: (t, epoch, epochs, iteration,
    iterations per epoch)."""
    return sorted((t, *map(int, m.groups())) for t, l in lines for m in [PROGRESS.search(l)] if m)


def gap_kind(a, b):
    if a[4] == b[4] and a[1] == b[1] and b[3] == a[3] + 1:
        return "inner"
    if a[4] == b[4] and a[3] == a[4] and b[1] == a[1] + 1 and b[3] == 1:
        return "epoch end"
    return "other"


def find_stalls(events, end):
    """Gaps with no training: [(t_from, t_to, seconds stalled)] and the
    median inner gap per iterations-per-epoch (= per world size). `end`
    (None: training finished) closes the last gap."""
    gaps = collections.defaultdict(list)
    for a, b in zip(events, events[1:]):
        gaps[(gap_kind(a, b), b[4])].append(b[0] - a[0])
    inner = {T: statistics.median(v) for (k, T), v in gaps.items() if k == "inner"}
    fallback = statistics.median(v for (k, _), vs in gaps.items() if k == "inner" for v in vs) \
        if inner else 0.0
    stalls = []
    pairs = list(zip(events, events[1:]))
    if end is not None and events and end > events[-1][0]:
        pairs.append((events[-1], (end, None, None, None, events[-1][4])))
    for a, b in pairs:
        kind = gap_kind(a, b) if b[1] is not None else "other"
        usual = gaps.get(("epoch end", b[4])) if kind == "epoch end" else None
        normal = statistics.median(usual) if usual else inner.get(b[4], fallback)
        gap = b[0] - a[0]
        if gap > max(STALL_FACTOR * normal, normal + STALL_FLOOR_S):
            stalls.append((a[0], b[0], gap - normal))
    return stalls, inner


def count_redone(samples):
    """Walks every rank's batches in the order they were read: a sample index
    already trained in the same epoch is trained again. Returns (samples
    trained, {epoch: distinct samples}, [(t, samples redone in that batch)])."""
    seen, redone, trained = collections.defaultdict(set), [], 0
    for t, epoch, _, indices in sorted(samples, key=lambda s: s[0]):
        done, again = seen[epoch], 0
        for k in indices:
            if k in done:
                again += 1
            else:
                done.add(k)
        trained += len(indices)
        if again:
            redone.append((t, again))
    return trained, {e: len(s) for e, s in seen.items()}, redone


def fault_of(faults, t, t_from=None):
    """(index of the fault whose kill is the newest at `t`, phase), or None
    before the first kill. Phase 1 (after node 1 started again) when `t` is
    past that start and, for a stall [t_from, t], the stall does not span
    the kill; else 0."""
    k = bisect.bisect_right([f["kill"] for f in faults], t) - 1
    if k < 0:
        return None
    kill, back = faults[k]["kill"], faults[k]["back"]
    return k, int(back is not None and t >= back and (t_from is None or t_from > kill))


def summarize(r, train_size, nbs):
    """Adds the measures to run record `r` (see the module's docstring)."""
    events = progress_events(r["lines"])
    end = r["end"]
    stalls, inner = find_stalls(events, end)
    r["starts"] = [int(m.group(1)) for _, l in r["lines"] for m in [WORLD.search(l)] if m]
    trained, distinct, redone = count_redone(r["samples"])
    faults = r["faults"]
    # Per fault: [before node 1 started again, after]. A stall belongs to
    # the kill before its end.
    split_redone = [[0, 0] for _ in faults]
    split_stall = [[0.0, 0.0] for _ in faults]
    redone_s, unattributed = 0.0, 0
    times = [e[0] for e in events]
    for t_from, t_to, s in stalls:
        at = fault_of(faults, t_to, t_from)
        if at:
            split_stall[at[0]][at[1]] += s
    for t, n in redone:
        at = fault_of(faults, t)
        if at:
            split_redone[at[0]][at[1]] += n
        else:
            unattributed += n
        if events:  # the world size of the moment, from the newest progress line
            T = events[max(bisect.bisect_right(times, t) - 1, 0)][4]
            world = max(1, round(train_size / (BATCH * T)))
            redone_s += n * inner.get(T, 0.0) / (BATCH * world)
    last_epoch = max(distinct, default=-1)
    r.update(
        trained=trained, redone=sum(n for _, n in redone),
        per_fault=[sum(x) for x in split_redone], split_redone=split_redone,
        split_stall=split_stall, unattributed=unattributed, redone_s=redone_s, stalls=stalls,
        stall_s=sum(s for _, _, s in stalls),
        # Epochs every later one proves complete: each sample once at least.
        missing=sum(train_size - n for e, n in distinct.items() if e < last_epoch),
        window=((end if end is not None else events[-1][0]) - events[0][0]) if events else 0.0,
        nbs=nbs)
    r["goodput"] = (1 - (r["stall_s"] + redone_s) / r["window"]) if r["window"] > 0 else None
    return r


# ---- the table -------------------------------------------------------------------

def fmt_per_fault(r, values, unit=1.0, digits=0):
    if not r["faults"]:
        return f"total {sum(values) / unit:.{digits}f}" if values else "-"
    return (f"{statistics.fmean(values) / unit:.{digits}f} "
            f"(max {max(values) / unit:.{digits}f})")


def print_table(args, results, train_size):
    last_call = (f"{args.last_call:g} s" if args.last_call is not None
                 else "each launcher's own (elastrun 1 s, torchrun 30 s)")
    print()
    print(f"CNN, synthetic data: {train_size} train / {args.test_size} test samples, "
          f"{args.epochs} epochs, batch {BATCH} per rank; {NODES} nodes x 1 rank on loopback, "
          f"node 1 killed every {args.interval:g} s and back {args.down:g} s later; runs of "
          f"{args.minutes:g} min; last_call_timeout {last_call}; load "
          f"{loadavg():.2f} at the end")
    print()
    print("| launcher | faults | wall s | training s | faults injected | rank-0 starts | "
          "samples redone per fault, mean (max) | in global batches (256) | "
          f"in nominal batches ({results and next(iter(results.values()))['nbs']}) | "
          "stall per fault s | redone s per fault | goodput |")
    print("|---|---|---:|---:|---:|---:|---|---|---|---|---:|---:|")
    for r in results.values():
        faults = r["faults"]
        n = max(len(faults), 1)
        stall = (f"{r['stall_s'] / n:.1f}" if faults else f"total {r['stall_s']:.1f}")
        redone_s = (f"{r['redone_s'] / n:.1f}" if faults else f"total {r['redone_s']:.1f}")
        goodput = f"**{r['goodput']:.1%}**" if r["goodput"] is not None else "-"
        note = "" if r["status"] in ("ran --minutes", "finished") else f" ({r['status']})"
        name = "elastrun run" if r["launcher"] == "elastrun" else "torchrun"
        print(f"| {name} | {'every %g s' % args.interval if r['kind'] == 'faults' else 'none'} | "
              f"{r['wall']:.1f}{note} | {r['window']:.1f} | {len(faults)} | {len(r['starts'])} | "
              f"{fmt_per_fault(r, r['per_fault'] or [r['redone']])} | "
              f"{fmt_per_fault(r, r['per_fault'] or [r['redone']], GLOBAL_BATCH, 2)} | "
              f"{fmt_per_fault(r, r['per_fault'] or [r['redone']], r['nbs'], 1)} | "
              f"{stall} | {redone_s} | {goodput} |")
    print()
    print("goodput = 1 - (stall + redone time) / training time (rank 0's first progress line "
          "to the end); world size 1 while a node is down is lost capacity, not counted. "
          "Per fault = the samples trained again after that kill (sample logs).")
    for r in results.values():
        worlds = ",".join(map(str, r["starts"])) or "-"
        extra = [f"world sizes of rank 0's starts: {worlds}",
                 f"samples trained {r['trained']}, redone {r['redone']}"]
        if r["faults"]:
            extra.append("per fault, before + after node 1 started again: redone " + ", ".join(
                f"{a} + {b}" for a, b in r["split_redone"]) + "; stall s " + ", ".join(
                f"{a:.1f} + {b:.1f}" for a, b in r["split_stall"]))
        if r["stalls"]:
            extra.append("stalls: " + ", ".join(f"{a:.1f}-{b:.1f} s" for a, b, _ in r["stalls"]))
        if r["unattributed"]:
            extra.append(f"{r['unattributed']} redone before the first fault")
        if r["missing"]:
            extra.append(f"**{r['missing']} samples of complete epochs never trained**")
        print(f"- {r['name']}: " + "; ".join(extra + r["notes"]))


# ---- the bench -------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--minutes", type=float, help="wall time of each run (default 3)")
    ap.add_argument("--interval", type=float, help="seconds between kills of node 1 (default 30)")
    ap.add_argument("--down", type=float, help="seconds node 1 stays down (default 10)")
    ap.add_argument("--epochs", type=int,
                    help="epochs, which the fault-free elastrun run does in --minutes "
                         "(default 15, the config's)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 45 s faulted runs (one kill at 22 s, 5 s down), a "
                         "fixed small training set, no fault-free runs: ~2 min")
    ap.add_argument("--clean", action=argparse.BooleanOptionalAction,
                    help="also run each launcher without faults (default: yes; --quick: no)")
    ap.add_argument("--test-size", type=int, help="synthetic test samples (default 1024)")
    ap.add_argument("--standby", action=argparse.BooleanOptionalAction, default=True,
                    help="elastrun run --standby: pre-started workers (default on)")
    ap.add_argument("--last-call", type=float,
                    help="last_call_timeout of both launchers' rendezvous, s (default: each "
                         "launcher's own, elastrun 1 s, torchrun 30 s)")
    add_shared_flags(ap)
    args = ap.parse_args()
    quick = args.quick
    # Quick: torchrun needs ~15 s after a kill (its keep-alive, 5 s x 3, drops
    # the dead node from the round) and a few more to start again.
    args.minutes = args.minutes or (0.75 if quick else 3.0)
    args.interval = args.interval or (22.0 if quick else 30.0)
    args.down = args.down or (5.0 if quick else 10.0)
    args.epochs = args.epochs or (100 if quick else 15)
    args.test_size = args.test_size or (256 if quick else 1024)
    args.clean = (not quick) if args.clean is None else args.clean
    if quick and not args.train_size:
        args.train_size = GLOBAL_BATCH * 32
    if args.train_size and args.train_size % GLOBAL_BATCH:
        ap.error(f"--train-size {args.train_size}: not a multiple of the global batch "
                 f"{GLOBAL_BATCH} (batches would be padded)")
    if args.down >= args.interval:
        ap.error("--down must be shorter than --interval")
    parse_launchers(ap, args)
    return args


def nominal_batch(resolved):
    with open(resolved) as f:
        m = re.search(r"^\s*nbs:\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 64


def main():
    args = parse_args()
    check_binaries(args)
    with temporary_folder("elastrun-node-goodput-", args.keep) as tmp:
        train_size, resolved = prepare(args, tmp)
        nbs = nominal_batch(resolved)
        results = {}
        for launcher in args.launchers:
            for kind in (("clean", "faults") if args.clean else ("faults",)):
                print(f"{launcher}-{kind}: started (load {loadavg():.2f})", flush=True)
                r = summarize(run_nodes(args, tmp, launcher, kind, train_size, resolved),
                              train_size, nbs)
                results[r["name"]] = r
                print(f"{r['name']}: {r['status']}, {r['wall']:.1f} s, {len(r['faults'])} "
                      f"fault(s), {len(r['starts'])} rank-0 start(s), redone {r['per_fault']}, "
                      f"stall {r['stall_s']:.1f} s", flush=True)
                if not r["window"]:
                    print("  no progress line; log tail:\n" +
                          "\n".join(l for _, l in r["lines"][-20:]), flush=True)
        print_table(args, results, train_size)


if __name__ == "__main__":
    main()
