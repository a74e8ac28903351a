#!/usr/bin/env python3
"""Launch and restart latency: `elastrun run` (with and without --standby)
vs torchrun, same workers.

launch latency:  t0 = time.time_ns() just before the launcher is started;
                 end = the latest ready.0.<rank> timestamp (each rank writes
                 CLOCK_REALTIME ns right after its first barrier).
restart latency: with --max-restarts 1 and --hang, once every rank of
                 attempt 0 is ready, the rank-1 worker (rank 0 when N=1) is
                 found through /proc/*/environ (a unique marker variable plus
                 RANK=...) and SIGKILLed; t_kill = time.time_ns() right before
                 os.kill; end = the latest ready.1.<rank> timestamp.
                 With elastrun-standby the kill waits until the N standby
                 processes (marker set, no RANK= in /proc/PID/environ, not
                 the launcher) exist and are idle (see wait_standbys).
stop time:       SIGTERM to the launcher -> the launcher has exited.

One trial measures all three (the launch is the same whether or not a kill
follows). Standard library only. See bench/README.md.
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = "/usr/bin/python3"  # the only interpreter with torch
READY_RE = re.compile(r"^ready\.(\d+)\.(\d+)$")
LAUNCHERS = ("elastrun", "elastrun-standby", "torchrun")
MARKER_VAR = "ELASTRUN_BENCH_MARKER"
# Variables of the bench's own environment that must not leak into a run.
CONTRACT_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
)

# Debian's torch 1.13.1 torchrun on Python 3.11: Std.from_str iterates the
# IntFlag, which no longer yields NONE/ALL, and returns None for "0" (the
# default --redirects). Patch that one function where it has that bug (a
# newer torch runs unpatched), then run torchrun's main.
TORCHRUN_PATCH = r"""
import re
import torch.distributed.elastic.multiprocessing.api as _api
def _from_str(vm):
    if re.match(_api._VALUE_REGEX, vm):
        return _api.Std(int(vm))
    if re.match(_api._MAPPING_REGEX, vm):
        return {int(i): _api.Std(int(v))
                for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match <{_api._VALUE_REGEX}> or <{_api._MAPPING_REGEX}>")
if _api.Std.from_str("0") is None:
    _api.Std.from_str = staticmethod(_from_str)
from torch.distributed.run import main
main()
"""


class TrialError(Exception):
    pass


def worker_cmd(worker, args, ready_dir):
    """(program, args, is_python) for a worker kind."""
    extra = shlex.split(args.worker_args)
    if worker == "cpp":
        return [args.cpp_worker, "--ready-dir", ready_dir, "--hang", *extra], False
    if worker == "train":  # elastrun-train: ready files by ELASTRUN_TRAIN_READY_DIR
        return [args.train_worker, *extra], False
    return [args.python_worker, "--ready-dir", ready_dir,
            *python_keepalive(args.python_worker), *extra], True


def python_keepalive(path):
    """--hang, or (a ddp_worker.py without it) slow steps that keep it alive."""
    with open(path) as f:
        if '"--hang"' in f.read():  # its add_argument("--hang", ...)
            return ["--hang"]
    return ["--steps", "1000000", "--step-ms", "1000"]


def launcher_cmd(launcher, worker, n, args, tmp):
    ready_dir = os.path.join(tmp, "ready")
    log_dir = os.path.join(tmp, "logs")
    os.mkdir(ready_dir)
    prog, is_python = worker_cmd(worker, args, ready_dir)
    env = {k: v for k, v in os.environ.items()
           if k not in CONTRACT_VARS and not k.startswith("PET_")}
    env["ELASTRUN_TRAIN_READY_DIR"] = ready_dir  # read by elastrun-train only
    common = ["--nproc-per-node", str(n), "--max-restarts", "1",
              "--log-dir", log_dir]
    if launcher == "torchrun":  # torch 1.13 knows only the underscored names
        common = ["--" + c[2:].replace("-", "_") if c.startswith("--") else c
                  for c in common]
    if launcher in ("elastrun", "elastrun-standby"):
        if is_python:
            env["ELASTRUN_PYTHON"] = args.python
        cmd = [args.elastrun, "run", *common,
               *(["--standby"] if launcher == "elastrun-standby" else []),
               *([] if is_python else ["--no-python"]),
               *args.elastrun_extra.split(), *prog]
    else:
        cmd = [args.python, "-c", TORCHRUN_PATCH, "--standalone", *common,
               *([] if is_python else ["--no_python"]),
               *args.torchrun_extra.split(), *prog]
    return cmd, env, ready_dir


def ready_times(ready_dir, attempt):
    """{rank: ns} of the ready.<attempt>.<rank> files present now."""
    out = {}
    for name in os.listdir(ready_dir):
        m = READY_RE.match(name)
        if m and int(m.group(1)) == attempt:
            with open(os.path.join(ready_dir, name)) as f:
                text = f.read().strip()
            if text:  # created atomically, but be safe
                out[int(m.group(2))] = int(text)
    return out


def wait_ready(ready_dir, attempt, n, proc, deadline, what):
    while True:
        t = ready_times(ready_dir, attempt)
        if len(t) >= n:
            return max(t.values())
        if proc.poll() is not None:
            raise TrialError(f"{what}: launcher exited with {proc.returncode} "
                             f"({len(t)}/{n} ranks ready)")
        if time.monotonic() > deadline:
            raise TrialError(f"timeout: {what} ({len(t)}/{n} ranks ready)")
        time.sleep(0.002)


def read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:  # gone, or not ours
        return None
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def stat_of(pid):
    """/proc/PID/stat fields after the command: [state, ppid, pgrp, session,
    ...] (field 3 onwards of proc(5)), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def ppid_of(pid):
    st = stat_of(pid)
    return int(st[1]) if st else None


def cpu_ticks(st):
    return int(st[11]) + int(st[12])  # utime + stime, all threads


def marked_pids(marker):
    """{pid: environ} of every live process started with our marker."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        env = read_environ(int(name))
        if env and env.get(MARKER_VAR) == marker:
            out[int(name)] = env
    return out


def find_worker(marker, rank, restart):
    """pid of the worker process with RANK=rank in attempt `restart`.

    Several matches (a wrapper that forks) -> the top-most one, whose exit is
    what the launcher sees."""
    found = {pid for pid, env in marked_pids(marker).items()
             if env.get("RANK") == str(rank)
             and env.get("TORCHELASTIC_RESTART_COUNT") == str(restart)}
    top = [p for p in found if ppid_of(p) not in found]
    return min(top) if top else None


def wait_standbys(marker, n, launcher_pid, proc, deadline, until="idle"):
    """Waits until the next attempt's N standbys exist and are idle.

    A standby is a process with our marker whose /proc/PID/environ has no
    RANK= (it gets RANK only with its activation, which does not change
    /proc/PID/environ), other than the launcher. Idle: all N sleeping
    (state S, blocked on the standby socket) with no CPU time used over
    IDLE_MS, i.e. their libtorch start-up is done. Returns the seconds from
    the call until they exist and until they are idle."""
    idle_ms = 50
    t0 = time.monotonic()
    t_exist = None
    last = None  # (pids, total cpu ticks, since)
    while True:
        pids = sorted(pid for pid, env in marked_pids(marker).items()
                      if pid != launcher_pid and "RANK" not in env)
        top = [p for p in pids if ppid_of(p) not in pids]  # no wrappers' kids
        if len(top) >= n:
            now = time.monotonic()
            if t_exist is None:
                t_exist = now - t0
                if until == "exist":
                    return t_exist, t_exist
            stats = [stat_of(p) for p in top]
            if all(stats):
                ticks = sum(cpu_ticks(st) for st in stats)
                sleeping = all(st[0] == "S" for st in stats)
                if last and last[0] == top and last[1] == ticks and sleeping:
                    if now - last[2] >= idle_ms / 1000:
                        return t_exist, now - t0
                else:
                    last = (top, ticks, now)
        if proc.poll() is not None:
            raise TrialError(f"launcher exited with {proc.returncode} "
                             f"while waiting for standbys ({len(pids)}/{n})")
        if time.monotonic() > deadline:
            raise TrialError(f"timeout: waiting for {n} standbys "
                             f"({len(pids)} without RANK found)")
        time.sleep(0.005)


def session_pids(sid):
    """Live processes in session `sid` (the launcher's: start_new_session)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat_of(int(name))
            if st and st[3] == str(sid) and st[0] != "Z":  # zombies: dead
                out.append(int(name))
    return out


def cleanup(proc, marker):
    """Leave nothing behind. Each attempt (and the standby set) of elastrun
    has its own process group inside the launcher's session, so: SIGKILL the
    launcher's group, then every process group found in its session or
    holding a marked process, then any marked process by pid. Bounded (5 s).
    Returns how many marked/session processes are still alive."""
    own_pgrp = os.getpgrp()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while True:
        left = set(marked_pids(marker)) | set(session_pids(proc.pid))
        left.discard(os.getpid())
        if not left:
            return 0
        for pid in left:
            st = stat_of(pid)
            if st and int(st[2]) not in (0, own_pgrp):
                try:
                    os.killpg(int(st[2]), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return len(left)
        time.sleep(0.01)


def run_trial(launcher, worker, n, args):
    """{'launch': s, 'restart': s, 'stop': s} for one trial, or TrialError."""
    tmp = tempfile.mkdtemp(prefix=f"elastrun-bench-{launcher}-{worker}-{n}-")
    marker = uuid.uuid4().hex
    cmd, env, ready_dir = launcher_cmd(launcher, worker, n, args, tmp)
    env[MARKER_VAR] = marker
    out_path = os.path.join(tmp, "console.log")
    res = {}
    ok = False
    with open(out_path, "wb") as out:
        deadline = time.monotonic() + args.timeout
        t0 = time.time_ns()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=REPO)
        try:
            end0 = wait_ready(ready_dir, 0, n, proc, deadline, "attempt 0")
            res["launch"] = (end0 - t0) / 1e9
            if not args.no_restart:
                victim_rank = 1 if n > 1 else 0
                if launcher == "elastrun-standby":
                    res["standby_exist"], res["standby_idle"] = wait_standbys(
                        marker, n, proc.pid, proc, deadline, args.standby_wait)
                pid = None
                while pid is None:
                    pid = find_worker(marker, victim_rank, 0)
                    if pid is None:
                        if time.monotonic() > deadline:
                            raise TrialError("timeout: finding the rank "
                                             f"{victim_rank} worker")
                        time.sleep(0.002)
                t_kill = time.time_ns()
                os.kill(pid, signal.SIGKILL)
                end1 = wait_ready(ready_dir, 1, n, proc, deadline, "attempt 1")
                res["restart"] = (end1 - t_kill) / 1e9
            t_term = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=args.stop_timeout)
                res["stop"] = time.monotonic() - t_term
            except subprocess.TimeoutExpired:
                res["stop"] = None
                res["note"] = (f"launcher still running {args.stop_timeout}s "
                               "after SIGTERM")
            ok = True
        finally:
            left = cleanup(proc, marker)
            if left:
                print(f"  warning: {left} marked processes survived SIGKILL",
                      file=sys.stderr)
            if not ok or args.keep:
                print(f"  console/logs kept in {tmp}", file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    return res


def fmt(values):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.3f}"
    return f"{med:.3f} ({min(values):.3f}-{max(values):.3f})"


def ratio(a, b):
    if not a or not b:
        return "-"
    return f"{statistics.median(a) / statistics.median(b):.1f}x"


def run_cell(launcher, worker, n, args, notes):
    """args.reps trials of one cell: {"launch": [s, ...], "restart": [...],
    "stop": [...], "standby_idle": [...], "status": "" | "timeout" | "failed"}.
    The first failed trial ends the cell (keeps the total bounded); failures
    and launcher notes are appended to `notes`."""
    cell = {"launch": [], "restart": [], "stop": [], "standby_idle": [],
            "status": ""}
    for rep in range(args.reps):
        print(f"N={n} {worker} {launcher} rep {rep + 1}/{args.reps}"
              " ...", end=" ", file=sys.stderr, flush=True)
        try:
            r = run_trial(launcher, worker, n, args)
        except TrialError as e:
            print(e, file=sys.stderr)
            cell["status"] = ("timeout" if str(e).startswith("timeout")
                              else "failed")
            notes.append(f"N={n} {worker} {launcher} rep {rep + 1}: {e}")
            break
        for k in ("launch", "restart", "stop", "standby_idle"):
            if r.get(k) is not None:
                cell[k].append(r[k])
        if "note" in r:
            notes.append(f"N={n} {worker} {launcher} rep {rep + 1}: "
                         f"{r['note']}")
        print(" ".join(f"{k}={v:.3f}s" for k, v in r.items()
                       if isinstance(v, float)), file=sys.stderr, flush=True)
    return cell


def print_table(head, rows):
    """A Markdown table, columns padded to their widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    line = lambda cells: "| " + " | ".join(
        c.ljust(w) for c, w in zip(cells, widths)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def make_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", default="1,2,4,8", help="world sizes (1,2,4,8)")
    p.add_argument("--workers", default="cpp,python", help="cpp,python")
    p.add_argument("--launchers", default=",".join(LAUNCHERS),
                   help="elastrun,elastrun-standby,torchrun (all three; "
                   "elastrun-standby = elastrun run --standby)")
    p.add_argument("--reps", type=int, default=5, help="trials per cell (5)")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds per trial before the cell is a timeout (120)")
    p.add_argument("--stop-timeout", type=float, default=40,
                   help="seconds to wait for the launcher after SIGTERM (40)")
    p.add_argument("--standby-wait", choices=("idle", "exist"), default="idle",
                   help="elastrun-standby: kill once the N standbys are idle "
                   "(start-up done; default) or as soon as they exist")
    p.add_argument("--no-restart", action="store_true",
                   help="measure the launch only")
    p.add_argument("--elastrun", default=os.path.join(REPO, "build/bin/elastrun"))
    p.add_argument("--cpp-worker",
                   default=os.path.join(REPO, "build/bin/elastrun-test-worker"))
    p.add_argument("--python-worker",
                   default=os.path.join(REPO, "tests/python/ddp_worker.py"))
    p.add_argument("--train-worker",
                   default=os.path.join(REPO, "build/bin/elastrun-train"),
                   help="the 'train' worker (gpu_bench.py's; not in --workers)")
    p.add_argument("--elastrun-extra", default="",
                   help="extra flags for elastrun run (one string)")
    p.add_argument("--torchrun-extra", default="",
                   help="extra flags for torchrun, e.g. '--monitor_interval 0.1'")
    p.add_argument("--keep", action="store_true",
                   help="keep every trial's folder (console and logs)")
    p.add_argument("--python", default=TORCH_PYTHON,
                   help="the interpreter with torch: torchrun's, and elastrun's "
                   "for .py workers (ELASTRUN_PYTHON) (default: %(default)s)")
    p.add_argument("--worker-args", default="",
                   help="extra arguments for the worker, after its own (one "
                   "string, split as a shell would)")
    return p


def main():
    p = make_parser()
    args = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    ns = [int(x) for x in args.n.split(",") if x]
    workers = [w for w in args.workers.split(",") if w]
    launchers = [l for l in args.launchers.split(",") if l]
    for w in workers:
        if w not in ("cpp", "python"):
            p.error(f"unknown worker {w!r}")
    for l in launchers:
        if l not in LAUNCHERS:
            p.error(f"unknown launcher {l!r}")

    notes = []
    if any(l.startswith("elastrun") for l in launchers) and not os.access(args.elastrun, os.X_OK):
        p.error(f"{args.elastrun} not found: build first (ninja -C build)")
    if "cpp" in workers and not os.access(args.cpp_worker, os.X_OK):
        notes.append(f"cpp worker skipped: {args.cpp_worker} not found")
        workers.remove("cpp")
    if "python" in workers and not os.path.exists(args.python_worker):
        notes.append(f"python worker skipped: {args.python_worker} not found")
        workers.remove("python")
    if "python" in workers and "--hang" not in python_keepalive(
            args.python_worker):
        notes.append("python worker has no --hang: kept alive with "
                     "--steps 1000000 --step-ms 1000 instead")

    # results[(n, worker, launcher)] = {"launch": [...], ..., "status": str}
    results = {}
    for n in ns:
        for worker in workers:
            for launcher in launchers:
                results[(n, worker, launcher)] = run_cell(
                    launcher, worker, n, args, notes)

    print()
    print(f"# elastrun vs torchrun, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"nproc={os.cpu_count()}, reps={args.reps}; seconds, median "
          "(min-max)")
    print()
    # Ratios on the elastrun rows: torchrun's median / this row's median.
    standby = "elastrun-standby" in launchers
    head = ["N", "worker", "launcher", "launch", "restart", "stop",
            *(["standbys idle"] if standby else []),
            "launch torchrun/this", "restart torchrun/this"]
    rows = []
    for n in ns:
        for worker in workers:
            for launcher in launchers:
                c = results.get((n, worker, launcher))
                if c is None:
                    continue
                t = results.get((n, worker, "torchrun"))
                show_ratio = launcher != "torchrun" and t is not None
                rows.append([
                    str(n), worker, launcher,
                    fmt(c["launch"]) + (f" [{c['status']}]" if c["status"] else ""),
                    fmt(c["restart"]), fmt(c["stop"]),
                    *([fmt(c["standby_idle"]) if launcher == "elastrun-standby"
                       else ""] if standby else []),
                    ratio(t["launch"], c["launch"]) if show_ratio else "",
                    ratio(t["restart"], c["restart"]) if show_ratio else "",
                ])
    print_table(head, rows)
    if notes:
        print()
        for note in notes:
            print(f"- {note}")
    print()
    print("launch: start -> every rank past its first barrier; restart: "
          "SIGKILL of one worker -> every rank of attempt 1 past its first "
          "barrier; stop: SIGTERM -> launcher exited.")
    if standby:
        print("standbys idle: attempt 0 ready -> the N standbys exist and "
              "are idle (the kill waits for this; not part of restart)"
              + ("" if args.standby_wait == "idle" else
                 "; --standby-wait exist: killed as soon as they exist")
              + ".")
    if "torchrun" in launchers and not args.torchrun_extra:
        print("torchrun runs with its defaults (--monitor_interval 5).")
    failed = any(c["status"] for c in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
