#!/usr/bin/env python3
"""Failover of the control plane: three elastrun-rendezvous replicas over a
real three-member etcd (Debian's etcd-server), two elastrund nodes and the
real CLI, on loopback.

Per trial (the replica that leads is SIGKILLed each time, then started
again as a follower):
  next write:        SIGKILL of the leader -> the first `elastrun submit`
                     (tried in a loop, one process each, --retry-for 0)
                     that succeeds, through the three endpoints.
  worker restarted:  a 2-node job runs; at the same moment the leader is
                     SIGKILLed and rank 1 exits 1 -> the time the restarted
                     attempt's worker starts (it writes time.time() to a
                     file). The same with no failover is the baseline.
Also: `elastrun submit` round trips (one CLI process each) against one
service with SQLite and against the HA leader over etcd.

The anchors are the documented defaults, not measured here: Kubernetes'
controllers hand over after their leader-election lease (15 s), Slurm's
backup controller takes over after SlurmctldTimeout (120 s), etcd elects a
new leader of its own in about 1-2 s (election timeout 1 s). Standard
library only. See bench/README.md.
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Rank 1 of the first attempt exits 1 once $BENCH_DIR/fail.$ID exists; a
# later attempt records when it started and runs until $BENCH_DIR/done.$ID.
SCRIPT = r'''
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  : > "$BENCH_DIR/up.$BENCH_ID.$RANK"
  while [ ! -e "$BENCH_DIR/fail.$BENCH_ID" ]; do sleep 0.01; done
  [ "$RANK" = 1 ] && exit 1
  while :; do sleep 1; done
fi
python3 -c 'import time; print(repr(time.time()))' > "$BENCH_DIR/restarted.$BENCH_ID.$RANK.tmp"
mv "$BENCH_DIR/restarted.$BENCH_ID.$RANK.tmp" "$BENCH_DIR/restarted.$BENCH_ID.$RANK"
while [ ! -e "$BENCH_DIR/done.$BENCH_ID" ]; do sleep 0.05; done
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.005)
    raise RuntimeError("timed out waiting for " + what)


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Bench:
    def __init__(self, bin_dir, work):
        self.bin = bin_dir
        self.work = work
        self.procs = []
        self.token = os.path.join(work, "token")
        with open(os.open(self.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("failover-bench-token\n")
        self.env = dict(os.environ, ELASTRUN_TOKEN_FILE=self.token, BENCH_DIR=work)

    def start(self, argv, log):
        p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                             env=self.env, start_new_session=True)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def start_etcd(self):
        self.etcd_client = [free_port() for _ in range(3)]
        peers = [free_port() for _ in range(3)]
        cluster = ",".join(f"m{i}=http://127.0.0.1:{peers[i]}" for i in range(3))
        for i in range(3):
            c = f"http://127.0.0.1:{self.etcd_client[i]}"
            p = f"http://127.0.0.1:{peers[i]}"
            self.start(["etcd", "--name", f"m{i}", "--data-dir", f"{self.work}/etcd{i}",
                        "--listen-client-urls", c, "--advertise-client-urls", c,
                        "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                        "--initial-cluster", cluster, "--initial-cluster-state", "new",
                        "--logger", "zap", "--log-level", "error"], f"{self.work}/etcd{i}.log")
        self.etcd = ",".join(f"127.0.0.1:{p}" for p in self.etcd_client)
        wait_for(lambda: subprocess.run(
            ["etcdctl", "--endpoints", self.etcd, "put", "/ready", "1"],
            env=dict(self.env, ETCDCTL_API="3"), capture_output=True).returncode == 0,
            60, "etcd")

    def start_replica(self, i):
        self.replicas[i] = self.start(
            [f"{self.bin}/elastrun-rendezvous", "--listen", f"127.0.0.1:{self.ports[i]}",
             "--store", "etcd://" + self.etcd, "--leader-lease", "2s", "--token-file",
             self.token], f"{self.work}/replica{i}.log")

    def start_control_plane(self):
        self.ports = [free_port() for _ in range(3)]
        self.endpoints = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.replicas = [None] * 3
        for i in range(3):
            self.start_replica(i)
        wait_for(lambda: self.leader() is not None, 30, "a leader")

    def leader(self):
        """The replica the election names (etcd's leader key created first:
        every replica serves its port, followers by passing calls on), if it
        is alive and accepts connections."""
        r = subprocess.run(
            ["etcdctl", "--endpoints", self.etcd, "get", "--prefix", "/elastrun/leader",
             "--sort-by=CREATE", "--order=ASCEND", "--limit=1", "--print-value-only"],
            env=dict(self.env, ETCDCTL_API="3"), capture_output=True, text=True)
        named = r.stdout.strip()
        for i, p in enumerate(self.ports):
            if named == f"127.0.0.1:{p}" and self.replicas[i].poll() is None and accepts(p):
                return i
        return None

    def start_nodes(self, rendezvous):
        for n in range(2):
            self.start([f"{self.bin}/elastrund", "--rendezvous", rendezvous, "--node-id",
                        f"node{n}", "--slots", "4", "--state-dir", f"{self.work}/ds{n}",
                        "--log-dir", f"{self.work}/logs{n}", "--token-file", self.token,
                        "--cred-socket", f"{self.work}/cred{n}.sock"],
                       f"{self.work}/node{n}.log")

    def cli(self, args, rendezvous, timeout=30):
        return subprocess.run([f"{self.bin}/elastrun", args[0], "--rendezvous", rendezvous]
                              + args[1:], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def submit_probe(self, rendezvous):
        r = self.cli(["submit", "--name", "probe", "--nnodes", "1", "--retry-for", "0",
                      "--rpc-timeout", "1s", "--", "/bin/true"], rendezvous)
        return r.returncode == 0

    def next_write(self):
        old = self.leader()
        t0 = time.time()
        self.replicas[old].send_signal(signal.SIGKILL)
        self.replicas[old].wait()
        while not self.submit_probe(self.endpoints):
            if time.time() - t0 > 60:
                raise RuntimeError("no write served within 60 s of the leader's SIGKILL")
        took = time.time() - t0
        self.start_replica(old)
        return took

    def worker_restarted(self, trial, kill_leader):
        env = dict(self.env, BENCH_ID=str(trial))
        r = subprocess.run([f"{self.bin}/elastrun", "submit", "--rendezvous", self.endpoints,
                            "--name", f"w{trial}", "--nnodes", "2", "--nproc-per-node", "1",
                            "--max-restarts", "3", "--", "/bin/sh", "-c", SCRIPT],
                           env=env, capture_output=True, text=True, timeout=90)
        if r.returncode != 0:
            raise RuntimeError("submit: " + r.stdout + r.stderr)
        up = [f"{self.work}/up.{trial}.{k}" for k in range(2)]
        wait_for(lambda: all(os.path.exists(u) for u in up), 60, "the first attempt")
        old = self.leader()
        t0 = time.time()
        if kill_leader:
            self.replicas[old].send_signal(signal.SIGKILL)
        open(f"{self.work}/fail.{trial}", "w").close()
        done = [f"{self.work}/restarted.{trial}.{k}" for k in range(2)]
        wait_for(lambda: all(os.path.exists(d) for d in done), 120, "the restart")
        took = max(float(open(d).read()) for d in done) - t0
        open(f"{self.work}/done.{trial}", "w").close()
        if kill_leader:
            self.replicas[old].wait()
            self.start_replica(old)
        return took

    def submits(self, rendezvous, n):
        times = []
        for _ in range(n):
            t0 = time.time()
            if not self.submit_probe(rendezvous):
                raise RuntimeError("submit failed at " + rendezvous)
            times.append(time.time() - t0)
        return times


def fmt(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--submits", type=int, default=30)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args()
    if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        print("failover_bench: needs etcd and etcdctl (Debian's etcd-server, etcd-client)")
        return 2
    work = tempfile.mkdtemp(prefix="failover-bench.")
    b = Bench(a.bin, work)
    try:
        b.start_etcd()
        b.start_control_plane()
        b.start_nodes(b.endpoints)
        wait_for(lambda: "node1" in b.cli(["nodes"], b.endpoints).stdout, 30, "the nodes")
        write = [b.next_write() for _ in range(a.reps)]
        wait_for(lambda: b.leader() is not None, 30, "a leader")
        base = [b.worker_restarted(100 + t, False) for t in range(a.reps)]
        fail = [b.worker_restarted(200 + t, True) for t in range(a.reps)]
        ha_submit = b.submits(b.endpoints, a.submits)
        # One service with SQLite, the embedded default, for the submit figure.
        port = free_port()
        b.start([f"{a.bin}/elastrun-rendezvous", "--listen", f"127.0.0.1:{port}",
                 "--state-dir", f"{work}/sqlite", "--token-file", b.token],
                f"{work}/sqlite.log")
        wait_for(lambda: accepts(port), 30, "the SQLite service")
        b.start_nodes(f"127.0.0.1:{port}")
        wait_for(lambda: "node1" in b.cli(["nodes"], f"127.0.0.1:{port}").stdout, 30, "nodes")
        sqlite_submit = b.submits(f"127.0.0.1:{port}", a.submits)
    finally:
        b.stop_all()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work)

    print(f"\nFailover of the control plane (3 replicas over a 3-member etcd, leader lease "
          f"2 s), seconds, median (min-max) of {a.reps}:\n")
    print("| what | elastrun | anchor (documented default, not measured) |")
    print("|---|---:|---|")
    print(f"| leader SIGKILL -> next write served | {fmt(write)} | Kubernetes controllers 15 s "
          f"(lease); Slurm backup controller ~120 s (SlurmctldTimeout); etcd's own leader "
          f"1-2 s |")
    print(f"| worker failure -> restarted, leader SIGKILLed at the failure | {fmt(fail)} | - |")
    print(f"| worker failure -> restarted, no failover (baseline) | {fmt(base)} | - |")
    print(f"\n`elastrun submit` round trip (one CLI process each), seconds, median (min-max) "
          f"of {a.submits}:\n")
    print("| service | submit |")
    print("|---|---:|")
    print(f"| one service, SQLite | {fmt(sqlite_submit)} |")
    print(f"| HA leader over etcd (3 endpoints given) | {fmt(ha_submit)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
