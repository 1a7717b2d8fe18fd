#!/usr/bin/env python3
"""Renders and checks safeprune's Kubernetes manifests (deploy/kubernetes).

Run by scripts/k8s-validate.sh, in its virtual environment (the pins of
scripts/k8s-requirements.txt):

  k8s_manifests.py render VARIANT     print a variant's objects as YAML
  k8s_manifests.py check [--kubectl]  render, compare, validate, check

A variant is a kustomization: `base` is deploy/kubernetes (containerd),
`docker` is deploy/kubernetes/docker, `crio` deploy/kubernetes/crio
(`runtime.kind: cri` on CRI-O's socket), `kubelet-image-gc` the example
deploy/kubernetes/examples/kubelet-image-gc (base/ with kubelet's
configuration file and containerd's image file system mounted read-only,
and `images.disk.from_kubelet` in the policy), and `kubelet-image-gc-crio`
the same for CRI-O (deploy/kubernetes/crio with kubelet's file and CRI-O's
image directory). Rendering does what `kubectl kustomize` does with the few features they use (resources, JSON patches
with a target, images) and refuses any other kustomization key, so it
cannot drift from kustomize's silently; with --kubectl, `check` also
compares the two.

`check` validates every object strictly (an unknown field is an error)
against each Kubernetes release from 1.31 to the newest the validator
bundles, then checks what schemas cannot (k8s_checks.py): names that must
refer to each other, the policy against the mounts and ports, the pod's
security settings, and each overlay's policy against the one it builds on
(only `runtime` may differ from the base's; in kubelet-image-gc and
kubelet-image-gc-crio, only `images.disk` from the base's and crio's).
Last, it proves those checks bite (k8s_breakages.py).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml
from k8s_breakages import self_test
from k8s_checks import CheckError, check, policy_difference
from kubernetes_validate.utils import all_versions
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "kubernetes"
# docs/policy.md's overlay that acts before kubelet's image GC, as an example: a
# variant, checked as the others are.
KUBELET_IMAGE_GC = "kubelet-image-gc"
VARIANTS = {
    "base": DEPLOY,
    "docker": DEPLOY / "docker",
    "crio": DEPLOY / "crio",
    KUBELET_IMAGE_GC: DEPLOY / "examples" / "kubelet-image-gc",
    "kubelet-image-gc-crio": DEPLOY / "examples" / "kubelet-image-gc-crio",
}
# What each overlay is built on, and the one key of that one's policy it
# may change (policy_difference).
POLICY_CHANGES = {
    "docker": ("base", "runtime"),
    "crio": ("base", "runtime"),
    KUBELET_IMAGE_GC: ("base", "images.disk"),
    "kubelet-image-gc-crio": ("crio", "images.disk"),
}
PODMONITOR = DEPLOY / "examples" / "podmonitor.yaml"
PROMETHEUSRULE = DEPLOY / "examples" / "prometheusrule.yaml"
RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
# docs/install.md's overlay that takes the image from a registry, as an example.
REGISTRY = DEPLOY / "examples" / "registry"
REGISTRY_IMAGE = "registry.example.com/safeprune:0.1.0"
OLDEST = Version("1.31")

Obj = dict[str, Any]


class ManifestError(Exception):
    """A variant cannot be rendered."""


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
    facts = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", ""),
    }
    if not set(target) <= set(facts):
        raise ManifestError(f"patch target keys {sorted(set(target) - set(facts))} not supported")
    return all(facts[k] == v for k, v in target.items())


def render(directory: Path) -> list[Obj]:
    """The objects of the kustomization in `directory`, in order."""
    file = directory / "kustomization.yaml"
    kustomization = load_docs(file)[0]
    extra = set(kustomization) - {"apiVersion", "kind", "resources", "patches", "images"}
    if extra:
        raise ManifestError(
            f"{file}: {sorted(extra)} not supported: keep to resources, "
            "JSON patches and images, or teach scripts/k8s_manifests.py"
        )
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
    for entry in kustomization.get("images", []):
        objects = [set_image(obj, entry, file) for obj in objects]
    return objects


def image_name(image: str) -> str:
    """An image reference without its tag or digest, as kustomize's
    `images` matches it."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def pod_spec(obj: Obj) -> Obj:
    """The pod template's spec of a workload; empty for other objects."""
    return obj.get("spec", {}).get("template", {}).get("spec", {})


def set_image(obj: Obj, entry: dict[str, str], file: Path) -> Obj:
    """`obj` with kustomize's `images` entry applied to its pod template's
    containers: those whose image is `name` get `newName`, `newTag` or
    `digest`."""
    if not set(entry) <= {"name", "newName", "newTag", "digest"} or "name" not in entry:
        raise ManifestError(f"{file}: an images entry has a name and newName, newTag or digest")
    spec = pod_spec(obj)
    for group in ("initContainers", "containers"):
        for container in spec.get(group, []):
            image = container.get("image", "")
            if image_name(image) != entry["name"]:
                continue
            name = entry.get("newName", entry["name"])
            if "digest" in entry:
                container["image"] = f"{name}@{entry['digest']}"
            elif "newTag" in entry:
                container["image"] = f"{name}:{entry['newTag']}"
            else:
                container["image"] = name + image[len(image_name(image)) :]
    return obj


def dump(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=True)


def kubectl_differences(name: str, objects: list[Obj], directory: Path | None = None) -> list[str]:
    """How `kubectl kustomize` renders the variant (or the kustomization in
    `directory`) differently, if it does."""
    answer = subprocess.run(
        ["kubectl", "kustomize", str(directory or VARIANTS[name])],
        capture_output=True,
        text=True,
        check=False,
    )
    if answer.returncode != 0:
        return [f"{name}: kubectl kustomize failed: {answer.stderr.strip()}"]
    theirs = {identity(o): o for o in yaml.safe_load_all(answer.stdout) if o}
    ours = {identity(o): o for o in objects}
    problems = []
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            diff = difflib.unified_diff(
                dump([ours[key]] if key in ours else []).splitlines(),
                dump([theirs[key]] if key in theirs else []).splitlines(),
                "this rendering",
                "kubectl kustomize",
                lineterm="",
            )
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


# ------------------------------------------------------------------ main


def registry_problems(base: list[Obj]) -> list[str]:
    """The registry overlay renders base/ with only the image changed."""
    problems = []
    try:
        objects = render(REGISTRY)
    except ManifestError as e:
        return [f"{REGISTRY.relative_to(REPO)}: {e}"]
    images = [
        c["image"]
        for o in objects
        for c in pod_spec(o).get("containers", [])
    ]
    if images != [REGISTRY_IMAGE]:
        problems.append(f"{REGISTRY.relative_to(REPO)}: images {images}, not [{REGISTRY_IMAGE}]")
    unchanged = copy.deepcopy(base)
    for obj in unchanged:
        for c in pod_spec(obj).get("containers", []):
            c["image"] = REGISTRY_IMAGE
    if dump(objects) != dump(unchanged):
        problems.append(f"{REGISTRY.relative_to(REPO)}: changes more than the image")
    return problems


def overlay_check(
    rendered: dict[str, list[Obj]], name: str
) -> Callable[[list[Obj], Obj], list[str]]:
    """What run_check holds the overlay `name`'s objects to, for the
    self-test: check(), and its policy against that of the variant it
    builds on (POLICY_CHANGES)."""
    parent, key = POLICY_CHANGES[name]

    def checks(objects: list[Obj], podmonitor: Obj) -> list[str]:
        return check(objects, podmonitor) + policy_difference(
            rendered[parent], objects, name, key
        )

    return checks


def prometheusrule_problems(daemonset_namespace: str) -> list[str]:
    """The PrometheusRule example holds rules.yaml's groups, word for word,
    in the DaemonSet's namespace."""
    rule = load_docs(PROMETHEUSRULE)[0]
    problems = []
    if (rule.get("apiVersion"), rule.get("kind")) != ("monitoring.coreos.com/v1", "PrometheusRule"):
        problems.append(f"{PROMETHEUSRULE.relative_to(REPO)}: not a monitoring.coreos.com/v1 PrometheusRule")
    if rule.get("metadata", {}).get("namespace") != daemonset_namespace:
        problems.append(f"{PROMETHEUSRULE.relative_to(REPO)}: not in the DaemonSet's namespace")
    if set(rule.get("spec", {})) != {"groups"}:
        problems.append(f"{PROMETHEUSRULE.relative_to(REPO)}: its spec holds groups and nothing else")
    if rule.get("spec", {}).get("groups") != load_docs(RULES)[0]["groups"]:
        problems.append(
            f"{PROMETHEUSRULE.relative_to(REPO)}: its groups differ from {RULES.relative_to(REPO)}"
        )
    return problems


def run_check(use_kubectl: bool) -> int:
    rendered = {name: render(path) for name, path in VARIANTS.items()}
    podmonitor = load_docs(PODMONITOR)[0]
    problems: list[str] = []

    if use_kubectl:
        for name, objects in rendered.items():
            problems += kubectl_differences(name, objects)
        registry = REGISTRY.relative_to(REPO)
        try:
            problems += kubectl_differences(str(registry), render(REGISTRY), REGISTRY)
        except ManifestError as e:
            problems.append(f"{registry}: {e}")
        if not problems:
            print(
                f"k8s: kubectl kustomize renders {' and '.join(rendered)} and {registry} "
                "as this script does"
            )
    else:
        print("k8s: no kubectl on PATH: skipped the comparison with `kubectl kustomize`")

    checked = versions()
    # What the variants share is validated once.
    unique: dict[str, tuple[Obj, list[str]]] = {}
    for name, objects in rendered.items():
        for obj in objects:
            unique.setdefault(dump([obj]), (obj, []))[1].append(name)
    for obj, names in unique.values():
        for version in checked:
            problems += [f"{' and '.join(names)}: {m}" for m in schema_problems(obj, version)]
    print(
        f"k8s: kubernetes-validate {kubernetes_validate.__version__} --strict: "
        f"{len(unique)} distinct objects of {' and '.join(rendered)}, against Kubernetes "
        f"{', '.join('.'.join(v.split('.')[:2]) for v in checked)}"
    )

    for name, objects in rendered.items():
        problems += [f"{name}: {m}" for m in check(objects, podmonitor)]
    for overlay, (parent, key) in POLICY_CHANGES.items():
        problems += policy_difference(rendered[parent], rendered[overlay], overlay, key)
    print(
        "k8s: checked references, the policy against mounts and ports, the pod's privileges; "
        f"{PODMONITOR.relative_to(REPO)} (a CRD, no Kubernetes schema) against the DaemonSet"
    )
    print(
        "k8s: the overlays' policies are those they build on but for "
        + " and ".join(
            f"{overlay}'s {key} ({parent}'s)" for overlay, (parent, key) in POLICY_CHANGES.items()
        )
    )
    daemonset = next(o for o in rendered["base"] if o["kind"] == "DaemonSet")
    problems += prometheusrule_problems(daemonset["metadata"]["namespace"])
    problems += registry_problems(rendered["base"])
    print(
        f"k8s: {PROMETHEUSRULE.relative_to(REPO)} holds {RULES.relative_to(REPO)}'s groups; "
        f"{REGISTRY.relative_to(REPO)} renders base/ with the image {REGISTRY_IMAGE}"
    )

    if problems:
        print("k8s: self-test skipped: the manifests themselves fail")
    else:
        tried, missed = self_test(
            rendered["base"],
            podmonitor,
            check,
            schema_problems,
            checked[0],
            rendered[KUBELET_IMAGE_GC],
            overlay_check(rendered, KUBELET_IMAGE_GC),
            rendered["docker"],
            overlay_check(rendered, "docker"),
        )
        problems += missed
        print(f"k8s: self-test: {tried - len(missed)} of {tried} broken or loosened copies refused")

    for problem in problems:
        print(f"k8s: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("render", help="print a variant's objects as YAML").add_argument(
        "variant", choices=sorted(VARIANTS)
    )
    sub.add_parser("check", help="render, compare, validate and check").add_argument(
        "--kubectl", action="store_true", help="also compare with `kubectl kustomize`"
    )
    args = parser.parse_args()
    try:
        if args.command == "render":
            sys.stdout.write(dump(render(VARIANTS[args.variant])))
            return 0
        return run_check(args.kubectl)
    except (ManifestError, CheckError, OSError, yaml.YAMLError) as e:
        print(f"k8s: FAIL: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
