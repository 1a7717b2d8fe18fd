#!/usr/bin/env python3
"""Renders and checks safeprune's Kubernetes manifests (deploy/kubernetes).

Run by scripts/k8s-validate.sh, in its virtual environment (the pins of
scripts/k8s-requirements.txt):

  k8s_manifests.py render VARIANT     print a variant's objects as YAML
  k8s_manifests.py check [--kubectl]  render, compare, validate, check

A variant is a kustomization: `base` is deploy/kubernetes (containerd),
`docker` is deploy/kubernetes/docker. Rendering does what `kubectl
kustomize` does with the few features they use (resources, and JSON patches
with a target) and refuses any other kustomization key, so it cannot drift
from kustomize's silently; with --kubectl, `check` also compares the two.

`check` validates every object strictly (an unknown field is an error)
against each Kubernetes release from 1.31 to the newest the validator
bundles, then checks what schemas cannot: names that must refer to each
other, the policy against the mounts and ports, and the pod's security
settings. Last, it proves those checks bite (k8s_breakages.py).
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml
from k8s_breakages import self_test
from kubernetes_validate.utils import all_versions
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "kubernetes"
VARIANTS = {"base": DEPLOY, "docker": DEPLOY / "docker"}
PODMONITOR = DEPLOY / "examples" / "podmonitor.yaml"
OLDEST = Version("1.31")

NAMESPACE = "safeprune"
NAME_LABEL = {"app.kubernetes.io/name": "safeprune"}
STATE_DIR = "/var/lib/safeprune"
# The securityContexts, exactly: any other key or value loosens them (or
# changes a choice README.md documents, such as root).
POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {
    "runAsUser": 0,
    "runAsGroup": 0,
    "runAsNonRoot": False,
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}

Obj = dict[str, Any]


class ManifestError(Exception):
    """A variant cannot be rendered, or lacks an object to check."""


# ------------------------------------------------------------- rendering


def load_docs(path: Path) -> list[Any]:
    """The YAML documents of a file, empty ones left out."""
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def identity(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def label(obj: Obj) -> str:
    _, kind, namespace, name = identity(obj)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def matches(obj: Obj, target: dict[str, str]) -> bool:
    """Whether `obj` is what a kustomize patch target names."""
    group, _, version = obj["apiVersion"].rpartition("/")
    facts = {"group": group, "version": version, "kind": obj["kind"],
             "name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", "")}
    if not set(target) <= set(facts):
        raise ManifestError(f"patch target keys {sorted(set(target) - set(facts))} not supported")
    return all(facts[k] == v for k, v in target.items())


def render(directory: Path) -> list[Obj]:
    """The objects of the kustomization in `directory`, in order."""
    file = directory / "kustomization.yaml"
    kustomization = load_docs(file)[0]
    extra = set(kustomization) - {"apiVersion", "kind", "resources", "patches"}
    if extra:
        raise ManifestError(f"{file}: {sorted(extra)} not supported: keep to resources and "
                            "JSON patches, or teach scripts/k8s_manifests.py")
    objects: list[Obj] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        objects += render(path) if path.is_dir() else load_docs(path)
    for patch in kustomization.get("patches", []):
        if set(patch) != {"path", "target"}:
            raise ManifestError(f"{file}: a patch here has exactly a path and a target: {patch}")
        ops = load_docs(directory / patch["path"])[0]
        hits = [i for i, obj in enumerate(objects) if matches(obj, patch["target"])]
        if len(hits) != 1 or not isinstance(ops, list):
            raise ManifestError(f"{patch['path']}: not a JSON patch of exactly one object")
        try:
            objects[hits[0]] = jsonpatch.apply_patch(objects[hits[0]], ops)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise ManifestError(f"{directory / patch['path']}: {e}") from e
    return objects


def dump(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=True)


def kubectl_differences(name: str, objects: list[Obj]) -> list[str]:
    """How `kubectl kustomize` renders the variant differently, if it does."""
    answer = subprocess.run(["kubectl", "kustomize", str(VARIANTS[name])],
                            capture_output=True, text=True, check=False)
    if answer.returncode != 0:
        return [f"{name}: kubectl kustomize failed: {answer.stderr.strip()}"]
    theirs = {identity(o): o for o in yaml.safe_load_all(answer.stdout) if o}
    ours = {identity(o): o for o in objects}
    problems = []
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            diff = difflib.unified_diff(dump([ours[key]] if key in ours else []).splitlines(),
                                        dump([theirs[key]] if key in theirs else []).splitlines(),
                                        "this rendering", "kubectl kustomize", lineterm="")
            problems.append(f"{name}: {key[1]} {key[3]} differs:\n" + "\n".join(diff))
    return problems


# ------------------------------------------------------------ validation


def versions() -> list[str]:
    """Every release the validator bundles from 1.31 on."""
    return sorted({v for v in all_versions() if Version(v) >= OLDEST}, key=Version)


def schema_problems(obj: Obj, version: str) -> list[str]:
    """What Kubernetes' schema of `version` refuses in `obj`, strictly."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = ".".join(str(p) for p in e.path) or "(top)"
        return [f"{label(obj)}: Kubernetes {e.version}: {where}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{label(obj)}: {e.message}"]
    return []


# ---------------------------------------------------------------- checks


def one(objects: list[Obj], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    if len(found) != 1:
        raise ManifestError(f"{len(found)} objects of kind {kind}, not 1")
    return found[0]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a matchLabels-only selector picks objects with `labels`."""
    return set(selector) == {"matchLabels"} and selector["matchLabels"].items() <= labels.items()


def bounded(unavailable: Any) -> bool:
    """A count, or a percentage of at most half the nodes."""
    if isinstance(unavailable, int):
        return unavailable >= 1
    return (isinstance(unavailable, str) and unavailable.endswith("%")
            and unavailable[:-1].isdigit() and 0 < int(unavailable[:-1]) <= 50)


def check(objects: list[Obj], podmonitor: Obj) -> list[str]:
    """What is wrong with one variant's objects; empty when nothing is."""
    try:
        daemonset = one(objects, "DaemonSet")
        pod = daemonset["spec"]["template"]["spec"]
        container = pod["containers"][0]
        policy = yaml.safe_load(one(objects, "ConfigMap")["data"]["policy.yaml"])
        return (object_problems(objects, daemonset) + pod_problems(pod, container)
                + volume_problems(objects, pod, container, policy)
                + metrics_problems(policy, container, podmonitor, daemonset))
    except (ManifestError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        return [f"cannot check: {type(e).__name__}: {e}"]


def object_problems(objects: list[Obj], daemonset: Obj) -> list[str]:
    """The objects, their namespace and the DaemonSet's own settings."""
    p = []
    namespace, account = one(objects, "Namespace"), one(objects, "ServiceAccount")
    if namespace["metadata"]["name"] != NAMESPACE:
        p.append(f"the Namespace must be {NAMESPACE}")
    p += [f"{label(o)} is not in namespace {NAMESPACE}" for o in objects
          if o is not namespace and o["metadata"].get("namespace") != NAMESPACE]
    if account.get("automountServiceAccountToken") is not False:
        p.append("the ServiceAccount must set automountServiceAccountToken: false")
    spec = daemonset["spec"]
    labels = spec["template"]["metadata"].get("labels", {})
    if not selects(spec["selector"], labels):
        p.append("the DaemonSet's selector must be matchLabels the pod template has")
    if not NAME_LABEL.items() <= labels.items():
        p.append(f"the pod template lacks the label {NAME_LABEL}")
    update = spec.get("updateStrategy", {})
    if update.get("type") != "RollingUpdate":
        p.append("updateStrategy must be RollingUpdate")
    if not bounded(update.get("rollingUpdate", {}).get("maxUnavailable")):
        p.append("maxUnavailable must be bounded: a count, or 1% to 50%")
    if spec["template"]["spec"].get("serviceAccountName") != account["metadata"]["name"]:
        p.append("the pod must run as the manifests' ServiceAccount")
    return p


def pod_problems(pod: Obj, container: Obj) -> list[str]:
    """The pod's and the container's privileges, and what they run."""
    p = []
    if {"operator": "Exists"} not in pod.get("tolerations", []):
        p.append("the pod must tolerate every taint: {operator: Exists}")
    if pod.get("automountServiceAccountToken") is not False:
        p.append("the pod must set automountServiceAccountToken: false")
    p += [f"the pod must set {host}: false" for host in ("hostNetwork", "hostPID", "hostIPC")
          if pod.get(host) is not False]
    if pod.get("securityContext") != POD_SECURITY:
        p.append(f"the pod's securityContext must be exactly {POD_SECURITY}")
    if len(pod["containers"]) != 1 or {"initContainers", "ephemeralContainers"} & set(pod):
        p.append("the pod must have exactly one container, and no other kind")
    if not isinstance(pod.get("terminationGracePeriodSeconds"), int):
        p.append("the pod must set terminationGracePeriodSeconds, for removals in flight")
    if container.get("securityContext") != CONTAINER_SECURITY:
        p.append(f"the container's securityContext must be exactly {CONTAINER_SECURITY}")
    resources = container.get("resources", {})
    if not {"cpu", "memory"} <= set(resources.get("requests", {})):
        p.append("the container must request cpu and memory")
    if "memory" not in resources.get("limits", {}):
        p.append("the container must limit its memory")
    version = cargo_version()
    if container.get("image") != f"localhost/safeprune:{version}":
        p.append(f"the image must be localhost/safeprune:{version}, Cargo.toml's version")
    if container.get("imagePullPolicy") != "IfNotPresent":
        p.append("imagePullPolicy must be IfNotPresent: the image is imported, not pulled")
    env = {e["name"]: e for e in container.get("env", [])}
    field = env.get("SAFEPRUNE_NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {})
    if field.get("fieldPath") != "spec.nodeName":
        p.append("SAFEPRUNE_NODE_NAME must come from the pod's spec.nodeName")
    if container.get("args", [])[-1:] != ["daemon"]:
        p.append("the container must run `safeprune daemon`")
    return p


def socket_path(policy: Obj) -> str:
    """The unix socket the policy's runtime is reached at."""
    kind = policy["runtime"]["kind"]
    if kind not in ("docker", "containerd"):
        raise ManifestError(f"the policy's runtime.kind is {kind!r}: name docker or containerd")
    return policy["runtime"][kind]["endpoint"].removeprefix("unix://")


def volume_problems(objects: list[Obj], pod: Obj, container: Obj, policy: Obj) -> list[str]:
    """Each volume mounted once; hostPath only for the policy's socket and
    the state directory, at the same paths; the policy where --config says;
    every file the policy writes in the one writable mount."""
    p = []
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    names = [m["name"] for m in container.get("volumeMounts", [])]
    p += [f"volumeMount {n} names no volume" for n in names if n not in volumes]
    p += [f"volume {n} is mounted {names.count(n)} times, not once" for n in volumes
          if names.count(n) != 1]
    host = {v["hostPath"]["path"]: (n, v["hostPath"].get("type")) for n, v in volumes.items()
            if set(v) == {"name", "hostPath"}}
    configmaps = [n for n, v in volumes.items() if set(v) == {"name", "configMap"}]
    if len(host) + len(configmaps) != len(volumes):
        p.append("every volume must be a hostPath or the policy's ConfigMap")
    expected = {socket_path(policy): "Socket", STATE_DIR: "DirectoryOrCreate"}
    found = {path: kind for path, (_, kind) in host.items()}
    if found != expected:
        p.append(f"the hostPath volumes must be exactly {expected}, not {found}")
    for path, (name, _) in host.items():
        if mounts.get(name, {}).get("mountPath") != path:
            p.append(f"hostPath {path} must be mounted at the same path")
    if mounts.get(host.get(STATE_DIR, ("",))[0], {}).get("readOnly"):
        p.append(f"{STATE_DIR} must be writable")
    writes = {f"report.{k}": v for k, v in policy.get("report", {}).items() if v}
    writes["lock_file"] = policy.get("lock_file", "/run/safeprune.lock")
    p += [f"the policy's {key} {path} is not in {STATE_DIR}, the one writable mount"
          for key, path in writes.items() if not path.startswith(STATE_DIR + "/")]

    if len(configmaps) != 1:
        return [*p, "exactly one volume must be the policy's ConfigMap"]
    mount = mounts.get(configmaps[0], {})
    if volumes[configmaps[0]]["configMap"].get("name") != one(objects, "ConfigMap")["metadata"]["name"]:
        p.append("the policy volume must name the manifests' ConfigMap")
    if mount.get("readOnly") is not True:
        p.append("the policy must be mounted readOnly")
    args = container.get("args", [])
    config = args[args.index("--config") + 1] if "--config" in args else None
    if config != f"{mount.get('mountPath')}/policy.yaml":
        p.append(f"--config {config} is not the mounted ConfigMap's policy.yaml")
    return p


def metrics_problems(policy: Obj, container: Obj, podmonitor: Obj, daemonset: Obj) -> list[str]:
    """The policy's listener, the container port, the probes and the
    PodMonitor agree."""
    p = []
    listen = policy.get("metrics", {}).get("listen", "")
    address, _, port = listen.rpartition(":")
    ports = {c.get("name"): c for c in container.get("ports", [])}
    number = ports.get("metrics", {}).get("containerPort")
    if address != "0.0.0.0":
        p.append(f"metrics.listen {listen!r} must be on 0.0.0.0: kubelet probes the pod's address")
    if not port.isdigit() or number != int(port):
        p.append(f"the container port `metrics` must be metrics.listen's port {port}")
    if any("hostPort" in c for c in ports.values()):
        p.append("no container port may be a hostPort")
    if "livenessProbe" not in container:
        p.append("the container needs a livenessProbe on /healthz")
    for probe in ("livenessProbe", "readinessProbe"):
        get = container.get(probe, {}).get("httpGet", {}) if probe in container else None
        if get is not None and (get.get("port") not in (*ports, number) or get.get("path") != "/healthz"):
            p.append(f"the {probe} must ask /healthz on a container port")
    labels = daemonset["spec"]["template"]["metadata"].get("labels", {})
    if not selects(podmonitor["spec"]["selector"], labels):
        p.append("the PodMonitor's selector must match the pod template's labels")
    if podmonitor["metadata"].get("namespace") != daemonset["metadata"]["namespace"]:
        p.append("the PodMonitor must be in the DaemonSet's namespace")
    for endpoint in podmonitor["spec"]["podMetricsEndpoints"]:
        if endpoint.get("port") not in ports or endpoint.get("path") != "/metrics":
            p.append("the PodMonitor must scrape /metrics on a container port")
    return p


def policy_difference(base: list[Obj], docker: list[Obj]) -> list[str]:
    """The Docker policy must be the base one but for `runtime`."""
    policies = [yaml.safe_load(one(v, "ConfigMap")["data"]["policy.yaml"]) for v in (base, docker)]
    for policy in policies:
        policy.pop("runtime")
    if policies[0] != policies[1]:
        return ["docker: the overlay's policy differs from the base's in more than runtime"]
    return []


def cargo_version() -> str:
    in_package = False
    for line in (REPO / "Cargo.toml").read_text().splitlines():
        if line.startswith("["):
            in_package = line == "[package]"
        elif in_package and line.startswith("version"):
            return line.split('"')[1]
    raise ManifestError("no package version in Cargo.toml")


# ------------------------------------------------------------------ main


def run_check(use_kubectl: bool) -> int:
    rendered = {name: render(path) for name, path in VARIANTS.items()}
    podmonitor = load_docs(PODMONITOR)[0]
    problems: list[str] = []

    if use_kubectl:
        for name, objects in rendered.items():
            problems += kubectl_differences(name, objects)
        if not problems:
            print(f"k8s: kubectl kustomize renders {' and '.join(rendered)} as this script does")
    else:
        print("k8s: no kubectl on PATH: skipped the comparison with `kubectl kustomize`")

    checked = versions()
    # What both variants share is validated once.
    unique: dict[str, tuple[Obj, list[str]]] = {}
    for name, objects in rendered.items():
        for obj in objects:
            unique.setdefault(dump([obj]), (obj, []))[1].append(name)
    for obj, names in unique.values():
        for version in checked:
            problems += [f"{' and '.join(names)}: {m}" for m in schema_problems(obj, version)]
    print(f"k8s: kubernetes-validate {kubernetes_validate.__version__} --strict: "
          f"{len(unique)} distinct objects of {' and '.join(rendered)}, against Kubernetes "
          f"{', '.join('.'.join(v.split('.')[:2]) for v in checked)}")

    for name, objects in rendered.items():
        problems += [f"{name}: {m}" for m in check(objects, podmonitor)]
    problems += policy_difference(rendered["base"], rendered["docker"])
    print("k8s: checked references, the policy against mounts and ports, the pod's privileges; "
          f"{PODMONITOR.relative_to(REPO)} (a CRD, no Kubernetes schema) against the DaemonSet")

    if problems:
        print("k8s: self-test skipped: the manifests themselves fail")
    else:
        tried, missed = self_test(rendered["base"], podmonitor, check, schema_problems, checked[0])
        problems += missed
        print(f"k8s: self-test: {tried - len(missed)} of {tried} broken or loosened copies refused")

    for problem in problems:
        print(f"k8s: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("render", help="print a variant's objects as YAML").add_argument(
        "variant", choices=sorted(VARIANTS))
    sub.add_parser("check", help="render, compare, validate and check").add_argument(
        "--kubectl", action="store_true", help="also compare with `kubectl kustomize`")
    args = parser.parse_args()
    try:
        if args.command == "render":
            sys.stdout.write(dump(render(VARIANTS[args.variant])))
            return 0
        return run_check(args.kubectl)
    except (ManifestError, OSError, yaml.YAMLError) as e:
        print(f"k8s: FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
