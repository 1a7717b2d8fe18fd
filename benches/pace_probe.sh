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
#              {io_pressure_percent: 10, max_delay: 10m})
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
dir=$(mktemp -d /var/tmp/sppace-XXXXXX)
cleanup() {
  if [ -n "${probe:-}" ]; then kill "$probe" 2>/dev/null || true; wait "$probe" 2>/dev/null || true; fi
  stop_private_dockerd
  remove_dir "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

start_private_dockerd "$dir"
busybox_root "$dir/rootfs"
IFS=/ read -r containers images volumes <<<"$fixture"

for side in unpaced paced; do
  {
    echo "runtime: { kind: docker, docker: { endpoint: unix://$engine_sock } }"
    echo 'containers: { min_age: "0" }'
    echo 'images: { min_age: "0" }'
    echo 'volumes: { enabled: true, anonymous_only: false, min_age: "0" }'
    echo 'networks: { min_age: "0" }'
    echo 'build_cache: { min_age: "0" }'
    if [ $side = paced ]; then
      echo "safety: { max_deletions: 1000000, pace: $pace }"
    else
      echo "safety: { max_deletions: 1000000 }"
    fi
    echo "lock_file: $dir/lock"
    echo "state_dir: $dir/state"
    echo "report: { json_path: $dir/$side.json }"
  } >"$dir/$side.yaml"
done

# PSI io `some` total (microseconds stalled) now.
psi_total() { awk '/^some/ { sub("total=", "", $5); print $5 }' /proc/pressure/io; }

mkdir -p "$dir/probe"
python3 benches/io_probe.py "$dir/probe" "$dir/probe.log" &
probe=$!
sleep 2
: >"$dir/windows"

# One side: its window (start and end, Unix seconds), wall time and the
# share of it PSI io `some` covered, into $dir/windows.
side() { # NAME
  local name=$1 begin end psi0 psi1
  if [ "$name" != idle ]; then
    python3 benches/fixture.py "$engine_sock" "$dir/rootfs" "$containers" "$images" "$volumes" \
      --started "$containers" --write-kib "$write_kib" --image-kib "$image_kib" --prefix "b$RANDOM"
    sync
    sleep 5 # let the fixture's own writes settle out of the probe's way
  fi
  psi0=$(psi_total)
  begin=$(date +%s.%N)
  case $name in
    idle) sleep "$idle_secs" ;;
    docker) docker system prune -a -f --volumes >/dev/null ;;
    unpaced) "$bin" --config "$dir/unpaced.yaml" -q run >/dev/null ;;
    paced) "$bin" --config "$dir/paced.yaml" -q run >/dev/null ;;
  esac
  end=$(date +%s.%N)
  psi1=$(psi_total)
  echo "$name $begin $end $(echo "($psi1 - $psi0) / 1000000 / ($end - $begin)" | bc -l)" >>"$dir/windows"
  if [ "$name" = paced ]; then
    python3 -c 'import json,sys; print("    paced:", json.dumps(json.load(open(sys.argv[1]))["pace"]))' "$dir/paced.json"
  fi
  [ "$name" = idle ] || docker system prune -a -f --volumes >/dev/null
}

echo "dockerd $(dockerd --version | cut -d' ' -f3 | tr -d ,), $(nproc) cores, fixture $fixture" \
  "(${write_kib} KiB written per container, ${image_kib} KiB per image), $repeats repeats"
order=(idle docker unpaced paced)
for r in $(seq 1 "$repeats"); do
  echo "repeat $r: ${order[*]}"
  for name in "${order[@]}"; do side "$name"; done
  order=("${order[@]:1}" "${order[0]}")
done
kill "$probe"
wait "$probe" 2>/dev/null || true
probe=""

python3 - "$dir/probe.log" "$dir/windows" <<'PY'
import sys
ops = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
windows = [l.split() for l in open(sys.argv[2]) if l.strip()]

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")

sides = {}
for name, begin, end, psi in windows:
    begin, end = float(begin), float(end)
    lat = [ms for t, ms in ops if begin <= t < end]
    sides.setdefault(name, {"lat": [], "wall": [], "psi": []})
    sides[name]["lat"] += lat
    sides[name]["wall"].append(end - begin)
    sides[name]["psi"].append(float(psi))
    print(f"  {name:8} wall {end - begin:7.2f} s  ops {len(lat):5d}  p50 {pct(lat, 50):6.2f} ms"
          f"  p99 {pct(lat, 99):7.2f} ms  max {max(lat, default=float('nan')):8.2f} ms  psi some {float(psi) * 100:5.1f}%")
idle = pct(sides.get("idle", {"lat": []})["lat"], 99)
print("all repeats:")
for name, s in sides.items():
    p99 = pct(s["lat"], 99)
    walls = sorted(s["wall"])
    print(f"  {name:8} ops {len(s['lat']):6d}  p50 {pct(s['lat'], 50):6.2f} ms  p99 {p99:7.2f} ms"
          f" ({p99 / idle:5.2f}x idle)  max {max(s['lat'], default=float('nan')):8.2f} ms"
          f"  median wall {walls[len(walls) // 2]:7.2f} s")
PY
