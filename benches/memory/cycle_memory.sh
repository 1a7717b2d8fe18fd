#!/usr/bin/env bash
# Peak memory of one safeprune cycle as a node grows: a private dockerd
# (its own namespaces and directory, nothing of the host's Docker touched)
# with N exited containers and N/10 unused images, and the release
# binary's `run --dry-run` on it, timed by /usr/bin/time (maximum resident
# set). The figures size the DaemonSet's memory request and limit
# (deploy/kubernetes/base/daemonset.yaml).
#
# Run: benches/memory/cycle_memory.sh [N ...]   (default: 0 1000 5000)
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(0 1000 5000)
command -v /usr/bin/time >/dev/null || { echo "cycle_memory: needs /usr/bin/time (Debian package time)" >&2; exit 1; }
cargo build --release --locked --quiet
bin="$PWD/target/release/safeprune"

# shellcheck source=benches/lib/private_dockerd.sh
. benches/lib/private_dockerd.sh
dir=$(mktemp -d /tmp/spmem-XXXXXX)
cleanup() {
  stop_private_dockerd
  remove_dir "$dir"
}
trap cleanup EXIT
# A signal (timeout, ^C) exits through the EXIT trap, which tears down.
trap 'exit 143' INT TERM
start_private_dockerd "$dir"

# A busybox image, and distinct images by an extra file.
busybox_root "$dir/rootfs"
tar -C "$dir/rootfs" -cf "$dir/rootfs.tar" .
docker import "$dir/rootfs.tar" bench/base:1 >/dev/null

cat >"$dir/policy.yaml" <<YAML
runtime: { kind: docker, docker: { endpoint: unix://$engine_sock } }
containers: { min_age: "0" }
images: { min_age: "0", keep_unpullable: false }  # imported: none can come back
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
