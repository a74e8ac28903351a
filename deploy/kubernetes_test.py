"""The Kubernetes manifests, checked without a cluster: kubectl parses every
file (and, where it is new enough, decodes the workloads into Kubernetes'
own types, so that a misspelt or misplaced field is caught), builds the
kustomization, and runs the Secret command the comments give; then the
fields the deployment relies on are checked against each other and against
the real binaries: images, every flag the containers pass (in the binaries'
--help), the config files (the real service and daemon start from them and
meet), the token's Secret and mounts, the node id from the downward API,
the indexed Job's names. Then the HA variant, ../kubernetes-ha
(kubernetes_ha_checks.py).

    python3 kubernetes_test.py BIN_DIR

Exit 77 (skip) where kubectl is missing, or etcd (Debian's etcd-server)
once the rest passed. Nothing here reaches a cluster: KUBECONFIG names a
file that does not exist."""

import base64
import glob
import json
import os
import re
import shlex
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402
import kubernetes_ha_checks  # noqa: E402
from kubernetes_test_util import (NAMESPACE, Flags, Kubectl, by_kind, check_common,  # noqa: E402
                                  check_config_mount, check_token_mount, check_typed,
                                  conf_dict, conf_of, container, env_value, mount_source,
                                  parse, pod_spec, selects, service_port)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubernetes")


def load(kubectl):
    """{file name: [objects]} of every manifest, as kubectl parses them."""
    files = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        name = os.path.basename(path)
        if name != "kustomization.yaml":
            files[name] = parse(kubectl, path)
    return files


def check_rendezvous(files, bin_dir):
    sts = by_kind(files, "StatefulSet", "elastrun-rendezvous")[0]
    if sts["spec"]["replicas"] != 1:
        util.fail("the service's StatefulSet must have one replica (one state file)")
    governing = by_kind(files, "Service", sts["spec"]["serviceName"])[0]
    if governing["spec"].get("clusterIP") != "None":
        util.fail("the StatefulSet's serviceName must be a headless Service")
    c = container(sts)
    if c["command"] != ["elastrun-rendezvous"]:
        util.fail(f"rendezvous command {c['command']}")
    Flags(bin_dir, "elastrun-rendezvous").check(c["args"], "rendezvous.yaml")
    conf_path = c["args"][c["args"].index("--config") + 1]
    check_config_mount(sts, conf_path, "elastrun-rendezvous", "rendezvous.conf")
    conf = conf_dict(conf_of(files, "elastrun-rendezvous", "rendezvous.conf"))
    util.check_listen_security(conf, "kubernetes/rendezvous.yaml: rendezvous.conf")
    # State and token on the PersistentVolume.
    for key in ["state-dir", "token-file"]:
        volume, _ = mount_source(sts, conf[key])
        if "persistentVolumeClaim" not in volume:
            util.fail(f"rendezvous.conf: {key} = {conf[key]} is not on the PersistentVolume")
    port = int(conf["listen"].rsplit(":", 1)[1])
    svc = service_port(files, "elastrun-rendezvous", port)
    if not selects(svc, sts):
        util.fail("Service elastrun-rendezvous does not select the StatefulSet's pod")
    target = next(p["targetPort"] for p in svc["spec"]["ports"] if p["port"] == port)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    if ports.get(target, target) != port:
        util.fail(f"Service port {port} goes to {target}, not the service's {port}")
    return sts, conf


def check_daemon(files, bin_dir):
    ds = by_kind(files, "DaemonSet", "elastrund")[0]
    c = container(ds)
    if c["command"] != ["elastrund"]:
        util.fail(f"elastrund command {c['command']}")
    Flags(bin_dir, "elastrund").check(c["args"], "elastrund.yaml")
    args = c["args"]
    if args[args.index("--node-id") + 1] != "$(NODE_NAME)" or env_value(c, "NODE_NAME").get(
            "valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
        util.fail("elastrund.yaml: --node-id must be $(NODE_NAME), the pod's spec.nodeName")
    conf_path = args[args.index("--config") + 1]
    check_config_mount(ds, conf_path, "elastrund", "elastrund.conf")
    conf = conf_dict(conf_of(files, "elastrund", "elastrund.conf"))
    check_token_mount(ds, conf["token-file"])
    host, port = conf["rendezvous"].rsplit(":", 1)
    service_port(files, host.split(".")[0], int(port))
    if not c.get("securityContext", {}).get("privileged"):
        util.fail("elastrund.yaml: the daemon must be privileged (cgroups, workers as owners)")
    shm, _ = mount_source(ds, "/dev/shm")
    if shm.get("emptyDir", {}).get("medium") != "Memory" and not pod_spec(ds).get("hostIPC"):
        util.fail("elastrund.yaml: /dev/shm must be an emptyDir of medium Memory (or hostIPC)")
    grace = pod_spec(ds).get("terminationGracePeriodSeconds", 30)
    if grace <= util.seconds(conf.get("shutdown-timeout", "30s")):
        util.fail(f"elastrund.yaml: terminationGracePeriodSeconds {grace} must exceed "
                  f"shutdown-timeout {conf.get('shutdown-timeout', '30s')}")
    return ds, conf


def script_commands(script):
    """The word lists of the `elastrun SUB ...` calls in a shell script."""
    calls = []
    for line in script.replace("\\\n", " ").splitlines():
        for m in re.finditer(r"(?<![\w-])elastrun ([a-z]+)(.*)", line):
            rest = m.group(2)
            try:
                words = shlex.split(rest)
            except ValueError:
                words = rest.split()
            calls.append([m.group(1), *words])
    return calls


def check_example_job(files, bin_dir):
    job = by_kind(files, "Job", "elastrun-example")[0]
    c = container(job)
    calls = script_commands(c["command"][-1])
    subs = [call[0] for call in calls]
    if "submit" not in subs or "wait" not in subs:
        util.fail(f"example-job.yaml: the script must submit and wait (it calls {subs})")
    for call in calls:
        Flags(bin_dir, "elastrun", call[0]).check(call[1:], "example-job.yaml")
    host, port = env_value(c, "ELASTRUN_RENDEZVOUS")["value"].rsplit(":", 1)
    service_port(files, host.split(".")[0], int(port))
    check_token_mount(job, env_value(c, "ELASTRUN_TOKEN_FILE")["value"])
    print(f"example-job.yaml: elastrun {', '.join(subs)}: flags exist")


def check_torchrun_job(files, bin_dir):
    job = next(j for j in by_kind(files, "Job") if j["spec"].get("completionMode") == "Indexed")
    name = job["metadata"]["name"]
    spec = job["spec"]
    c = container(job)
    if c["command"] != ["elastrun"] or c["args"][0] != "run":
        util.fail("torchrun-job.yaml: the pods must run `elastrun run`")
    args = c["args"][1:]
    program = Flags(bin_dir, "elastrun", "run").check(args, "torchrun-job.yaml")
    if not program:
        util.fail("torchrun-job.yaml: no program after the flags")
    nnodes = args[args.index("--nnodes") + 1].split(":")[-1]
    if not spec["completions"] == spec["parallelism"] == int(nnodes):
        util.fail(f"torchrun-job.yaml: completions {spec['completions']}, parallelism "
                  f"{spec['parallelism']} and --nnodes {nnodes} must agree")
    subdomain = pod_spec(job).get("subdomain")
    svc = by_kind(files, "Service", subdomain)[0]
    if svc["spec"].get("clusterIP") != "None" or not selects(svc, job):
        util.fail(f"torchrun-job.yaml: Service {subdomain} must be headless and select the pods")
    endpoint = args[args.index("--rdzv-endpoint") + 1]
    host, port = endpoint.rsplit(":", 1)
    if host != f"{name}-0.{subdomain}":
        util.fail(f"torchrun-job.yaml: --rdzv-endpoint {endpoint}: pod 0 is {name}-0.{subdomain}")
    service_port(files, subdomain, int(port))
    rdzv_id = args[args.index("--rdzv-id") + 1]
    var = re.fullmatch(r"\$\((\w+)\)", rdzv_id)
    ref = var and env_value(c, var.group(1)).get("valueFrom", {}).get("fieldRef", {})
    label = re.fullmatch(r"metadata\.labels\['(.+)'\]", (ref or {}).get("fieldPath", ""))
    if not label or job["spec"]["template"]["metadata"]["labels"].get(label.group(1)) != name:
        util.fail(f"torchrun-job.yaml: --rdzv-id {rdzv_id} must come from a pod label "
                  f"holding the Job's name")
    print(f"torchrun-job.yaml: {nnodes} pods meet at {endpoint} (flags exist)")


def check_secret_command(kubectl):
    """The command the comments give makes the Secret the pods mount."""
    with open(os.path.join(HERE, "elastrund.yaml")) as f:
        text = f.read()
    m = re.search(r"#\s+kubectl (-n \S+ exec .*\|)\n#\s+kubectl (.*create secret.*)", text)
    if not m:
        util.fail("elastrund.yaml: no `kubectl ... create secret` command in the comments")
    token = "0123456789abcdef\n"
    secret = json.loads(kubectl(*shlex.split(m.group(2)), "--dry-run=client", "-o", "json",
                                stdin=token))
    if (secret["metadata"]["name"], secret["metadata"].get("namespace")) != (
            "elastrun-token", NAMESPACE):
        util.fail(f"the Secret command makes {secret['metadata']}")
    if base64.b64decode(secret["data"]["token"]).decode() != token:
        util.fail("the Secret command does not hold the token file's text under `token`")
    if "cat /var/lib/elastrun/token" not in m.group(1):
        util.fail("the Secret command must read the service's token file")
    print("the Secret command makes elastrun-token with the token file under `token`")


def check_kustomization(kubectl):
    out = kubectl("kustomize", HERE)
    for kind in ["Namespace", "StatefulSet", "DaemonSet"]:
        if f"kind: {kind}\n" not in out:
            util.fail(f"kubectl kustomize: no {kind}")
    print("kubectl kustomize builds the cluster part")


def check_dockerfile(files):
    with open(os.path.join(HERE, "Dockerfile")) as f:
        text = f.read()
    for want in ["FROM debian:12", "COPY elastrun_*.deb", "apt-get install",
                 "/tmp/elastrun_*.deb"]:
        if want not in text:
            util.fail(f"Dockerfile: no `{want}`")


def start_from_confs(bin_dir, tmp, sts_conf_text, ds, ds_conf_text):
    """The real service and daemon start from the ConfigMaps' files and the
    DaemonSet's args ($(VAR)s filled in), and the daemon registers."""
    confs = {}
    for name, text in [("rendezvous.conf", sts_conf_text), ("elastrund.conf", ds_conf_text)]:
        confs[name] = os.path.join(tmp, name)
        with open(confs[name], "w") as f:
            f.write(text)
    service, port = util.start_service(
        bin_dir, ["--config", confs["rendezvous.conf"], "--metrics-listen", "127.0.0.1:0"], tmp)
    try:
        args = [a.replace("$(NODE_NAME)", "k8s-node").replace("$(POD_IP)", "127.0.0.1")
                for a in container(ds)["args"]]
        args[args.index("--config") + 1] = confs["elastrund.conf"]
        daemon = util.start_daemon(bin_dir, args, tmp, port, "k8s-node")
        daemon.stop()
    finally:
        service.stop()
    print("the service and a daemon start from the ConfigMaps and meet")


def main():
    global TMP
    if len(sys.argv) != 2:
        util.fail("usage: kubernetes_test.py BIN_DIR")
    bin_dir = os.path.abspath(sys.argv[1])
    if shutil.which("kubectl") is None:
        util.skip("kubectl not found (Debian package kubernetes-client): manifests not checked")
    TMP = util.temp_dir("elastrun-k8s-test-")
    try:
        kubectl = Kubectl(TMP)
        files = load(kubectl)
        print(f"kubectl parsed {sum(len(o) for o in files.values())} objects in {len(files)} files")
        version = kubectl.minor_version()
        if version >= (1, 27):
            check_typed(kubectl, files, TMP)
        else:
            print(f"kubectl {version[0]}.{version[1]} predates some fields used here "
                  "(gRPC probes: 1.27): typed decode skipped")
        check_kustomization(kubectl)
        check_secret_command(kubectl)
        check_common(files, bin_dir)
        check_dockerfile(files)
        check_rendezvous(files, bin_dir)
        ds, _ = check_daemon(files, bin_dir)
        check_example_job(files, bin_dir)
        check_torchrun_job(files, bin_dir)
        start_from_confs(bin_dir, TMP, conf_of(files, "elastrun-rendezvous", "rendezvous.conf"),
                         ds, conf_of(files, "elastrund", "elastrund.conf"))
        ha_started = kubernetes_ha_checks.check_ha(kubectl, bin_dir, version, TMP)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    if not ha_started:
        util.skip("etcd not found (Debian package etcd-server): the HA manifests not started; "
                  "the rest passed")
    print("PASS")


TMP = None

if __name__ == "__main__":
    main()
