"""The systemd units pass `systemd-analyze verify`, keep the settings a node
needs (sandboxing for the service; cgroup delegation, its own stop and no
sandbox that breaks workers for the daemon), and start the real binaries with
their example config files: the daemon registers with the service. The HA
variant too: three etcd members from the example /etc/default/etcd (as
Debian's etcd.service passes it, each host's addresses moved to loopback),
three replicas from rendezvous-ha.conf, of which one leads, and a daemon
given the three replicas, which follows the next leader when the first
stops.

    python3 systemd_test.py BIN_DIR

BIN_DIR holds elastrun-rendezvous, elastrund and elastrun. Exit 77 (skip)
where systemd-analyze or etcd (Debian's etcd-server) is missing, once the
rest passed."""

import os
import re
import shutil
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "systemd")
UNITS = ["elastrun-rendezvous.service", "elastrund.service", "elastrun-rendezvous-ha.service"]
HA_UNIT = UNITS[2]
# The variables an etcd member of a new cluster needs (the rest have defaults).
ETCD_VARS = ["ETCD_NAME", "ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_CLUSTER_STATE",
             "ETCD_INITIAL_CLUSTER_TOKEN", "ETCD_LISTEN_PEER_URLS",
             "ETCD_INITIAL_ADVERTISE_PEER_URLS", "ETCD_LISTEN_CLIENT_URLS",
             "ETCD_ADVERTISE_CLIENT_URLS"]


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
    print(f"systemd-analyze verify: {len(paths)} units clean")
    # The services' sandboxes, scored by systemd itself (0 best, 10 worst;
    # up to 3.9 is "OK"). Offline analysis appeared in systemd 250.
    for unit, path in zip(UNITS, paths):
        if unit == "elastrund.service":
            continue
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--man=no",
                            "--threshold=30", path], capture_output=True, text=True)
        level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
        if level is None:
            print(f"systemd-analyze security --offline unavailable: {r.stderr.strip()}")
            return
        if r.returncode != 0:
            util.fail(f"{unit}: exposure {level.group(1)}, above 3.0:\n" + r.stdout)
        print(f"systemd-analyze security: {unit} exposure {level.group(1)}")


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


def check_ha_unit(bin_dir):
    """The HA unit keeps the service's sandbox with nothing writable (its
    state is in etcd), restarts whatever the exit, and its config file
    names flags the binary has, etcd as the store and the token file the
    unit asserts. Returns the config."""
    s = parse_unit(os.path.join(HERE, HA_UNIT))
    for key, value in [("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                       ("NoNewPrivileges", "yes"), ("PrivateTmp", "yes"), ("Restart", "always"),
                       ("StartLimitIntervalSec", "0"), ("User", "root")]:
        expect(HA_UNIT, s, key, value)
    if "StateDirectory" in s:
        util.fail(f"{HA_UNIT}: StateDirectory= but the state is in etcd: nothing to write")
    if UNITS[0] not in one(HA_UNIT, s, "Conflicts").split():
        util.fail(f"{HA_UNIT}: must conflict with {UNITS[0]} (the same port)")
    words = exec_start(HA_UNIT, s, bin_dir)
    conf_path = words[words.index("--config") + 1]
    conf = util.read_conf(conf_path)
    where = "systemd/" + os.path.basename(conf_path)
    flags = util.flags_of_help(bin_dir, "elastrun-rendezvous")
    for key in conf:
        if "--" + key not in flags:
            util.fail(f"{where}: {key} is not a flag of elastrun-rendezvous")
    util.check_listen_security(conf, where)
    if not conf.get("store", "").startswith("etcd://") or "state-dir" in conf:
        util.fail(f"{where}: store = etcd://... and no state-dir (they exclude each other)")
    if conf.get("token-file") != one(HA_UNIT, s, "AssertPathExists"):
        util.fail(f"{where}: token-file = {conf.get('token-file')} is not the file "
                  f"{HA_UNIT} asserts ({one(HA_UNIT, s, 'AssertPathExists')})")
    if "advertise" not in conf:
        util.fail(f"{where}: no advertise (the default is the bound 0.0.0.0:PORT)")
    return conf


def host_of(url):
    return urllib.parse.urlsplit(url).hostname


def etcd_members(ha_conf):
    """[(name, env)] of the three members: etcd.default as written for the
    first, and for the others as its comment says (ETCD_NAME and the host's
    address in the *_URLS lines changed). Checked against each other and
    against rendezvous-ha.conf and elastrund.conf's replica list. Returns
    (members, [each replica's --advertise])."""
    where = "systemd/etcd.default"
    env = util.read_conf(os.path.join(HERE, "etcd.default"))
    for key in ETCD_VARS:
        if key not in env:
            util.fail(f"{where}: no {key}")
    cluster = [m.split("=", 1) for m in env["ETCD_INITIAL_CLUSTER"].split(",")]
    if len(cluster) != 3:
        util.fail(f"{where}: ETCD_INITIAL_CLUSTER has {len(cluster)} members, want 3")
    if [env["ETCD_NAME"], env["ETCD_INITIAL_ADVERTISE_PEER_URLS"]] not in cluster:
        util.fail(f"{where}: ETCD_NAME={env['ETCD_NAME']} with peer URL "
                  f"{env['ETCD_INITIAL_ADVERTISE_PEER_URLS']} is not in ETCD_INITIAL_CLUSTER")
    first = host_of(env["ETCD_INITIAL_ADVERTISE_PEER_URLS"])
    members = []
    for name, peer_url in cluster:
        host = host_of(peer_url)
        member = {k: (v.replace(f"//{first}:", f"//{host}:") if k.endswith("_URLS") else v)
                  for k, v in env.items()}
        member["ETCD_NAME"] = name
        if member["ETCD_INITIAL_ADVERTISE_PEER_URLS"] != peer_url:
            util.fail(f"{where}: member {name}'s peer URL is "
                      f"{member['ETCD_INITIAL_ADVERTISE_PEER_URLS']}, not {peer_url}")
        members.append((name, member))
    # The replicas dial the members' client URLs.
    store = ha_conf["store"].removeprefix("etcd://").split(",")
    clients = [urllib.parse.urlsplit(m["ETCD_ADVERTISE_CLIENT_URLS"]).netloc for _, m in members]
    if sorted(store) != sorted(clients):
        util.fail(f"rendezvous-ha.conf: store = {ha_conf['store']}, but the members' client "
                  f"URLs are {', '.join(clients)}")
    # A replica beside each member; the file is the first host's.
    adv_host, adv_port = ha_conf["advertise"].rsplit(":", 1)
    if adv_host != first:
        util.fail(f"rendezvous-ha.conf: advertise = {ha_conf['advertise']}, but etcd.default "
                  f"is for the host {first}: the two files are one host's")
    advertise = [f"{host_of(url)}:{adv_port}" for _, url in cluster]
    with open(os.path.join(HERE, "elastrund.conf")) as f:
        listed = re.search(r"^#\s*rendezvous\s*=\s*(\S+,\S+)\s*$", f.read(), re.M)
    if listed is None or listed.group(1).split(",") != advertise:
        util.fail(f"elastrund.conf: the commented replica list must be "
                  f"rendezvous = {','.join(advertise)}")
    print(f"etcd.default, rendezvous-ha.conf and elastrund.conf agree on "
          f"{len(members)} hosts")
    return members, advertise


def start_ha(bin_dir, tmp, ha_conf, members, advertise):
    """Three etcd members with the example's variables, as the only ones in
    their environment (Debian's unit passes the file and no arguments),
    then three replicas and a daemon (check_replicas)."""
    loopback = util.Loopback()
    started = []
    try:
        etcds = []
        for name, member in members:
            env = {k: loopback(v) for k, v in member.items()}
            env["ETCD_DATA_DIR"] = os.path.join(tmp, "etcd-" + name)
            env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
            etcds.append(([], env))
        started += util.start_etcd(etcds)
        for p in started:
            unknown = [line for line in p.lines if "unrecognized environment variable" in line]
            if unknown:
                util.fail("etcd.default: etcd does not know:\n" + "\n".join(unknown))
        print(f"{len(started)} etcd members from etcd.default serve clients")
        s = parse_unit(os.path.join(HERE, HA_UNIT))
        replicas = [exec_start(HA_UNIT, s, bin_dir)[1:] + [
            "--store", loopback(ha_conf["store"]), "--advertise", loopback(a),
            "--listen", loopback(a)] for a in advertise]
        d = parse_unit(os.path.join(HERE, UNITS[1]))
        started += util.check_replicas(bin_dir, tmp, replicas,
                                       exec_start(UNITS[1], d, bin_dir)[1:],
                                       loopback(",".join(advertise)))
    finally:
        for p in reversed(started):
            p.stop()
    print("3 replicas from rendezvous-ha.conf: one leads, a daemon given the three follows "
          "the next leader")


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
    ha_conf = check_ha_unit(bin_dir)
    members, advertise = etcd_members(ha_conf)
    missing = []
    tmp = util.temp_dir("elastrun-systemd-test-")
    try:
        start_both(bin_dir, tmp)
        if util.etcd_binary() is None:
            missing.append("etcd (Debian package etcd-server): the HA setup not started")
        else:
            os.mkdir(os.path.join(tmp, "ha"))
            start_ha(bin_dir, os.path.join(tmp, "ha"), ha_conf, members, advertise)
        if shutil.which("systemd-analyze") is None:
            missing.append("systemd-analyze (Debian package systemd): units not verified")
        else:
            verify(bin_dir, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if missing:
        util.skip("; ".join(missing) + "; the rest passed")
    print("PASS")


if __name__ == "__main__":
    main()
