#!/usr/bin/env bash
# docs/policy.md's "What it looks like under disk pressure": a private dockerd
# on a 160 MiB loop-mounted ext4, seven 16 MiB images, safeprune daemon
# watching while four of them run (and go) and two keep running, then
# `plan`, `explain` and `run` on images.disk 90/85 with keep_recent 2.
# Run as root from the repository, after `cargo build`. Nothing of the
# host's Docker is touched.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
safeprune=$repo/target/debug/safeprune
# shellcheck source=benches/private_dockerd.sh
. "$repo/benches/private_dockerd.sh"
dir=$(mktemp -d /tmp/sp-demo-XXXXXX)
mkdir -p "$dir/data"
truncate -s 160M "$dir/data.ext4"
mkfs.ext4 -q -F "$dir/data.ext4"
mount -o loop "$dir/data.ext4" "$dir/data"
finish() {
  stop_private_dockerd
  sleep 1
  umount "$dir/data" 2>/dev/null || umount -l "$dir/data"
  rm -rf "$dir"
}
trap finish EXIT
start_private_dockerd "$dir"
busybox_root "$dir/root"
for image in shop/web:0.9 shop/web:1.0 shop/web:1.1 shop/web:1.2 shop/api:2.0 shop/api:2.1 tools/debug:1; do
  head -c $((16 << 20)) /dev/urandom >"$dir/root/extra"
  tar -C "$dir/root" -c . | docker import - "$image" >/dev/null
  sleep 1
done
cat >"$dir/policy.yaml" <<POLICY
runtime: { kind: docker, docker: { endpoint: "unix://$dir/d.sock" } }
state_dir: $dir/state
lock_file: $dir/lock
report: { json_path: "", audit_log: "", metrics_textfile: "" }
images:
  min_age: "0"
  keep_recent: 2
  disk: { high_percent: 90, low_percent: 85 }
POLICY
"$safeprune" daemon --config "$dir/policy.yaml" 2>"$dir/daemon.log" &
daemon=$!
sleep 1
for image in shop/web:1.0 shop/api:2.0 shop/web:0.9 shop/web:1.1; do
  docker run --rm "$image" sh -c 'sleep 1'
done
docker run -d --name api shop/api:2.1 sleep 3600 >/dev/null
docker run -d --name web shop/web:1.2 sleep 3600 >/dev/null
sleep 3
kill -TERM "$daemon"
wait "$daemon" || true
cat "$dir/daemon.log"
df -h "$dir/data"
"$safeprune" plan --config "$dir/policy.yaml" | sed -n '/IMAGES/,/^$/p'
"$safeprune" explain --config "$dir/policy.yaml" shop/web:0.9
"$safeprune" run --config "$dir/policy.yaml" | sed -n '/SUMMARY/,$p'
df -h "$dir/data"
