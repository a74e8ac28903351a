"""What the Kubernetes checks share: kubectl without a cluster, the objects
it parses, and the fields of workloads, Services and config maps that the
checks look up (each failing the test, naming the object, when missing)."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

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


def parse(kubectl, path):
    """The objects of one manifest file, as kubectl parses them."""
    objs = decode_all(kubectl("label", "--local", "-f", path, f"{CHECK}=1", "-o", "json"))
    for obj in objs:
        obj["metadata"]["labels"].pop(CHECK)
        if not obj["metadata"]["labels"]:
            del obj["metadata"]["labels"]
    return objs


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
    return util.parse_conf(text)


def check_common(files, bin_dir, not_ours=()):
    """Every object in the namespace; every workload but those named in
    `not_ours` (etcd) runs one of our binaries in the image of their
    version."""
    version = subprocess.run([os.path.join(bin_dir, "elastrund"), "--version"],
                             capture_output=True, text=True, check=True).stdout.split()[1]
    image = f"elastrun:{version}"
    by_kind(files, "Namespace", NAMESPACE)
    for name, objs in files.items():
        for obj in objs:
            if obj["kind"] != "Namespace" and obj["metadata"].get("namespace") != NAMESPACE:
                util.fail(f"{name}: {obj['kind']} {obj['metadata']['name']} is not in "
                          f"namespace {NAMESPACE}")
            if "template" in obj.get("spec", {}) and obj["metadata"]["name"] not in not_ours:
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
