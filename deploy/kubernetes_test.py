"""The Kubernetes manifests, checked without a cluster: kubectl parses every
file (and, where it is new enough, decodes the workloads into Kubernetes'
own types, so that a misspelt or misplaced field is caught), builds the
kustomization, and runs the Secret command the comments give; then the
fields the deployment relies on are checked against each other and against
the real binaries: images, every flag the containers pass (in the binaries'
--help), the config files (the real service and daemon start from them and
meet), the token's Secret and mounts, the node id from the downward API,
the indexed Job's names.

    python3 kubernetes_test.py BIN_DIR

Exit 77 (skip) where kubectl is missing. Nothing here reaches a cluster:
KUBECONFIG names a file that does not exist."""

import base64
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubernetes")
NAMESPACE = "elastrun"
CHECK = "elastrun-manifest-check"  # the label and variable the parse adds


class Kubectl:
    def __init__(self, tmp):
        self.env = {**os.environ, "KUBECONFIG": os.path.join(tmp, "no-cluster")}

    def __call__(self, *args, stdin=None):
        r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True,
                           env=self.env)
        if r.returncode != 0:
            util.fail(f"kubectl {' '.join(args)}: exit {r.returncode}:\n{r.stderr}")
        return r.stdout

    def minor_version(self):
        v = json.loads(self("version", "--client", "-o", "json"))["clientVersion"]
        return int(v["major"]), int(re.match(r"\d+", v["minor"]).group())


def decode_all(text):
    """The JSON objects kubectl printed one after the other."""
    out, at = [], 0
    decoder = json.JSONDecoder()
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return out
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)


def load(kubectl):
    """{file name: [objects]} of every manifest, as kubectl parses them."""
    files = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.yaml"))):
        name = os.path.basename(path)
        if name == "kustomization.yaml":
            continue
        objs = decode_all(kubectl("label", "--local", "-f", path, f"{CHECK}=1", "-o", "json"))
        for obj in objs:
            obj["metadata"]["labels"].pop(CHECK)
            if not obj["metadata"]["labels"]:
                del obj["metadata"]["labels"]
        files[name] = objs
    return files


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def leaves(value, path=()):
    """(path, value) of every scalar in a JSON value; a path is a tuple of
    keys and indexes."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, path + (i,))
    else:
        yield path, value


def lookup(value, path):
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                return None
        elif not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def check_typed(kubectl, files, tmp):
    """Workloads decoded into Kubernetes' types (`kubectl set env --local`
    does) keep every field written: a field the types do not have is
    dropped, a value of the wrong type is an error."""
    n = 0
    for name, objs in files.items():
        for obj in objs:
            if "template" not in obj.get("spec", {}):
                continue
            path = os.path.join(tmp, f"{obj['kind']}-{obj['metadata']['name']}.json")
            with open(path, "w") as f:
                json.dump(obj, f)
            typed = json.loads(kubectl("set", "env", "--local", "-f", path, "-e",
                                       f"{CHECK.upper().replace('-', '_')}=1", "-o", "json"))
            for leaf, value in leaves(obj):
                got = lookup(typed, leaf)
                if got != value and str(got) != str(value):
                    util.fail(f"{name}: {obj['kind']} {obj['metadata']['name']}: "
                              f"{'.'.join(map(str, leaf))} = "
                              f"{value!r} is not a field of Kubernetes' {obj['kind']} "
                              f"(decoded: {got!r})")
            n += 1
    print(f"typed decode: {n} workloads keep every field")


def by_kind(files, kind, name=None):
    found = [o for objs in files.values() for o in objs
             if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if not found:
        util.fail(f"no {kind} {name or ''} in the manifests")
    return found


def container(obj):
    cs = pod_spec(obj)["containers"]
    if len(cs) != 1:
        util.fail(f"{obj['kind']} {obj['metadata']['name']}: one container expected")
    return cs[0]


def env_value(c, name):
    for e in c.get("env", []):
        if e["name"] == name:
            return e
    util.fail(f"container {c['name']}: no env {name}")


def mount_source(obj, path):
    """(volume, mount) of the volume mounted at `path` in obj's container."""
    c = container(obj)
    for m in c.get("volumeMounts", []):
        if m["mountPath"] == path or path.startswith(m["mountPath"].rstrip("/") + "/"):
            for v in pod_spec(obj).get("volumes", []):
                if v["name"] == m["name"]:
                    return v, m
            for t in obj["spec"].get("volumeClaimTemplates", []):
                if t["metadata"]["name"] == m["name"]:
                    return {"name": m["name"], "persistentVolumeClaim": t}, m
    util.fail(f"{obj['kind']} {obj['metadata']['name']}: nothing mounted at {path}")


class Flags:
    """The flags a binary's --help lists, and which of them take a value."""

    def __init__(self, bin_dir, *command):
        out = subprocess.run([os.path.join(bin_dir, command[0]), *command[1:], "--help"],
                             capture_output=True, text=True, check=True).stdout
        self.command = " ".join(command)
        self.takes_value = {}
        for line in out.splitlines():
            if not re.match(r"\s+-", line):
                continue
            names = re.split(r"\s{2,}", line.strip())[0].split(", ")
            valued = " " in names[-1]
            for n in names:
                self.takes_value[n.split(" ")[0]] = valued

    def check(self, words, where):
        """The flags in `words` (up to "--" or the first positional of a
        command whose positionals end the flags) exist. Returns the words
        after the flags."""
        i = 0
        while i < len(words):
            w = words[i]
            if w == "--":
                return words[i + 1:]
            if not w.startswith("-"):
                return words[i:]
            name = w.split("=", 1)[0]
            if name not in self.takes_value:
                util.fail(f"{where}: `{self.command}` has no flag {name}")
            i += 2 if self.takes_value[name] and "=" not in w else 1
        return []


def conf_of(files, configmap, key):
    cm = by_kind(files, "ConfigMap", configmap)[0]
    return cm["data"][key]


def conf_dict(text):
    path = os.path.join(TMP, "conf")
    with open(path, "w") as f:
        f.write(text)
    return util.read_conf(path)


def check_common(files, bin_dir):
    version = subprocess.run([os.path.join(bin_dir, "elastrund"), "--version"],
                             capture_output=True, text=True, check=True).stdout.split()[1]
    image = f"elastrun:{version}"
    by_kind(files, "Namespace", NAMESPACE)
    for name, objs in files.items():
        for obj in objs:
            if obj["kind"] != "Namespace" and obj["metadata"].get("namespace") != NAMESPACE:
                util.fail(f"{name}: {obj['kind']} {obj['metadata']['name']} is not in "
                          f"namespace {NAMESPACE}")
            if "template" in obj.get("spec", {}):
                c = container(obj)
                if c["image"] != image:
                    util.fail(f"{name}: image {c['image']}, want {image} (the binaries' version)")
                if c["command"][0] != "sh" and not os.path.exists(
                        os.path.join(bin_dir, c["command"][0])):
                    util.fail(f"{name}: command {c['command'][0]} is not one of our binaries")
    print(f"every workload runs {image}, in namespace {NAMESPACE}")


def check_token_mount(obj, path):
    """The token file at `path` is the Secret's key `token`, mounted as a
    file (a Secret volume's own entries are links, which are refused), mode
    without group or other bits."""
    volume, mount = mount_source(obj, path)
    where = f"{obj['kind']} {obj['metadata']['name']}"
    secret = volume.get("secret")
    if secret is None or secret["secretName"] != "elastrun-token":
        util.fail(f"{where}: {path} is not from the Secret elastrun-token")
    if mount.get("subPath") != "token" or mount["mountPath"] != path:
        util.fail(f"{where}: mount the Secret's key `token` at {path} with subPath: token")
    if secret.get("defaultMode", 0o644) & 0o077:
        util.fail(f"{where}: the token's mode {oct(secret.get('defaultMode', 0o644))} is open "
                  "to group or others (refused)")


def check_config_mount(obj, path, configmap, key):
    volume, mount = mount_source(obj, path)
    if volume.get("configMap", {}).get("name") != configmap or mount.get("subPath") != key:
        util.fail(f"{obj['kind']} {obj['metadata']['name']}: {path} is not the ConfigMap "
                  f"{configmap}'s {key}")


def service_port(files, name, port):
    svc = by_kind(files, "Service", name)[0]
    if not any(p["port"] == port for p in svc["spec"]["ports"]):
        util.fail(f"Service {name} has no port {port}")
    return svc


def selects(svc, obj):
    labels = obj["spec"]["template"]["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())


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
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("PASS")


TMP = None

if __name__ == "__main__":
    main()
