"""The HA variant of the manifests (../kubernetes-ha), as kustomize builds
it: etcd's three members and the service's three replicas find each other
by their stable names, only the leader is Ready (the Service the CLI dials
goes to it), the daemons dial the three; then three etcd members, three
replicas and a daemon start from those manifests, each pod's name on
loopback, and the daemon follows the next leader. Run by
kubernetes_test.py."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402
from kubernetes_test_util import (NAMESPACE, Flags, by_kind, check_common,  # noqa: E402
                                  check_config_mount, check_token_mount, check_typed,
                                  conf_dict, conf_of, container, env_value, mount_source,
                                  parse, selects, service_port)

HA_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubernetes-ha")


def load_ha(kubectl, tmp):
    """{"kubernetes-ha": [objects]}: what `kubectl apply -k` applies."""
    path = os.path.join(tmp, "kubernetes-ha.yaml")
    with open(path, "w") as f:
        f.write(kubectl("kustomize", HA_HERE))
    objs = parse(kubectl, path)
    for kind in ["Namespace", "DaemonSet"]:
        by_kind({"": objs}, kind)
    sts = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "StatefulSet")
    if sts != ["elastrun-rendezvous", "etcd"]:
        util.fail(f"kubectl kustomize kubernetes-ha: StatefulSets {sts}, want the replicas' "
                  "and etcd's (the single service removed)")
    print(f"kubectl kustomize builds kubernetes-ha: {len(objs)} objects")
    return {"kubernetes-ha": objs}


def arg_value(args, flag):
    """The value of `flag` in a container's args: `--flag=value` or
    `--flag value`."""
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    util.fail(f"no {flag} in {args}")


def check_pod_name(c, where):
    if env_value(c, "POD_NAME").get("valueFrom", {}).get("fieldRef", {}).get(
            "fieldPath") != "metadata.name":
        util.fail(f"{where}: POD_NAME must be the pod's metadata.name")


def stable_names(files, sts_name, port_name):
    """[POD.SERVICE:PORT] of a StatefulSet's pods: their stable names by
    its governing Service, which must be headless and publish them before
    they are ready (etcd's members, the replicas: each needs the others'
    names while not ready). Returns (names, governing Service's name)."""
    sts = by_kind(files, "StatefulSet", sts_name)[0]
    svc = by_kind(files, "Service", sts["spec"]["serviceName"])[0]
    name = svc["metadata"]["name"]
    if svc["spec"].get("clusterIP") != "None" or not svc["spec"].get(
            "publishNotReadyAddresses") or not selects(svc, sts):
        util.fail(f"Service {name}: the StatefulSet {sts_name}'s governing Service must be "
                  "headless, select its pods and publishNotReadyAddresses: true")
    if sts["spec"].get("podManagementPolicy") != "Parallel":
        util.fail(f"StatefulSet {sts_name}: podManagementPolicy must be Parallel (its pods "
                  "are not ready one by one)")
    port = next(p["containerPort"] for p in container(sts)["ports"] if p["name"] == port_name)
    service_port(files, name, port)
    return [f"{sts_name}-{i}.{name}:{port}" for i in range(sts["spec"]["replicas"])], name


def check_ha_etcd(files):
    """Three members, each its name and URLs from its pod's name, the
    initial cluster their stable names, the data on a PersistentVolume,
    every flag one of the installed etcd's (where there is one). Returns
    the client addresses."""
    sts = by_kind(files, "StatefulSet", "etcd")[0]
    c = container(sts)
    where = "kubernetes-ha/etcd.yaml"
    if sts["spec"]["replicas"] != 3:
        util.fail(f"{where}: {sts['spec']['replicas']} members, want 3")
    check_pod_name(c, where)
    clients, svc = stable_names(files, "etcd", "client")
    peers, _ = stable_names(files, "etcd", "peer")
    args = c["args"]
    if any(not re.fullmatch(r"--[a-z0-9-]+=.+", a) for a in args):
        util.fail(f"{where}: write etcd's args as --flag=value: {args}")
    peer_port = peers[0].rsplit(":", 1)[1]
    client_port = clients[0].rsplit(":", 1)[1]
    want = {
        "--name": "$(POD_NAME)",
        "--initial-cluster": ",".join(f"etcd-{i}=http://{p}" for i, p in enumerate(peers)),
        "--initial-advertise-peer-urls": f"http://$(POD_NAME).{svc}:{peer_port}",
        "--advertise-client-urls": f"http://$(POD_NAME).{svc}:{client_port}",
        "--listen-peer-urls": f"http://0.0.0.0:{peer_port}",
        "--listen-client-urls": f"http://0.0.0.0:{client_port}",
    }
    for flag, value in want.items():
        if arg_value(args, flag) != value:
            util.fail(f"{where}: {flag}={arg_value(args, flag)}, want {value}")
    volume, _ = mount_source(sts, arg_value(args, "--data-dir"))
    if "persistentVolumeClaim" not in volume:
        util.fail(f"{where}: --data-dir is not on the PersistentVolume")
    image_version = re.search(r":v(\d+\.\d+\.\d+)$", c["image"])
    if image_version is None or not image_version.group(1).startswith("3.4."):
        util.fail(f"{where}: image {c['image']}: want etcd 3.4 (Debian 12's etcd-server)")
    etcd = util.etcd_binary()
    if etcd is not None:
        out = subprocess.run([etcd, "--help"], capture_output=True, text=True).stdout
        known = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out))
        for a in args:
            if a.split("=", 1)[0] not in known:
                util.fail(f"{where}: etcd has no flag {a.split('=', 1)[0]}")
        version = subprocess.run([etcd, "--version"], capture_output=True, text=True).stdout
        installed = re.search(r"etcd Version: (\S+)", version).group(1)
        if installed.rsplit(".", 1)[0] != image_version.group(1).rsplit(".", 1)[0]:
            print(f"note: etcd's flags checked against the installed {installed}, "
                  f"the image's is {image_version.group(1)}")
    print(f"etcd: {len(clients)} members at {', '.join(clients)}")
    return clients


def check_ha_rendezvous(files, bin_dir, etcd_clients):
    """Three replicas over etcd's members, with no volume; only the leader
    Ready (a TCP probe on the port only it listens on), and the Service the
    CLI dials going to Ready pods only. Returns (StatefulSet, config,
    replica addresses)."""
    where = "kubernetes-ha/rendezvous.yaml"
    sts = by_kind(files, "StatefulSet", "elastrun-rendezvous")[0]
    spec = sts["spec"]
    if spec["replicas"] != 3:
        util.fail(f"{where}: {spec['replicas']} replicas, want 3")
    if spec.get("updateStrategy", {}).get("type") != "OnDelete":
        util.fail(f"{where}: updateStrategy must be OnDelete (a rolling update waits for "
                  "followers to be Ready, which they never are)")
    if spec.get("volumeClaimTemplates"):
        util.fail(f"{where}: a volume for state, which is in etcd")
    c = container(sts)
    if c["command"] != ["elastrun-rendezvous"]:
        util.fail(f"{where}: command {c['command']}")
    Flags(bin_dir, "elastrun-rendezvous").check(c["args"], where)
    conf_path = c["args"][c["args"].index("--config") + 1]
    check_config_mount(sts, conf_path, "elastrun-rendezvous", "rendezvous.conf")
    conf = conf_dict(conf_of(files, "elastrun-rendezvous", "rendezvous.conf"))
    util.check_listen_security(conf, f"{where}: rendezvous.conf")
    if "state-dir" in conf or conf.get("store") != "etcd://" + ",".join(etcd_clients):
        util.fail(f"{where}: rendezvous.conf: store = {conf.get('store')}, want "
                  f"etcd://{','.join(etcd_clients)} and no state-dir")
    check_token_mount(sts, conf["token-file"])
    replicas, governing = stable_names(files, "elastrun-rendezvous", "grpc")
    port = int(conf["listen"].rsplit(":", 1)[1])
    if not replicas[0].endswith(f":{port}"):
        util.fail(f"{where}: container port grpc is not the listen port {port}")
    check_pod_name(c, where)
    if c["args"][c["args"].index("--advertise") + 1] != f"$(POD_NAME).{governing}:{port}":
        util.fail(f"{where}: --advertise must be the pod's stable name, "
                  f"$(POD_NAME).{governing}:{port}")
    probe = c.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
    if probe not in ("grpc", port):
        util.fail(f"{where}: the readiness probe must be tcpSocket on the gRPC port (ready = "
                  "leading)")
    if "livenessProbe" in c:
        util.fail(f"{where}: a liveness probe: followers listen on nothing")
    svc = service_port(files, "elastrun-rendezvous", port)
    if svc["spec"].get("publishNotReadyAddresses") or not selects(svc, sts):
        util.fail(f"{where}: Service elastrun-rendezvous must select the replicas and go to "
                  "Ready pods only (the leader)")
    print(f"replicas: {', '.join(replicas)}; Service elastrun-rendezvous: the Ready one")
    return sts, conf, replicas


def check_ha_daemon(files, bin_dir, replicas):
    ds = by_kind(files, "DaemonSet", "elastrund")[0]
    args = container(ds)["args"]
    Flags(bin_dir, "elastrund").check(args, "kubernetes-ha: elastrund")
    if arg_value(args, "--rendezvous").split(",") != replicas:
        util.fail(f"kubernetes-ha: elastrund --rendezvous {arg_value(args, '--rendezvous')}, "
                  f"want the replicas {','.join(replicas)}")
    return ds


def check_ha_secret_command(kubectl):
    """The command rendezvous.yaml gives makes the Secret with a fresh token."""
    with open(os.path.join(HA_HERE, "rendezvous.yaml")) as f:
        m = re.search(r"^#\s+(kubectl .*create secret.*)$", f.read(), re.M)
    if not m:
        util.fail("kubernetes-ha/rendezvous.yaml: no `kubectl ... create secret` command")
    if shutil.which("openssl") is None:
        print("openssl not found: the Secret command not run")
        return
    r = subprocess.run(["sh", "-c", m.group(1) + " --dry-run=client -o json"],
                       capture_output=True, text=True, env=kubectl.env)
    if r.returncode != 0:
        util.fail(f"the HA Secret command: exit {r.returncode}:\n{r.stderr}")
    secret = json.loads(r.stdout)
    token = base64.b64decode(secret["data"].get("token", "")).decode()
    if (secret["metadata"]["name"], secret["metadata"].get("namespace")) != (
            "elastrun-token", NAMESPACE) or not re.fullmatch(r"[0-9a-f]{64}", token):
        util.fail(f"the HA Secret command makes {secret}")
    print("the HA Secret command makes elastrun-token with a fresh token under `token`")


def start_ha(bin_dir, tmp, etcd_sts, sts, conf_text, ds, ds_conf_text):
    """Three etcd members from the StatefulSet's args, three replicas from
    the ConfigMap and theirs, a daemon from the DaemonSet's: each pod's
    stable name on loopback (check_replicas)."""
    loopback = util.Loopback()
    svc = etcd_sts["spec"]["serviceName"]
    members = []
    for i in range(etcd_sts["spec"]["replicas"]):
        pod = f"etcd-{i}"
        args = [a.replace("$(POD_NAME)", pod).replace("//0.0.0.0:", f"//{pod}.{svc}:")
                for a in container(etcd_sts)["args"]]
        args = [loopback(a) for a in args if not a.startswith("--data-dir=")]
        members.append(([*args, "--data-dir=" + os.path.join(tmp, pod)], None))
    conf = os.path.join(tmp, "rendezvous.conf")
    with open(conf, "w") as f:
        f.write(conf_text)
    store = loopback(conf_dict(conf_text)["store"])
    started = []
    try:
        started += util.start_etcd(members)
        print(f"{len(started)} etcd members from the StatefulSet's args serve clients")
        replicas = []
        for i in range(sts["spec"]["replicas"]):
            args = [a.replace("$(POD_NAME)", f"elastrun-rendezvous-{i}")
                    for a in container(sts)["args"]]
            args[args.index("--config") + 1] = conf
            advertise = loopback(args[args.index("--advertise") + 1])
            args[args.index("--advertise") + 1] = advertise
            replicas.append([*args, "--store", store, "--listen", advertise,
                             "--metrics-listen", "127.0.0.1:0"])
        args = [a.replace("$(NODE_NAME)", "k8s-node").replace("$(POD_IP)", "127.0.0.1")
                for a in container(ds)["args"]]
        at = args.index("--rendezvous")
        rendezvous = loopback(args[at + 1])
        del args[at:at + 2]
        daemon_conf = os.path.join(tmp, "elastrund.conf")
        with open(daemon_conf, "w") as f:
            f.write(ds_conf_text)
        args[args.index("--config") + 1] = daemon_conf
        started += util.check_replicas(bin_dir, tmp, replicas, args, rendezvous)
    finally:
        for p in reversed(started):
            p.stop()
    print("3 replicas from the ConfigMap: one leads, the DaemonSet's daemon follows the next "
          "leader")


def check_ha(kubectl, bin_dir, version, tmp):
    """kubernetes-ha, as built; `version` is kubectl's, `tmp` a folder of
    the test's. Returns whether the replicas were started (etcd
    installed)."""
    files = load_ha(kubectl, tmp)
    if version >= (1, 27):
        check_typed(kubectl, files, tmp)
    check_common(files, bin_dir, not_ours=("etcd",))
    check_ha_secret_command(kubectl)
    clients = check_ha_etcd(files)
    sts, _, replicas = check_ha_rendezvous(files, bin_dir, clients)
    ds = check_ha_daemon(files, bin_dir, replicas)
    if util.etcd_binary() is None:
        return False
    os.mkdir(os.path.join(tmp, "ha"))
    start_ha(bin_dir, os.path.join(tmp, "ha"), by_kind(files, "StatefulSet", "etcd")[0], sts,
             conf_of(files, "elastrun-rendezvous", "rendezvous.conf"), ds,
             conf_of(files, "elastrund", "elastrund.conf"))
    return True
