"""Broken and loosened copies of the manifests, for k8s_manifests.py's
self-test: each must fail the schemas or the checks, with the problem it
was made to show. A check that lets one through has stopped checking.
Most break the base variant, whose policy paces removals by the stall of
kubelet's pods' cgroup (safety.pace's default) through the read-only
cgroup mount; KUBELET breaks examples/kubelet-image-gc, the one whose
policy sets images.disk.from_kubelet; DOCKER breaks the docker overlay,
whose pod mounts the directory of Docker's containerd socket.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

Obj = dict[str, Any]
# Changes a copy of a variant's objects, or of the PodMonitor.
Mutation = Callable[[list[Obj], Obj], Any]


def _kind(objs: list[Obj], kind: str) -> Obj:
    return next(o for o in objs if o["kind"] == kind)


def _pod(objs: list[Obj]) -> Obj:
    return _kind(objs, "DaemonSet")["spec"]["template"]["spec"]


def _ctr(objs: list[Obj]) -> Obj:
    return _pod(objs)["containers"][0]


def _sec(objs: list[Obj]) -> Obj:
    return _ctr(objs)["securityContext"]


def _policy(objs: list[Obj], edit: Callable[[Obj], Any]) -> None:
    configmap = _kind(objs, "ConfigMap")
    policy = yaml.safe_load(configmap["data"]["policy.yaml"])
    edit(policy)
    configmap["data"]["policy.yaml"] = yaml.safe_dump(policy)


def _volume(objs: list[Obj], name: str) -> Obj:
    return next(v for v in _pod(objs)["volumes"] if v["name"] == name)


def _mount(objs: list[Obj], name: str) -> Obj:
    return next(m for m in _ctr(objs)["volumeMounts"] if m["name"] == name)


def _unmount(objs: list[Obj], name: str) -> None:
    """The volume `name` and its mount removed."""
    _pod(objs)["volumes"].remove(_volume(objs, name))
    _ctr(objs)["volumeMounts"].remove(_mount(objs, name))


def _pace(objs: list[Obj], pace: Any) -> None:
    """The policy's safety.pace set to `pace`."""
    _policy(objs, lambda p: p.setdefault("safety", {}).update(pace=pace))


def _mount_root(objs: list[Obj]) -> None:
    _pod(objs)["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    _ctr(objs)["volumeMounts"].append({"name": "root", "mountPath": "/host"})


# What the schemas must refuse: (what, mutation).
SCHEMA: list[tuple[str, Mutation]] = [
    ("an unknown field in the container", lambda o, _: _ctr(o).update(imagePullPolicyy="Always")),
    (
        "an unknown field in a securityContext",
        lambda o, _: _sec(o).update(readOnlyRootFileSystem=True),
    ),
    ("an unknown top-level field", lambda o, _: _kind(o, "ConfigMap").update(spec={})),
    ("a string for an integer", lambda o, _: _pod(o).update(terminationGracePeriodSeconds="60")),
    ("a string for a port number", lambda o, _: _ctr(o)["ports"][0].update(containerPort="9573")),
    ("a string for a boolean", lambda o, _: _sec(o).update(privileged="false")),
    ("a list for a map", lambda o, _: _kind(o, "ServiceAccount")["metadata"].update(labels=[])),
]

# What the checks must refuse: (what, a word of the problem, mutation).
CHECKS: list[tuple[str, str, Mutation]] = [
    (
        "privilege escalation",
        "container's securityContext",
        lambda o, _: _sec(o).update(allowPrivilegeEscalation=True),
    ),
    (
        "a writable root",
        "container's securityContext",
        lambda o, _: _sec(o).update(readOnlyRootFilesystem=False),
    ),
    (
        "a privileged container",
        "container's securityContext",
        lambda o, _: _sec(o).update(privileged=True),
    ),
    (
        "a capability added",
        "container's securityContext",
        lambda o, _: _sec(o)["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    ("capabilities kept", "container's securityContext", lambda o, _: _sec(o).pop("capabilities")),
    ("a non-root user", "container's securityContext", lambda o, _: _sec(o).update(runAsUser=1000)),
    (
        "an unconfined container",
        "container's securityContext",
        lambda o, _: _sec(o).update(seccompProfile={"type": "Unconfined"}),
    ),
    ("no seccomp profile", "pod's securityContext", lambda o, _: _pod(o).pop("securityContext")),
    (
        "a pod sysctl",
        "pod's securityContext",
        lambda o, _: _pod(o)["securityContext"].update(
            sysctls=[{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
        ),
    ),
    ("the host's pids", "hostPID", lambda o, _: _pod(o).update(hostPID=True)),
    ("hostNetwork left unsaid", "hostNetwork", lambda o, _: _pod(o).pop("hostNetwork")),
    ("the host's IPC", "hostIPC", lambda o, _: _pod(o).update(hostIPC=True)),
    (
        "a token in the pod",
        "pod must set automountServiceAccountToken",
        lambda o, _: _pod(o).update(automountServiceAccountToken=True),
    ),
    (
        "a token from the account",
        "ServiceAccount must set",
        lambda o, _: _kind(o, "ServiceAccount").pop("automountServiceAccountToken"),
    ),
    (
        "another account",
        "ServiceAccount",
        lambda o, _: _pod(o).update(serviceAccountName="default"),
    ),
    (
        "an init container",
        "exactly one container",
        lambda o, _: _pod(o).update(initContainers=[copy.deepcopy(_ctr(o))]),
    ),
    ("the node's root mounted", "hostPath volumes must be exactly", lambda o, _: _mount_root(o)),
    (
        "the runtime's directory mounted",
        "hostPath volumes must be exactly",
        lambda o, _: _pod(o)["volumes"][0]["hostPath"].update(
            path="/run/containerd", type="Directory"
        ),
    ),
    (
        "the socket mounted elsewhere",
        "same path",
        lambda o, _: _ctr(o)["volumeMounts"][0].update(mountPath="/containerd.sock"),
    ),
    (
        "a socket the policy does not name",
        "hostPath volumes must be exactly",
        lambda o, _: _policy(
            o,
            lambda p: p["runtime"]["containerd"].update(
                endpoint="/run/k3s/containerd/containerd.sock"
            ),
        ),
    ),
    (
        "an emptyDir",
        "hostPath or the policy's ConfigMap",
        lambda o, _: (
            _pod(o)["volumes"].append({"name": "tmp", "emptyDir": {}}),
            _ctr(o)["volumeMounts"].append({"name": "tmp", "mountPath": "/tmp"}),
        ),
    ),
    (
        "a mount naming no volume",
        "names no volume",
        lambda o, _: _ctr(o)["volumeMounts"][1].update(name="stat"),
    ),
    (
        "a volume mounted nowhere",
        "mounted 0 times",
        lambda o, _: _pod(o)["volumes"].append({"name": "spare", "hostPath": {"path": "/srv"}}),
    ),
    (
        "a read-only state directory",
        "must be writable",
        lambda o, _: _ctr(o)["volumeMounts"][1].update(readOnly=True),
    ),
    (
        "the lock on the read-only root",
        "lock_file",
        lambda o, _: _policy(o, lambda p: p.pop("lock_file")),
    ),
    (
        "a report outside the state directory",
        "report.audit_log",
        lambda o, _: _policy(o, lambda p: p["report"].update(audit_log="/var/log/audit.jsonl")),
    ),
    (
        "a writable policy",
        "mounted readOnly",
        lambda o, _: _ctr(o)["volumeMounts"][2].pop("readOnly"),
    ),
    (
        "--config elsewhere",
        "--config",
        lambda o, _: _ctr(o).update(args=["--config", "/policy.yaml", "daemon"]),
    ),
    (
        "another command",
        "safeprune daemon",
        lambda o, _: _ctr(o).update(args=["--config", "/etc/safeprune/policy.yaml", "run"]),
    ),
    (
        "metrics on loopback",
        "0.0.0.0",
        lambda o, _: _policy(o, lambda p: p["metrics"].update(listen="127.0.0.1:9573")),
    ),
    (
        "metrics on another port",
        "metrics.listen's port",
        lambda o, _: _policy(o, lambda p: p["metrics"].update(listen="0.0.0.0:9100")),
    ),
    ("a hostPort", "hostPort", lambda o, _: _ctr(o)["ports"][0].update(hostPort=9573)),
    ("no liveness probe", "livenessProbe", lambda o, _: _ctr(o).pop("livenessProbe")),
    (
        "a probe on an unnamed port",
        "livenessProbe must ask",
        lambda o, _: _ctr(o)["livenessProbe"]["httpGet"].update(port="metric"),
    ),
    (
        "the PodMonitor on other pods",
        "PodMonitor's selector",
        lambda _, m: m["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "x"}),
    ),
    (
        "the PodMonitor on an unnamed port",
        "PodMonitor must scrape",
        lambda _, m: m["spec"]["podMetricsEndpoints"][0].update(port="http"),
    ),
    (
        "the PodMonitor elsewhere",
        "PodMonitor must be in",
        lambda _, m: m["metadata"].update(namespace="monitoring"),
    ),
    (
        "a selector the pod lacks",
        "selector must be matchLabels",
        lambda o, _: _kind(o, "DaemonSet")["spec"]["selector"]["matchLabels"].update(tier="x"),
    ),
    (
        "an unbounded rollout",
        "maxUnavailable",
        lambda o, _: _kind(o, "DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"].update(
            maxUnavailable="100%"
        ),
    ),
    ("tainted nodes left out", "tolerate", lambda o, _: _pod(o).update(tolerations=[])),
    ("no memory limit", "limit its memory", lambda o, _: _ctr(o)["resources"].pop("limits")),
    (
        "an image of another version",
        "Cargo.toml",
        lambda o, _: _ctr(o).update(image="localhost/safeprune:0.0.9"),
    ),
    (
        "pulled from a registry on every start",
        "IfNotPresent",
        lambda o, _: _ctr(o).update(imagePullPolicy="Always"),
    ),
    ("no node name", "SAFEPRUNE_NODE_NAME", lambda o, _: _ctr(o).pop("env")),
    (
        "an object in another namespace",
        "not in namespace",
        lambda o, _: _kind(o, "ConfigMap")["metadata"].update(namespace="default"),
    ),
    (
        "the cgroup file system writable",
        "/sys/fs/cgroup must be mounted readOnly",
        lambda o, _: _mount(o, "cgroup").pop("readOnly"),
    ),
    (
        "the cgroup file system not mounted for the default pacing",
        "hostPath volumes must be exactly",
        lambda o, _: _unmount(o, "cgroup"),
    ),
    (
        "the cgroup file system created if missing",
        "hostPath volumes must be exactly",
        lambda o, _: _volume(o, "cgroup")["hostPath"].update(type="DirectoryOrCreate"),
    ),
    (
        "the cgroup file system mounted elsewhere",
        "same path",
        lambda o, _: _mount(o, "cgroup").update(mountPath="/host/sys/fs/cgroup"),
    ),
    (
        "the cgroup file system mounted with pacing off",
        "hostPath volumes must be exactly",
        lambda o, _: _pace(o, None),
    ),
    (
        "the cgroup file system mounted for the node's pressure",
        "hostPath volumes must be exactly",
        lambda o, _: _pace(o, {"workloads_cgroup": "node"}),
    ),
    (
        "a workloads cgroup outside the mounted cgroup file system",
        "safety.pace.workloads_cgroup",
        lambda o, _: _pace(o, {"workloads_cgroup": "/var/lib/kubepods"}),
    ),
]


# What the checks must refuse in the docker overlay, whose pod mounts the
# directory of Docker's containerd socket for images.keep_unpullable:
# (what, a word of the problem, mutation).
DOCKER: list[tuple[str, str, Mutation]] = [
    (
        "Docker's containerd not mounted",
        "hostPath volumes must be exactly",
        lambda o, _: _unmount(o, "docker-containerd"),
    ),
    (
        "Docker's containerd mounted elsewhere",
        "same path",
        lambda o, _: _mount(o, "docker-containerd").update(mountPath="/host/run/containerd"),
    ),
    (
        "Docker's containerd socket alone, which fails the pod where it is not",
        "hostPath volumes must be exactly",
        lambda o, _: _volume(o, "docker-containerd")["hostPath"].update(
            path="/run/containerd/containerd.sock", type="Socket"
        ),
    ),
]


# What the checks must refuse in examples/kubelet-image-gc, whose policy
# reads kubelet's configuration (images.disk.from_kubelet) and whose pod
# mounts it and the image file system: (what, a word of the problem,
# mutation).
KUBELET: list[tuple[str, str, Mutation]] = [
    (
        "kubelet's configuration writable",
        "config.yaml must be mounted readOnly",
        lambda o, _: _mount(o, "kubelet-config").pop("readOnly"),
    ),
    (
        "kubelet's configuration not mounted",
        "hostPath volumes must be exactly",
        lambda o, _: _unmount(o, "kubelet-config"),
    ),
    (
        "kubelet's configuration created if missing",
        "hostPath volumes must be exactly",
        lambda o, _: _volume(o, "kubelet-config")["hostPath"].update(type="FileOrCreate"),
    ),
    (
        "a kubelet configuration the policy does not name",
        "hostPath volumes must be exactly",
        lambda o, _: _policy(
            o, lambda p: p["images"]["disk"].update(from_kubelet="/etc/kubernetes/kubelet.yaml")
        ),
    ),
    (
        "from_kubelet: true without kubeadm's path mounted",
        "'/var/lib/kubelet/config.yaml': 'File'",
        lambda o, _: (
            _policy(o, lambda p: p["images"]["disk"].update(from_kubelet=True)),
            _volume(o, "kubelet-config")["hostPath"].update(path="/etc/kubernetes/kubelet.yaml"),
            _mount(o, "kubelet-config").update(mountPath="/etc/kubernetes/kubelet.yaml"),
        ),
    ),
    (
        "the image file system writable",
        "overlayfs must be mounted readOnly",
        lambda o, _: _mount(o, "image-fs").update(readOnly=False),
    ),
    (
        "no image file system",
        "exactly one more hostPath",
        lambda o, _: _unmount(o, "image-fs"),
    ),
    (
        "the image file system created if missing",
        "exactly one more hostPath",
        lambda o, _: _volume(o, "image-fs")["hostPath"].update(type="DirectoryOrCreate"),
    ),
    (
        "the image file system mounted elsewhere",
        "same path",
        lambda o, _: _mount(o, "image-fs").update(mountPath="/image-fs"),
    ),
    (
        "kubelet's mounts without from_kubelet",
        "hostPath volumes must be exactly",
        lambda o, _: _policy(o, lambda p: p.pop("images")),
    ),
    (
        "the policy changed beyond images.disk",
        "more than images.disk",
        lambda o, _: _policy(o, lambda p: p["images"].update(min_age="1h")),
    ),
]


def self_test(
    base: list[Obj],
    podmonitor: Obj,
    check: Callable[[list[Obj], Obj], list[str]],
    schema_problems: Callable[[Obj, str], list[str]],
    version: str,
    kubelet: list[Obj],
    check_kubelet: Callable[[list[Obj], Obj], list[str]],
    docker: list[Obj],
    check_docker: Callable[[list[Obj], Obj], list[str]],
) -> tuple[int, list[str]]:
    """How many copies were tried, and which ones got through: CHECKS of
    the base with `check`, KUBELET of examples/kubelet-image-gc's objects
    with `check_kubelet` (which also holds its policy to the base's), and
    DOCKER of the docker overlay's with `check_docker`."""
    missed = []
    for what, mutate in SCHEMA:
        objs = copy.deepcopy(base)
        mutate(objs, copy.deepcopy(podmonitor))
        if not any(schema_problems(o, version) for o in objs):
            missed.append(f"self-test: Kubernetes {version}'s schemas let through {what}")
    for objects, checks, breakages in (
        (base, check, CHECKS),
        (kubelet, check_kubelet, KUBELET),
        (docker, check_docker, DOCKER),
    ):
        for what, word, mutate in breakages:
            objs, monitor = copy.deepcopy(objects), copy.deepcopy(podmonitor)
            mutate(objs, monitor)
            problems = checks(objs, monitor)
            if not any(word in problem for problem in problems):
                missed.append(f"self-test: the checks let through {what} (said: {problems})")
    return len(SCHEMA) + len(CHECKS) + len(KUBELET) + len(DOCKER), missed
