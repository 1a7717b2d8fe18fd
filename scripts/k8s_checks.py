"""What the schemas cannot catch in safeprune's manifests: names that must
refer to each other, the policy against the mounts and ports, and the pod's
security settings, exactly. Used by k8s_manifests.py; each check is proven
to bite by k8s_breakages.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent

NAMESPACE = "safeprune"
NAME_LABEL = {"app.kubernetes.io/name": "safeprune"}
STATE_DIR = "/var/lib/safeprune"
# What the policy's images.disk.from_kubelet reads when it says `true`
# (where kubeadm writes kubelet's configuration).
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
# The securityContexts, exactly: any other key or value loosens them (or
# changes a choice docs/install.md documents, such as root).
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


class CheckError(Exception):
    """The objects lack what the checks look at."""


def one(objects: list[Obj], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    if len(found) != 1:
        raise CheckError(f"{len(found)} objects of kind {kind}, not 1")
    return found[0]


def label(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '-')}/{meta['name']}"


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a matchLabels-only selector picks objects with `labels`."""
    return set(selector) == {"matchLabels"} and selector["matchLabels"].items() <= labels.items()


def bounded(unavailable: Any) -> bool:
    """A count, or a percentage of at most half the nodes."""
    if isinstance(unavailable, int):
        return unavailable >= 1
    return (
        isinstance(unavailable, str)
        and unavailable.endswith("%")
        and unavailable[:-1].isdigit()
        and 0 < int(unavailable[:-1]) <= 50
    )


def check(objects: list[Obj], podmonitor: Obj) -> list[str]:
    """What is wrong with one variant's objects; empty when nothing is."""
    try:
        daemonset = one(objects, "DaemonSet")
        pod = daemonset["spec"]["template"]["spec"]
        container = pod["containers"][0]
        policy = yaml.safe_load(one(objects, "ConfigMap")["data"]["policy.yaml"])
        return (
            object_problems(objects, daemonset)
            + pod_problems(pod, container)
            + volume_problems(objects, pod, container, policy)
            + metrics_problems(policy, container, podmonitor, daemonset)
        )
    except (CheckError, KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        return [f"cannot check: {type(e).__name__}: {e}"]


def object_problems(objects: list[Obj], daemonset: Obj) -> list[str]:
    """The objects, their namespace and the DaemonSet's own settings."""
    p = []
    namespace, account = one(objects, "Namespace"), one(objects, "ServiceAccount")
    if namespace["metadata"]["name"] != NAMESPACE:
        p.append(f"the Namespace must be {NAMESPACE}")
    p += [
        f"{label(o)} is not in namespace {NAMESPACE}"
        for o in objects
        if o is not namespace and o["metadata"].get("namespace") != NAMESPACE
    ]
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
    p += [
        f"the pod must set {host}: false"
        for host in ("hostNetwork", "hostPID", "hostIPC")
        if pod.get(host) is not False
    ]
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
    if kind not in ("docker", "containerd", "cri"):
        raise CheckError(f"the policy's runtime.kind is {kind!r}: name docker, containerd or cri")
    return policy["runtime"][kind]["endpoint"].removeprefix("unix://")


def kubelet_config(policy: Obj) -> str | None:
    """The kubelet configuration file the policy's images.disk.from_kubelet
    reads (`true`: kubeadm's path); None without from_kubelet."""
    named = policy.get("images", {}).get("disk", {}).get("from_kubelet")
    if named is True:
        return KUBELET_CONFIG
    if named is None or isinstance(named, str):
        return named
    written = yaml.safe_dump(named).removesuffix("\n...\n").strip()
    raise CheckError(f"the policy's images.disk.from_kubelet is {written}: name a path, or true")


# The node's cgroup file system, mounted read-only at its own path: where
# safety.pace reads the PSI stall of kubelet's pods' cgroup, or of the
# cgroup workloads_cgroup names.
CGROUP_ROOT = "/sys/fs/cgroup"
# Where Docker's containerd keeps its socket (Containerd.Address of /info,
# a containerd of the node's own): on Docker's containerd image store its
# labels say which images no registry can give back.
DOCKER_CONTAINERD_DIR = "/run/containerd"


def reads_dockers_containerd(policy: Obj) -> bool:
    """A Docker policy whose images.keep_unpullable is not false reads
    Docker's containerd (the directory of its socket, DirectoryOrCreate)."""
    keep = policy.get("images", {}).get("keep_unpullable", "auto")
    return policy["runtime"]["kind"] == "docker" and keep is not False


def paced_by_cgroup(policy: Obj) -> bool:
    """safety.pace reads a cgroup's stall: pacing is on (safety.pace left
    out, the default, or a mapping; off only when written null) and its
    workloads_cgroup is not `node` (which reads /proc/pressure/io, the
    pod's own view of the node's PSI)."""
    safety = policy.get("safety") or {}
    if "pace" not in safety:
        return True
    pace = safety["pace"]
    if pace is None:
        return False
    if not isinstance(pace, dict):
        written = yaml.safe_dump(pace).removesuffix("\n...\n").strip()
        raise CheckError(f"the policy's safety.pace is {written}: write a mapping, or null")
    return pace.get("workloads_cgroup", "auto") != "node"


def workloads_cgroup_problems(policy: Obj) -> list[str]:
    """A cgroup named in safety.pace.workloads_cgroup lies in the mounted
    cgroup file system: the pod sees no other."""
    pace = (policy.get("safety") or {}).get("pace")
    named = pace.get("workloads_cgroup", "auto") if isinstance(pace, dict) else "auto"
    if named in ("auto", "node") or str(named).startswith(CGROUP_ROOT + "/"):
        return []
    return [
        f"the policy's safety.pace.workloads_cgroup {named} is not under {CGROUP_ROOT}, "
        "the node's cgroup file system the pod mounts"
    ]


def host_path_problems(
    host: dict[str, tuple[str, Any]], mounts: dict[str, Obj], policy: Obj
) -> list[str]:
    """hostPath only for the policy's socket and the state directory, and,
    with images.disk.from_kubelet, for kubelet's configuration file (type
    File) and one directory (the image file system the disk rules measure),
    those two readOnly; while safety.pace reads a cgroup's stall (the
    default policy does), the cgroup file system (type Directory,
    readOnly); on Docker, unless images.keep_unpullable is false, the
    directory of Docker's containerd socket (DirectoryOrCreate); each at
    the same path in the container."""
    p = []
    found = {path: kind for path, (_, kind) in host.items()}
    expected = {socket_path(policy): "Socket", STATE_DIR: "DirectoryOrCreate"}
    read_only = []
    if paced_by_cgroup(policy):
        expected[CGROUP_ROOT] = "Directory"
        read_only.append(CGROUP_ROOT)
        p += workloads_cgroup_problems(policy)
    if reads_dockers_containerd(policy):
        expected[DOCKER_CONTAINERD_DIR] = "DirectoryOrCreate"
    kubelet = kubelet_config(policy)
    if kubelet is not None:
        expected[kubelet] = "File"
        image_fs = [
            path for path, kind in found.items() if path not in expected and kind == "Directory"
        ]
        if len(image_fs) != 1:
            p.append(
                "with images.disk.from_kubelet, exactly one more hostPath, of type Directory, "
                f"must be the image file system, not {image_fs}"
            )
        expected |= dict.fromkeys(image_fs, "Directory")
        read_only += [kubelet, *image_fs]
    if found != expected:
        p.append(f"the hostPath volumes must be exactly {expected}, not {found}")
    for path, (name, _) in host.items():
        mount = mounts.get(name, {})
        if mount.get("mountPath") != path:
            p.append(f"hostPath {path} must be mounted at the same path")
        if path in read_only and mount.get("readOnly") is not True:
            p.append(f"hostPath {path} must be mounted readOnly")
    if mounts.get(host.get(STATE_DIR, ("",))[0], {}).get("readOnly"):
        p.append(f"{STATE_DIR} must be writable")
    return p


def volume_problems(objects: list[Obj], pod: Obj, container: Obj, policy: Obj) -> list[str]:
    """Each volume mounted once; hostPath only where host_path_problems
    says; the policy where --config says; every file the policy writes in
    the one writable mount."""
    p = []
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    names = [m["name"] for m in container.get("volumeMounts", [])]
    p += [f"volumeMount {n} names no volume" for n in names if n not in volumes]
    p += [
        f"volume {n} is mounted {names.count(n)} times, not once"
        for n in volumes
        if names.count(n) != 1
    ]
    host = {
        v["hostPath"]["path"]: (n, v["hostPath"].get("type"))
        for n, v in volumes.items()
        if set(v) == {"name", "hostPath"}
    }
    configmaps = [n for n, v in volumes.items() if set(v) == {"name", "configMap"}]
    if len(host) + len(configmaps) != len(volumes):
        p.append("every volume must be a hostPath or the policy's ConfigMap")
    p += host_path_problems(host, mounts, policy)
    writes = {f"report.{k}": v for k, v in policy.get("report", {}).items() if v}
    writes["lock_file"] = policy.get("lock_file", "/run/safeprune.lock")
    p += [
        f"the policy's {key} {path} is not in {STATE_DIR}, the one writable mount"
        for key, path in writes.items()
        if not path.startswith(STATE_DIR + "/")
    ]

    if len(configmaps) != 1:
        return [*p, "exactly one volume must be the policy's ConfigMap"]
    mount = mounts.get(configmaps[0], {})
    if (
        volumes[configmaps[0]]["configMap"].get("name")
        != one(objects, "ConfigMap")["metadata"]["name"]
    ):
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
        if get is not None and (
            get.get("port") not in (*ports, number) or get.get("path") != "/healthz"
        ):
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


def policy_difference(
    base: list[Obj], overlay: list[Obj], name: str, key: str = "runtime"
) -> list[str]:
    """An overlay's policy must be the base one but for `key`, dotted for a
    nested one (`images.disk`)."""
    policies = [yaml.safe_load(one(v, "ConfigMap")["data"]["policy.yaml"]) for v in (base, overlay)]
    for policy in policies:
        drop(policy, key.split("."))
    if policies[0] != policies[1]:
        return [f"{name}: the overlay's policy differs from the base's in more than {key}"]
    return []


def drop(mapping: Obj, keys: list[str]) -> None:
    """Removes the key at the path `keys` from `mapping`, and a mapping on
    the way that it leaves empty (as if never written: its keys' defaults)."""
    first, *rest = keys
    if not rest:
        mapping.pop(first, None)
    elif isinstance(mapping.get(first), dict):
        drop(mapping[first], rest)
        if not mapping[first]:
            mapping.pop(first)


def cargo_version() -> str:
    in_package = False
    for line in (REPO / "Cargo.toml").read_text().splitlines():
        if line.startswith("["):
            in_package = line == "[package]"
        elif in_package and line.startswith("version"):
            return line.split('"')[1]
    raise CheckError("no package version in Cargo.toml")
