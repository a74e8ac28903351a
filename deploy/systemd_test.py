"""The systemd units pass `systemd-analyze verify`, keep the settings a node
needs (sandboxing for the service; cgroup delegation, its own stop and no
sandbox that breaks workers for the daemon), and start the real binaries with
their example config files: the daemon registers with the service.

    python3 systemd_test.py BIN_DIR

BIN_DIR holds elastrun-rendezvous, elastrund and elastrun. Exit 77 (skip)
where systemd-analyze is missing."""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "systemd")
UNITS = ["elastrun-rendezvous.service", "elastrund.service"]


def parse_unit(path):
    """{key: [values]} of a unit file's settings (sections merged: the keys
    checked here are unique across them)."""
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;[":
                continue
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def one(unit, settings, key):
    if key not in settings:
        util.fail(f"{unit}: no {key}=")
    return settings[key][-1]


def expect(unit, settings, key, value):
    got = one(unit, settings, key)
    if got != value:
        util.fail(f"{unit}: {key}={got}, want {key}={value}")


def exec_start(unit, settings, bin_dir):
    """ExecStart's words with /usr/bin/X -> BIN_DIR/X where not installed
    and /etc/elastrun/X.conf -> this folder's X.conf (the file installed
    there)."""
    words = one(unit, settings, "ExecStart").split()
    out = []
    for w in words:
        if w.startswith("/usr/bin/") and not os.path.exists(w):
            w = os.path.join(bin_dir, os.path.basename(w))
        elif w.startswith("/etc/elastrun/"):
            w = os.path.join(HERE, os.path.basename(w))
        out.append(w)
    return out


def verify(bin_dir, tmp):
    """systemd-analyze verify on copies whose ExecStart names binaries that
    exist (verify requires them); any warning fails too."""
    paths = []
    for unit in UNITS:
        with open(os.path.join(HERE, unit)) as f:
            text = f.read()

        def local(m):
            exe = m.group(1)
            return "ExecStart=" + (exe if os.path.exists(exe)
                                   else os.path.join(bin_dir, os.path.basename(exe)))
        text = re.sub(r"^ExecStart=(\S+)", local, text, flags=re.M)
        path = os.path.join(tmp, unit)
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
    # --man=no: the man pages are the package's, not installed on a build machine.
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", *paths],
                       capture_output=True, text=True)
    output = (r.stdout + r.stderr).strip()
    if r.returncode != 0 or output:
        util.fail(f"systemd-analyze verify: exit {r.returncode}:\n{output}")
    print("systemd-analyze verify: both units clean")
    # The service's sandbox, scored by systemd itself (0 best, 10 worst;
    # up to 3.9 is "OK"). Offline analysis appeared in systemd 250.
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--man=no",
                        "--threshold=30", paths[0]], capture_output=True, text=True)
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    if level is None:
        print(f"systemd-analyze security --offline unavailable: {r.stderr.strip()}")
    elif r.returncode != 0:
        util.fail(f"elastrun-rendezvous.service: exposure {level.group(1)}, above 3.0:\n"
                  + r.stdout)
    else:
        print(f"systemd-analyze security: elastrun-rendezvous.service exposure {level.group(1)}")


def check_service_unit():
    unit = "elastrun-rendezvous.service"
    s = parse_unit(os.path.join(HERE, unit))
    for key, value in [("StateDirectory", "elastrun"), ("ProtectSystem", "strict"),
                       ("ProtectHome", "yes"), ("NoNewPrivileges", "yes"),
                       ("PrivateTmp", "yes"), ("Restart", "on-failure")]:
        expect(unit, s, key, value)
    # Under ProtectSystem=strict only the StateDirectory is writable: the
    # state and the token file the service makes must be in it.
    conf = util.read_conf(os.path.join(HERE, "rendezvous.conf"))
    util.check_listen_security(conf, "systemd/rendezvous.conf")
    state = "/var/lib/" + one(unit, s, "StateDirectory")
    for key in ["state-dir", "token-file"]:
        if not (conf.get(key, "") + "/").startswith(state + "/"):
            util.fail(f"rendezvous.conf: {key} = {conf.get(key)} is not in {state}, "
                      "the only folder the unit may write")


def check_daemon_unit():
    unit = "elastrund.service"
    s = parse_unit(os.path.join(HERE, unit))
    for key, value in [("StateDirectory", "elastrund"), ("RuntimeDirectory", "elastrund"),
                       ("Delegate", "yes"), ("KillMode", "mixed"),
                       ("Restart", "on-failure")]:
        expect(unit, s, key, value)
    if one(unit, s, "User") != "root":
        util.fail(f"{unit}: the daemon must run as root to run workers as their owners")
    # Settings that would break workers (their folders, /tmp, /dev/shm,
    # GPUs, set-uid helpers) or the daemon's cgroups.
    for key in ["ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges",
                "PrivateDevices", "ProtectControlGroups", "DevicePolicy", "ProtectClock",
                "CapabilityBoundingSet", "ReadOnlyPaths", "InaccessiblePaths"]:
        if key in s:
            util.fail(f"{unit}: {key}= breaks workers or cgroups; it must not be set")
    conf = util.read_conf(os.path.join(HERE, "elastrund.conf"))
    # systemd's SIGKILL must come after the daemon's own stop of its workers.
    stop = util.seconds(one(unit, s, "TimeoutStopSec"))
    grace = util.seconds(conf.get("shutdown-timeout", "30s"))
    if stop <= grace:
        util.fail(f"{unit}: TimeoutStopSec ({stop}s) must exceed the daemon's "
                  f"shutdown-timeout ({grace}s)")
    runtime = "/run/" + one(unit, s, "RuntimeDirectory") + "/"
    if not conf.get("cred-socket", "").startswith(runtime):
        util.fail(f"elastrund.conf: cred-socket = {conf.get('cred-socket')} is not in {runtime}")
    if conf.get("token-file") != "/etc/elastrun/token":
        util.fail("elastrund.conf: token-file must be /etc/elastrun/token (README, The token)")


def start_both(bin_dir, tmp):
    """The units' command lines, with their config files, start and meet."""
    s = parse_unit(os.path.join(HERE, UNITS[0]))
    # The state folder as systemd makes it (StateDirectory=, the unit's
    # user's, StateDirectoryMode=): the service checks it and must accept it.
    os.mkdir(os.path.join(tmp, "state"))
    os.chmod(os.path.join(tmp, "state"), int(one(UNITS[0], s, "StateDirectoryMode"), 8))
    service, port = util.start_service(bin_dir, exec_start(UNITS[0], s, bin_dir)[1:], tmp)
    try:
        d = parse_unit(os.path.join(HERE, UNITS[1]))
        daemon = util.start_daemon(bin_dir, exec_start(UNITS[1], d, bin_dir)[1:], tmp, port,
                                   "unit-node")
        code = daemon.stop()
        if code not in (0, 128 + 15):
            util.fail(f"elastrund exited {code} on SIGTERM:\n" + "\n".join(daemon.lines))
    finally:
        service.stop()
    print("the units' command lines and config files start the service and a daemon")


def main():
    if len(sys.argv) != 2:
        util.fail("usage: systemd_test.py BIN_DIR")
    bin_dir = os.path.abspath(sys.argv[1])
    check_service_unit()
    check_daemon_unit()
    tmp = util.temp_dir("elastrun-systemd-test-")
    try:
        start_both(bin_dir, tmp)
        if shutil.which("systemd-analyze") is None:
            util.skip("systemd-analyze not found (Debian package systemd): "
                      "units not verified; the rest passed")
        verify(bin_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
