#!/usr/bin/env bash
# Validates the Kubernetes manifests (deploy/kubernetes) as scripts/test.sh
# runs it: renders the containerd base and its overlays (Docker, CRI-O,
# examples/kubelet-image-gc and examples/kubelet-image-gc-crio), compares
# the rendering with `kubectl kustomize` when kubectl is on PATH, validates
# every object strictly against Kubernetes' own published schemas (1.31 to
# the newest the pinned kubernetes-validate bundles), and checks what the
# schemas cannot (scripts/k8s_manifests.py says what).
#
# The validator and its dependencies, pinned in scripts/k8s-requirements.txt,
# live in a virtual environment in target/k8s-venv, made from PyPI on the
# first run and again whenever the pins change. python3 and its venv module
# come from Debian (scripts/deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${CARGO_TARGET_DIR:-target}/k8s-venv
requirements=scripts/k8s-requirements.txt
stamp=$venv/requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "k8s: making $venv from $requirements (PyPI)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-deps --require-virtualenv -r "$requirements"
  # --no-deps installs exactly the pins; check says whether they suffice.
  "$venv/bin/python" -m pip check >&2
  echo "$want" >"$stamp"
fi

args=(check)
if command -v kubectl >/dev/null 2>&1; then args+=(--kubectl); fi
# -B: no __pycache__ in scripts/.
exec "$venv/bin/python" -B scripts/k8s_manifests.py "${args[@]}"
