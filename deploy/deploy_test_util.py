"""What the deploy tests share: the real service and daemon started from a
config file the way a unit or a manifest starts them (only what must differ
on a test machine overridden on the command line, which wins over the file),
waited for by the lines they print, and stopped by their PIDs."""

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests

# Generous: on a loaded 2-core machine a start can take seconds.
DEADLINE_S = 60


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def skip(message):
    print(f"SKIP: {message}", file=sys.stderr)
    sys.exit(SKIP)


class Process:
    """A started binary whose output lines are read by a thread into a queue,
    so that a test waits on a line with a deadline instead of sleeping."""

    def __init__(self, args, env=None):
        self.args = args
        self.lines = []
        self._queue = queue.Queue()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, env=env,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)  # end of output: the process exited

    def wait_for(self, pattern, count=1):
        """The `count`th match of `pattern` in the lines of output; fails the
        test (with the output so far) when the process exits or the deadline
        passes first."""
        regex = re.compile(pattern)
        for line in self.lines:
            if (m := regex.search(line)) and (count := count - 1) == 0:
                return m
        end = time.monotonic() + DEADLINE_S
        while True:
            line = self.next_line(end)
            if line is None:
                self.stop()
                fail(f"no line matching {pattern!r} from {' '.join(self.args)}; "
                     f"exit {self.proc.returncode}; output:\n" + "\n".join(self.lines))
            if (m := regex.search(line)) and (count := count - 1) == 0:
                return m

    def next_line(self, end):
        """The next line of output (kept in `lines`), or None when the
        process ended or the time `end` (time.monotonic()) came first."""
        try:
            line = self._queue.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            return None
        if line is None:
            self._queue.put(None)  # still ended for the next caller
            return None
        self.lines.append(line)
        return line

    def stop(self):
        """SIGTERM to the process's own group, then SIGKILL after the grace."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def temp_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix)


def write_token(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"deploy-test-token\n")
    os.close(fd)


def start_service(bin_dir, args, tmp):
    """elastrun-rendezvous with `args` (its --config among them), on a free
    loopback port, with state and token in `tmp`. Returns (process, port)."""
    token = os.path.join(tmp, "token")
    if not os.path.exists(token):
        write_token(token)
    p = Process([os.path.join(bin_dir, "elastrun-rendezvous"), *args,
                 "--listen", "127.0.0.1:0", "--state-dir", os.path.join(tmp, "state"),
                 "--token-file", token])
    port = int(p.wait_for(r"listening on 127\.0\.0\.1:(\d+)").group(1))
    return p, port


def start_daemon(bin_dir, args, tmp, port, node_id):
    """elastrund with `args` (its --config among them) registered with the
    service at `port` (a loopback port, or "HOST:PORT,..." for replicas) as
    `node_id`; its state in `tmp`, no credential socket. Returns the process
    once the service accepted the node."""
    rendezvous = port if isinstance(port, str) else f"127.0.0.1:{port}"
    p = Process([os.path.join(bin_dir, "elastrund"), *args,
                 "--rendezvous", rendezvous, "--token-file", os.path.join(tmp, "token"),
                 "--state-dir", os.path.join(tmp, "daemon-" + node_id), "--cred-socket", "none",
                 "--node-id", node_id])
    p.wait_for(r"registered as " + re.escape(node_id))
    return p


def flags_of_help(bin_dir, *command):
    """The long flags `command --help` lists (both spellings)."""
    out = subprocess.run([os.path.join(bin_dir, command[0]), *command[1:], "--help"],
                         capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", out))


def check_listen_security(conf, where):
    """elastrun-rendezvous refuses a non-loopback listen without TLS unless
    the config says insecure (rendezvous/server.cc CheckListenSecurity): a
    shipped config must say one or the other, or the service never starts."""
    host = conf.get("listen", "127.0.0.1:29400").rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "::1", "localhost"):
        return
    if not conf.get("tls-cert") and conf.get("insecure", "false") not in ("true", "1"):
        fail(f"{where}: listen = {conf['listen']} is off loopback with neither tls-cert nor "
             "insecure = true: elastrun-rendezvous would refuse to start")


def read_conf(path):
    """A config file's `name = value` lines as a dict (as common/flags.cc
    reads them)."""
    with open(path) as f:
        return parse_conf(f.read())


def parse_conf(text):
    """read_conf of a config file's text."""
    conf = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        conf[key.strip()] = value
    return conf


def seconds(text):
    """'30s', '1m', '500ms', '60' -> seconds."""
    m = re.fullmatch(r"([0-9.]+)\s*(ms|s|min|m|h)?", text.strip())
    if not m:
        fail(f"not a duration: {text!r}")
    scale = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return float(m.group(1)) * scale


def free_port():
    """A loopback port free now (the kernel's pick, closed again at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loopback:
    """Several hosts of a deploy file on this one: each HOST:PORT the files
    name (after "//", "," or at the start of a value) becomes
    127.0.0.1:P, the same P wherever the same HOST:PORT appears."""

    PATTERN = re.compile(r"(?<![^/,])([A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9a-fA-F:]+\]):(\d+)")

    def __init__(self):
        self.ports = {}

    def __call__(self, text):
        def local(m):
            key = (m.group(1), m.group(2))
            if key not in self.ports:
                self.ports[key] = free_port()
            return f"127.0.0.1:{self.ports[key]}"
        return self.PATTERN.sub(local, text)


def etcd_binary():
    """Debian's etcd-server's etcd, or None where it is not installed."""
    return shutil.which("etcd")


def start_etcd(members):
    """etcd members, each [args] and {env} (on loopback), started together
    (a member is ready only once a majority runs). Returns the processes
    once every member serves clients."""
    procs = [Process([etcd_binary(), *args], env=env) for args, env in members]
    for p in procs:
        p.wait_for(r"ready to serve client requests")
    return procs


def wait_any(procs, pattern):
    """(index, match) of the first of `procs` to print a line matching
    `pattern`; fails the test when none has by the deadline."""
    regex = re.compile(pattern)
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end and any(p.proc.poll() is None for p in procs):
        for i, p in enumerate(procs):
            # A short slice each, so that every process is read in turn.
            line = p.next_line(min(end, time.monotonic() + 0.05))
            if line is not None and (m := regex.search(line)):
                return i, m
    fail(f"none of {len(procs)} processes printed a line matching {pattern!r}:\n"
         + "\n---\n".join("\n".join(p.lines) for p in procs))


def check_replicas(bin_dir, tmp, replicas, daemon_args, rendezvous):
    """The service's replicas over one etcd: `replicas` are their argument
    lists (each its --store, --listen, --advertise on loopback; the token
    file is tmp/token). Exactly one leads (it listens) and the others follow
    it by its advertised address; a daemon given `rendezvous`, the replicas'
    addresses, registers; when the leader stops (it resigns) another leads
    and the daemon registers with it. Returns the processes left running."""
    token = os.path.join(tmp, "token")
    if not os.path.exists(token):
        write_token(token)
    procs = []
    try:
        for args in replicas:
            procs.append(Process([os.path.join(bin_dir, "elastrun-rendezvous"), *args,
                                  "--token-file", token]))
        said = [p.wait_for(r"listening on (\S+)|following the leader at (\S+)") for p in procs]
        leaders = [i for i, m in enumerate(said) if m.group(1)]
        if len(leaders) != 1:
            fail(f"{len(leaders)} replicas lead, want 1:\n"
                 + "\n---\n".join("\n".join(p.lines) for p in procs))
        leader = leaders[0]
        advertised = replicas[leader][replicas[leader].index("--advertise") + 1]
        for i, m in enumerate(said):
            if i != leader and m.group(2) != advertised:
                fail(f"replica {i} follows {m.group(2)}, not the leader's --advertise "
                     f"{advertised}")
        daemon = start_daemon(bin_dir, daemon_args, tmp, rendezvous, "ha-node")
        procs.append(daemon)
        procs[leader].stop()
        followers = [p for i, p in enumerate(procs[:-1]) if i != leader]
        wait_any(followers, r"listening on ")
        daemon.wait_for(r"registered as ha-node", count=2)
        return procs
    except BaseException:
        for p in procs:
            p.stop()
        raise
