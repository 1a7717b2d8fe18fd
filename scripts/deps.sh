#!/usr/bin/env bash
# Installs what safeprune's build and tests need, when it is missing; with
# --start-docker also starts the node's Docker Engine if none answers.
# Idempotent: safe to run on every CI run and on a node that has it all.
set -euo pipefail

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
# The test harness runs each private dockerd under unshare(1), with mount(8).
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v mount >/dev/null 2>&1 || need+=(mount)
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

if [ "${1:-}" = "--start-docker" ]; then
  if ! docker info >/dev/null 2>&1; then
    echo "deps: starting dockerd (log: /var/log/safeprune-dockerd.log)" >&2
    $sudo sh -c 'nohup dockerd >/var/log/safeprune-dockerd.log 2>&1 &'
    for _ in $(seq 1 60); do
      docker info >/dev/null 2>&1 && break
      sleep 0.5
    done
    docker info >/dev/null 2>&1 || { echo "deps: dockerd did not start; see /var/log/safeprune-dockerd.log" >&2; exit 1; }
  fi
fi
