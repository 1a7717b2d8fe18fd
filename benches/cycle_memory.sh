#!/usr/bin/env bash
# Peak memory of one safeprune cycle as a node grows: a private dockerd
# (its own namespaces and directory, nothing of the host's Docker touched)
# with N exited containers and N/10 unused images, and the release
# binary's `run --dry-run` on it, timed by /usr/bin/time (maximum resident
# set). The figures size the DaemonSet's memory request and limit
# (deploy/kubernetes/base/daemonset.yaml).
#
# Run: benches/cycle_memory.sh [N ...]   (default: 0 1000 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(0 1000 5000)
command -v /usr/bin/time >/dev/null || { echo "cycle_memory: needs /usr/bin/time (Debian package time)" >&2; exit 1; }
cargo build --release --locked --quiet
bin="$PWD/target/release/safeprune"

dir=$(mktemp -d /tmp/spmem-XXXXXX)
sock="$dir/d.sock"
cleanup() {
  [ -n "${engine:-}" ] && kill "$engine" 2>/dev/null && wait "$engine" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
# dockerd as pid 1 of its own pid, mount and network namespaces: its
# containers and mounts go with it.
unshare --pid --fork --kill-child --mount --mount-proc --net --propagation private \
  sh -c 'mount -n -t tmpfs sp-run /run && exec dockerd --data-root "$1/data" --exec-root "$1/exec" \
    --host "unix://$2" --pidfile "$1/pid" --bridge=none --iptables=false' sh "$dir" "$sock" \
  >"$dir/dockerd.log" 2>&1 &
engine=$!
export DOCKER_HOST="unix://$sock"
for _ in $(seq 1 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
docker info >/dev/null

# A busybox image, and distinct images by an extra file.
mkdir -p "$dir/rootfs/bin"
cp /bin/busybox "$dir/rootfs/bin/busybox"
ln -s busybox "$dir/rootfs/bin/true"
tar -C "$dir/rootfs" -cf "$dir/rootfs.tar" .
docker import "$dir/rootfs.tar" bench/base:1 >/dev/null

cat >"$dir/policy.yaml" <<YAML
runtime: { kind: docker, docker: { endpoint: unix://$sock } }
containers: { min_age: "0" }
images: { min_age: "0" }
build_cache: { enabled: false }
lock_file: $dir/lock
YAML

printf '%8s %8s %14s %10s\n' containers images "peak RSS (KiB)" "wall (s)"
made=0
for n in "${sizes[@]}"; do
  # Grow the node to n containers and n/10 images.
  seq "$made" $((n - 1)) | xargs -r -P 4 -I{} docker create -q --name c{} bench/base:1 true >/dev/null
  for i in $(seq $((made / 10)) $((n / 10 - 1))); do
    printf 'image %s\n' "$i" >"$dir/rootfs/extra"
    tar -C "$dir/rootfs" -cf "$dir/rootfs.tar" .
    docker import "$dir/rootfs.tar" "bench/img$i:1" >/dev/null
  done
  made=$n
  out=$(/usr/bin/time -f '%M %e' "$bin" --config "$dir/policy.yaml" -q run --dry-run 2>&1 >/dev/null | tail -n 1)
  read -r rss wall <<<"$out"
  printf '%8s %8s %14s %10s\n' "$n" $((n / 10)) "$rss" "$wall"
done
