#!/usr/bin/python3
"""torchrun's c10d rendezvous at scale, the reference for elastrun-rendezvous-bench.

N simulated agents (threads, or processes with --mode processes) each build
the handler torchrun builds (`get_rendezvous_handler(RendezvousParameters(
backend="c10d", endpoint=..., run_id=..., min_nodes=N, max_nodes=N))`, a
`DynamicRendezvousHandler` over the C10d TCPStore backend) and call
`next_rendezvous()` at once; the figure is first call -> every agent
returned, and the assignment is checked (ranks 0..N-1 unique, one store).
As with torchrun, one agent hosts the TCPStore: here the harness process
hosts it (`TCPStore(is_master=True)`) and every agent connects with
`is_host=False`.

Each trial runs in its own subprocess with a hard deadline (--timeout per
trial), so a run that does not finish is reported as "> bound" with how many
agents had returned, and is killed by its pid.

Run with Debian's interpreter (the only one with torch):
    /usr/bin/python3 bench/torch_rendezvous_bench.py --n 10,100,1000 --reps 3
"""
import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one_trial(n, mode, timeout, out):
    """Runs one trial in this process; prints one JSON line."""
    import logging
    logging.disable(logging.WARNING)
    from datetime import timedelta
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    port = free_port()
    run_id = "bench-%d" % os.getpid()
    endpoint = "127.0.0.1:%d" % port

    def make_handler():
        params = RendezvousParameters(backend="c10d", endpoint=endpoint, run_id=run_id,
                                      min_nodes=n, max_nodes=n, is_host=False,
                                      join_timeout=int(timeout) + 60)
        return get_rendezvous_handler(params)

    result = {"n": n, "mode": mode, "ok": False}
    deadline = time.monotonic() + timeout

    if mode == "threads":
        store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=timeout + 60))
        handlers = [None] * n
        returned = [None] * n  # (t, rank, world_size, store_port)
        errors = []
        t_setup = time.monotonic()
        for i in range(n):
            handlers[i] = make_handler()
        result["setup_s"] = time.monotonic() - t_setup
        go = threading.Event()
        t0_box = []

        def agent(i):
            go.wait()
            try:
                st, rank, world = handlers[i].next_rendezvous()
                returned[i] = (time.monotonic(), rank, world)
            except Exception as e:  # noqa: BLE001 - reported
                errors.append(repr(e))

        threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        cpu0 = cpu_s()
        t0_box.append(time.monotonic())
        go.set()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        t0 = t0_box[0]
        done = [r for r in returned if r is not None]
        result["returned"] = len(done)
        result["cpu_s"] = cpu_s() - cpu0
        if errors:
            result["error"] = errors[0]
        elif len(done) < n:
            result["error"] = "timeout"
            result["elapsed_s"] = time.monotonic() - t0
        else:
            ranks = sorted(r[1] for r in done)
            worlds = {r[2] for r in done}
            if ranks != list(range(n)) or worlds != {n}:
                result["error"] = "inconsistent ranks/world sizes"
            else:
                result["ok"] = True
                result["value_s"] = max(r[0] for r in done) - t0
        del store
    else:
        # Processes: forked before the store exists (no threads yet), each
        # builds its handler, waits for "go" on a pipe, rendezvous, writes
        # "rank world t" back. CLOCK_MONOTONIC is system-wide.
        import torch  # noqa: F401 - loaded once, shared by the forks
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        ready_r, ready_w = os.pipe()
        pids = []
        for i in range(n):
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(go_w)
                    h = make_handler()
                    os.write(ready_w, b"r")
                    os.read(go_r, 1)
                    st, rank, world = h.next_rendezvous()
                    os.write(res_w, ("%d %d %.9f\n" % (rank, world, time.monotonic())).encode())
                finally:
                    os._exit(0)
            pids.append(pid)
        store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=timeout + 60))
        t_setup = time.monotonic()
        got = 0
        while got < n and time.monotonic() < deadline:
            got += len(os.read(ready_r, n - got))
        result["setup_s"] = time.monotonic() - t_setup
        cpu0 = cpu_s()
        t0 = time.monotonic()
        os.write(go_w, b"g" * n)
        os.close(res_w)
        buf = b""
        os.set_blocking(res_r, False)
        lines = []
        while len(lines) < n and time.monotonic() < deadline:
            try:
                chunk = os.read(res_r, 65536)
            except BlockingIOError:
                time.sleep(0.002)
                continue
            if not chunk:
                break
            buf += chunk
            *lines_done, buf = buf.split(b"\n")
            lines.extend(lines_done)
        result["returned"] = len(lines)
        result["cpu_s"] = cpu_s() - cpu0  # the store host (this process)
        if len(lines) < n:
            result["error"] = "timeout"
            result["elapsed_s"] = time.monotonic() - t0
        else:
            rows = [l.split() for l in lines]
            ranks = sorted(int(r[0]) for r in rows)
            worlds = {int(r[1]) for r in rows}
            if ranks != list(range(n)) or worlds != {n}:
                result["error"] = "inconsistent ranks/world sizes"
            else:
                result["ok"] = True
                result["value_s"] = max(float(r[2]) for r in rows) - t0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in pids:
            os.waitpid(pid, 0)
    result["hwm_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out.write(json.dumps(result) + "\n")
    out.flush()
    # Agents still blocked in next_rendezvous (timeout) would keep the
    # interpreter alive; leave at once.
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="10,100,1000", help="agent counts (default 10,100,1000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", default="threads", help="threads,processes (default threads)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="bound of one trial in seconds (default 120)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one_trial(args.one, args.mode, args.timeout, sys.stdout)
        return 0

    rows = []
    for n in [int(x) for x in args.n.split(",") if x]:
        for mode in [m for m in args.mode.split(",") if m]:
            trials = []
            for rep in range(args.reps):
                cmd = [sys.executable, os.path.abspath(__file__), "--one", str(n),
                       "--mode", mode, "--timeout", str(args.timeout)]
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
                try:
                    out, err = p.communicate(timeout=args.timeout + 60)
                except subprocess.TimeoutExpired:
                    # The trial could not even report at its own deadline
                    # (N threads starve its main thread of the GIL).
                    os.killpg(p.pid, signal.SIGKILL)  # its own group: agents included
                    out, err = p.communicate()
                    trials.append({"ok": False, "error": "harness timeout",
                                   "killed_after_s": args.timeout + 60})
                    print("N=%d %s rep %d: killed after %.0f s" % (
                        n, mode, rep, args.timeout + 60), file=sys.stderr)
                    break
                try:
                    t = json.loads(out.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    t = {"ok": False, "error": "no result: " + err.strip()[-300:]}
                print("N=%d %s rep %d: %s" % (n, mode, rep, json.dumps(t)), file=sys.stderr)
                trials.append(t)
                if not t.get("ok"):
                    break  # a bound reached: do not repeat it
            rows.append((n, mode, trials))

    print("\n| N | agents | time s, median (min-max) | CPU s (harness process) | "
          "peak RSS MiB | handlers built s | ok |")
    print("|---:|---|---|---:|---:|---:|---|")
    for n, mode, trials in rows:
        ok = [t for t in trials if t.get("ok")]
        if ok:
            v = [t["value_s"] for t in ok]
            time_s = "%.3f (%.3f-%.3f)" % (statistics.median(v), min(v), max(v))
        else:
            t = trials[-1] if trials else {}
            if t.get("error") == "harness timeout":
                time_s = "> %.0f (bound; no result, killed after %.0f s)" % (
                    args.timeout, t["killed_after_s"])
            elif t.get("error") == "timeout":
                time_s = "> %.0f (bound; %d of %d returned)" % (
                    t.get("elapsed_s", args.timeout), t.get("returned", 0), n)
            else:
                time_s = "failed: %s" % t.get("error", "?")[:80]
        cpu = statistics.median([t.get("cpu_s", 0) for t in trials]) if trials else 0
        hwm = max([t.get("hwm_mib", 0) for t in trials] or [0])
        setup = statistics.median([t.get("setup_s", 0) for t in trials]) if trials else 0
        print("| %d | %s | %s | %.2f | %.0f | %.2f | %d/%d |" % (
            n, mode, time_s, cpu, hwm, setup, len(ok), len(trials)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
