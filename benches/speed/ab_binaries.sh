#!/usr/bin/env bash
# Two safeprune builds, A and B, alternately (A B A B ...) on one private
# dockerd, each run on a fresh identical fixture: wall, user and system
# time of safeprune itself (/usr/bin/time) and the CPU ticks of every
# process in the engine's namespace. For a change whose effect is smaller
# than the spread between runs of `benches/speed/vs_prune.sh`: both sides
# meet the same engine state, the same number of times.
#
# Run: A=path/to/old/safeprune B=target/release/safeprune benches/speed/ab_binaries.sh [C/I/V]
#      (default fixture 2000/300/300; PAIRS=N, default 3; CMD=plan to time
#      `plan` instead of `run`)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${A:?A=path of the first safeprune binary}" "${B:?B=path of the second safeprune binary}"
IFS=/ read -r c i v <<<"${1:-2000/300/300}"
for tool in /usr/bin/time python3 unshare docker dockerd; do
  command -v "$tool" >/dev/null || { echo "ab_binaries: needs $tool" >&2; exit 1; }
done
# shellcheck source=benches/lib/private_dockerd.sh
. benches/lib/private_dockerd.sh
dir=$(mktemp -d /tmp/spab-XXXXXX)
trap 'stop_private_dockerd; remove_dir "$dir"' EXIT
trap 'exit 143' INT TERM
start_private_dockerd "$dir"
ticks=$(getconf CLK_TCK)
busybox_root "$dir/rootfs"
head -c 1024 /dev/urandom >"$dir/rootfs/extra"
tar -C "$dir/rootfs" -cf - . | docker import - bench/keep:1 >/dev/null
rm "$dir/rootfs/extra"
docker volume create keep-vol >/dev/null
docker run -d --name keeper -v keep-vol:/data bench/keep:1 sleep 1000000 >/dev/null
everything_policy "$dir/policy.yaml" "$engine_sock" "$dir/lock"
echo "fixture $c/$i/$v, ${CMD:-run}, ${PAIRS:-3} pairs; A=$A B=$B"
for _ in $(seq 1 "${PAIRS:-3}"); do
  for side in A B; do
    bin=$A
    [ "$side" = B ] && bin=$B
    python3 benches/lib/fixture.py "$engine_sock" "$dir/rootfs" "$c" "$i" "$v" --started $((c / 10))
    sync
    sleep 2
    t0=$(engine_ticks)
    timing=$( { /usr/bin/time -f '%e %U %S' "$bin" --config "$dir/policy.yaml" -q "${CMD:-run}" >/dev/null; } 2>&1 | tail -n 1)
    read -r wall user sys <<<"$timing"
    printf '%s wall %6.2f s  user %5.2f s  sys %5.2f s  engine cpu %5.2f s\n' "$side" "$wall" "$user" "$sys" \
      "$(echo "($(engine_ticks) - $t0) / $ticks" | bc -l)"
    docker system prune -a -f --volumes >/dev/null
  done
done
