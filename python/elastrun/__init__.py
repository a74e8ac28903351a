"""elastrun's helper for Python workers.

``elastrun.report(step, **metrics)`` tells the local agent (``elastrun run``
or ``elastrund``) that this rank reached ``step``: the agent's hang detection
counts it as progress, and ``elastrun status`` shows the newest report.

Importing it in a worker also registers ``faulthandler`` on SIGUSR1, so a
rank declared hung writes every thread's Python stack into its log before it
is stopped. Outside elastrun (no ``ELASTRUN_AGENT_SOCKET``) both are no-ops:
a script that uses the helper still runs anywhere. ``report`` never blocks
and never raises.
"""

import faulthandler
import math
import os
import re
import signal
import socket

__all__ = ["report"]

# The agent's datagram format (common/progress.h): "job=J secret=X rank=R
# step=S name=value ...", at most 4096 bytes and 32 metrics.
_MAX_BYTES = 4096
_MAX_METRICS = 32
_JOB_OK = re.compile(r"^[A-Za-z0-9_.@-]{1,256}$")
_SECRET_OK = re.compile(r"^[0-9a-f]{1,64}$")
_BAD_CHAR = re.compile(r"[^A-Za-z0-9_.-]")

_sock = None


def _in_worker():
    return bool(os.environ.get("ELASTRUN_AGENT_SOCKET"))


def _clean(name):
    name = _BAD_CHAR.sub("_", str(name)[:64])
    return name or "_"


def _encode(step, metrics):
    items = []
    job = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if _JOB_OK.match(job):
        items.append("job=" + job)
    secret = os.environ.get("ELASTRUN_AGENT_SECRET", "")
    if _SECRET_OK.match(secret):
        items.append("secret=" + secret)
    try:
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        rank = 0
    items.append("rank=%d" % rank)
    items.append("step=%d" % int(step))
    out = " ".join(items)
    n = 0
    for name, value in sorted(metrics.items()):
        if n == _MAX_METRICS:
            break
        n += 1
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        name = _clean(name)
        if not math.isfinite(value) or name in ("job", "secret", "rank", "step"):
            continue
        item = " %s=%r" % (name, value)
        if len(out) + len(item) > _MAX_BYTES:
            break
        out += item
    return out.encode("ascii")


def report(step, **metrics):
    """Reports that this rank reached ``step`` (an int) with ``metrics``
    (numbers; others are left out). Cheap enough for every step."""
    global _sock
    path = os.environ.get("ELASTRUN_AGENT_SOCKET", "")
    if not path:
        return
    try:
        if _sock is None:
            _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sock.setblocking(False)
        _sock.sendto(_encode(step, metrics), path)
    except (OSError, ValueError, TypeError, OverflowError):
        pass  # no agent, or its socket is full: the report is dropped


def _register_stack_dump():
    # Only in a worker, and only where the program has no SIGUSR1 handler
    # of its own.
    if not _in_worker() or not hasattr(signal, "SIGUSR1"):
        return
    try:
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (ValueError, RuntimeError, OSError):
        pass  # not the main thread, or no stderr: no dump, nothing breaks


_register_stack_dump()
