#!/usr/bin/env bash
# What a workload beside the run feels (issue 24): a latency probe
# (benches/io_probe.py: 4 KiB O_DIRECT read + write + fsync, 100 a second,
# on the file system of the engine's data) runs throughout while, on a
# private dockerd and identical fresh fixtures whose objects hold real
# bytes, these take turns (the order rotating each repeat):
#   idle       nothing, for IDLE_SECS (default 20)
#   docker     docker system prune -a -f --volumes
#   unpaced    safeprune run
#   paced      safeprune run with safety.pace (PACE, default
#              {io_pressure_percent: 10, max_delay: 10m}; or, with
#              PACE_OVER_IDLE=M, M points above the node's own pressure
#              with the probe alone: see benches/probe_windows.sh)
# For each it prints the wall time, the probe's operations inside it and
# their p50, p99 and max latency, and the share of the time PSI io `some`
# covered; then, over all repeats, each one's p99 against idle's.
#
# A fixture "C/I/V" is C containers run to their exit, each having written
# WRITE_KIB (default 2048) KiB into its writable layer (and half that into
# its anonymous volume, a third of them), I unused images of IMAGE_KIB
# (default 12288) KiB of random bytes each, and V unused named volumes.
#
# Run: benches/pace_probe.sh [FIXTURE]   (default 600/150/200)
#      REPEATS=N (default 3)
#      SIDES="idle paced" (default "idle docker unpaced paced"): only these
# p99 needs many operations inside each run: at 100 a second a 4 s run
# holds 400, and its p99 is its 4th worst; raise REPEATS or the fixture
# for at least 2,000 in all per side.
set -euo pipefail
cd "$(dirname "$0")/.."
fixture=${1:-600/150/200}
repeats=${REPEATS:-3}
idle_secs=${IDLE_SECS:-20}
pace=${PACE:-"{io_pressure_percent: 10, max_delay: 10m}"}
write_kib=${WRITE_KIB:-2048}
image_kib=${IMAGE_KIB:-12288}
for tool in python3 unshare docker dockerd; do
  command -v "$tool" >/dev/null || { echo "pace_probe: needs $tool" >&2; exit 1; }
done
[ -r /proc/pressure/io ] || { echo "pace_probe: needs PSI (/proc/pressure/io)" >&2; exit 1; }
cargo build --release --locked --quiet
bin="$PWD/target/release/safeprune"

# shellcheck source=benches/private_dockerd.sh
. benches/private_dockerd.sh
# shellcheck source=benches/probe_windows.sh
. benches/probe_windows.sh
dir=$(mktemp -d /var/tmp/sppace-XXXXXX)
cleanup() {
  stop_probe
  stop_private_dockerd
  remove_dir "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

start_private_dockerd "$dir"
busybox_root "$dir/rootfs"
IFS=/ read -r containers images volumes <<<"$fixture"

start_probe "$dir"

# The policies, with pace as it stands (with PACE_OVER_IDLE, pace_over_idle
# sets it again and calls this before each paced side).
write_policies() {
  pace_policies "$dir" "$pace" \
    "runtime: { kind: docker, docker: { endpoint: unix://$engine_sock } }" \
    'containers: { min_age: "0" }' \
    'images: { min_age: "0" }' \
    'volumes: { enabled: true, anonymous_only: false, min_age: "0" }' \
    'networks: { min_age: "0" }' \
    'build_cache: { min_age: "0" }'
}
write_policies

# One side: its window (start and end, Unix seconds), wall time and the
# share of it PSI io `some` covered, into $dir/windows.
side() { # NAME
  local name=$1
  if [ "$name" != idle ]; then
    python3 benches/fixture.py "$engine_sock" "$dir/rootfs" "$containers" "$images" "$volumes" \
      --started "$containers" --write-kib "$write_kib" --image-kib "$image_kib" --prefix "b$RANDOM"
    sync
    sleep 5 # let the fixture's own writes settle out of the probe's way
  fi
  [ "$name" != paced ] || pace_over_idle
  window_begin
  case $name in
    idle) sleep "$idle_secs" ;;
    docker) docker system prune -a -f --volumes >/dev/null ;;
    unpaced) "$bin" --config "$dir/unpaced.yaml" -q run >/dev/null ;;
    paced) "$bin" --config "$dir/paced.yaml" -q run >/dev/null ;;
  esac
  window_end "$name" "$dir"
  [ "$name" != paced ] || print_pace "$dir/paced.json"
  [ "$name" = idle ] || docker system prune -a -f --volumes >/dev/null
}

echo "dockerd $(dockerd --version | cut -d' ' -f3 | tr -d ,), $(nproc) cores, fixture $fixture" \
  "(${write_kib} KiB written per container, ${image_kib} KiB per image), $repeats repeats"
# shellcheck disable=SC2086 # SIDES is a list of words
run_sides "$dir" "$repeats" ${SIDES:-idle docker unpaced paced}
