#!/usr/bin/env python3
"""Rendezvous time of torchrun's multi-node form: N `elastrun run` processes
vs N torchrun agents (c10d backend), the same flags, on loopback.

Each trial starts N launchers with `--nnodes N --nproc-per-node 1
--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT --rdzv-id ID` (a fresh
port and id per trial) and a shell worker that creates DIR/started.<RANK>.
rendezvous time: t0 = time.time_ns() just before the first launcher is
                 started; end = the newest mtime of the N started.* files
                 (every worker of the one round has started).
to exit:         t0 -> the last launcher has exited (the workers exit at
                 once): the round, the workers, the exit barrier and the
                 launchers' own shutdown.

Launchers alternate per trial (elastrun, torchrun, elastrun, ...) so that
load drifts hit both alike. Standard library only; torchrun runs under
/usr/bin/python3 (Debian's python3-torch) with launch_bench.py's patch for
torch 1.13 on Python 3.11. See bench/README.md.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_bench import CONTRACT_VARS, TORCH_PYTHON, TORCHRUN_PATCH  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHERS = ("elastrun", "torchrun")
WORKER = ': > "$BENCH_DIR/started.$RANK"'


class TrialError(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(launcher, n, port, run_id, tmp, args):
    """The N launchers' argv (one per node)."""
    out = []
    for i in range(n):
        flags = ["--nnodes", str(n), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                 "--log-dir", os.path.join(tmp, f"logs-{i}")]
        if launcher == "elastrun":
            out.append([args.elastrun, "run", *flags, "--no-python",
                        "/bin/sh", "-c", WORKER])
        else:  # torch 1.13 knows only the underscored names
            flags = ["--" + f[2:].replace("-", "_") if f.startswith("--") else f
                     for f in flags]
            out.append([TORCH_PYTHON, "-c", TORCHRUN_PATCH, *flags, "--no_python",
                        "/bin/sh", "-c", WORKER])
    return out


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()


def trial(launcher, n, args):
    """(rendezvous seconds, to-exit seconds)."""
    tmp = tempfile.mkdtemp(prefix=f"multinode-bench-{launcher}-")
    env = {k: v for k, v in os.environ.items()
           if k not in CONTRACT_VARS and not k.startswith("PET_")}
    env["BENCH_DIR"] = tmp
    cmds = commands(launcher, n, free_port(), uuid.uuid4().hex[:12], tmp, args)
    procs = []
    ok = False
    try:
        t0 = time.time_ns()
        for i, cmd in enumerate(cmds):
            out = open(os.path.join(tmp, f"console-{i}"), "w")
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=out,
                                          start_new_session=True))
        deadline = time.monotonic() + args.timeout
        started = []
        while len(started) < n:
            started = [f for f in os.listdir(tmp) if f.startswith("started.")]
            if time.monotonic() > deadline:
                raise TrialError(f"timeout ({len(started)}/{n} workers started)")
            time.sleep(0.002)
        end = max(os.stat(os.path.join(tmp, f)).st_mtime_ns for f in started)
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        exited = time.time_ns()
        bad = [p.returncode for p in procs if p.returncode != 0]
        if bad:
            raise TrialError(f"launchers exited with {bad}")
        ok = True
        return (end - t0) / 1e9, (exited - t0) / 1e9
    except subprocess.TimeoutExpired:
        raise TrialError("timeout waiting for the launchers to exit")
    finally:
        kill_all(procs)
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif not ok:
            print(f"  (kept {tmp})", file=sys.stderr)


def cell(values):
    if not values:
        return "-"
    return (f"{statistics.median(values):.3f} "
            f"({min(values):.3f}–{max(values):.3f})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", default="2,4,8", help="launcher processes (2,4,8)")
    p.add_argument("--reps", type=int, default=5, help="trials per cell (5)")
    p.add_argument("--timeout", type=float, default=120, help="per trial, s (120)")
    p.add_argument("--launchers", default=",".join(LAUNCHERS))
    p.add_argument("--elastrun", default=os.path.join(REPO, "build/bin/elastrun"))
    p.add_argument("--keep", action="store_true", help="keep every trial's folder")
    args = p.parse_args()
    ns = [int(x) for x in args.n.split(",")]
    launchers = args.launchers.split(",")
    res = {}
    for n in ns:
        for rep in range(args.reps):
            for launcher in launchers:
                try:
                    rdzv, done = trial(launcher, n, args)
                    res.setdefault((launcher, n), []).append((rdzv, done))
                    print(f"N={n} {launcher} #{rep}: rendezvous {rdzv:.3f}s, "
                          f"exit {done:.3f}s", file=sys.stderr)
                except TrialError as e:
                    print(f"N={n} {launcher} #{rep}: {e}", file=sys.stderr)
    print(f"\nseconds, median (min–max) of {args.reps}; nproc {os.cpu_count()}\n")
    head = "| N | " + " | ".join(f"{l} rendezvous | {l} to exit" for l in launchers)
    if launchers == list(LAUNCHERS):
        head += " | torchrun / elastrun (rendezvous)"
    print(head + " |")
    print("|" + "---|" * (head.count("|")))
    for n in ns:
        row = [str(n)]
        for launcher in launchers:
            vals = res.get((launcher, n), [])
            row += [cell([v[0] for v in vals]), cell([v[1] for v in vals])]
        if launchers == list(LAUNCHERS):
            e = res.get(("elastrun", n), [])
            t = res.get(("torchrun", n), [])
            row.append(f"{statistics.median(v[0] for v in t) / statistics.median(v[0] for v in e):.1f}x"
                       if e and t else "-")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
