#!/usr/bin/env bash
# How far the workloads' own stall moves, as the stall budget reads it:
# the latency probe (io_probe.py, as stall_probe.sh runs it) in a cgroup
# v2 of its own, alone ("quiet"), then with stall_probe.sh's busy writer
# beside it ("busy": BUSY_RATE (20) a second, BUSY_KIB (1024) KiB written
# and synced each); no engine, no removal. For each, over SECS (60) of
# 250-ms windows of PSI `some total` (io.pressure and cpu.pressure summed,
# as the budget spends it): the mean share, a window's standard deviation,
# and what the windows' stall above their mean sums to over 30 s (the
# budget's DEBT): its spread measured over sliding 30-s spans, and as
# independent windows would give it; the spread of a rest's level (3 s,
# 12 windows, as the budget measures it again) against the same, and how
# far successive windows correlate. Then the probe's p50 and p99.
#
# Run: benches/pacing/workload_noise.sh    (root; writes in DIR, default
#      a mktemp directory in /var/tmp, removed on exit)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${SECS:-60}
busy_rate=${BUSY_RATE:-20}
busy_kib=${BUSY_KIB:-1024}
root=/sys/fs/cgroup/unified
[ -f /sys/fs/cgroup/cgroup.controllers ] && root=/sys/fs/cgroup
[ -f "$root/cgroup.procs" ] || { echo "workload_noise: no cgroup v2 mount" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/spnoise-XXXXXX)
cg="$root/${dir##*/}"
mkdir "$cg"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
in_cgroup=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"')
mkdir -p "$dir/probe" "$dir/busy"
"${in_cgroup[@]}" "$cg" python3 benches/pacing/io_probe.py "$dir/probe" "$dir/probe.log" &
pids+=($!)
sleep 5
for phase in quiet busy; do
  if [ "$phase" = busy ]; then
    "${in_cgroup[@]}" "$cg" python3 benches/pacing/io_probe.py "$dir/busy" "$dir/busy.log" \
      --rate "$busy_rate" --write-kib "$busy_kib" &
    pids+=($!)
    sleep 5
  fi
  from=$(wc -l <"$dir/probe.log")
  python3 - "$cg" "$secs" "$phase" <<'EOF'
import statistics as st
import sys
import time

cg, secs, phase = sys.argv[1], float(sys.argv[2]), sys.argv[3]


def total(name):
    with open(f"{cg}/{name}") as f:
        for line in f:
            if line.startswith("some"):
                return int(line.split()[4].split("=")[1])
    return 0


def both():
    return total("io.pressure") + total("cpu.pressure")


shares = []
begun = time.monotonic()
last, at = both(), begun
while at - begun < secs:
    time.sleep(0.25)
    now, t = both(), time.monotonic()
    shares.append((now - last) / 1e6 / (t - at))
    last, at = now, t
mean, sd = st.mean(shares), st.pstdev(shares)
excess = [(s - mean) * 0.25 for s in shares]
spans = [sum(excess[i:i + 120]) for i in range(0, len(excess) - 119, 20)]
print(f"{phase}: stalled {mean * 100:.2f}% of the time; a 250-ms window's spread"
      f" {sd * 100:.2f}% ({sd * 250:.1f} ms); summed over 30 s"
      f" {st.pstdev(spans) * 1000:.0f} ms (independent windows:"
      f" {sd * 0.25 * 120 ** 0.5 * 1000:.0f} ms); {len(shares)} windows")
rests = [st.mean(shares[i:i + 12]) for i in range(0, len(shares) - 11, 12)]
lag = [(a - mean) * (b - mean) for a, b in zip(shares, shares[1:])]
print(f"  a rest's level (3 s, 12 windows): spread {st.pstdev(rests) * 100:.2f}%"
      f" (independent windows: {sd / 12 ** 0.5 * 100:.2f}%); successive windows"
      f" correlate {st.mean(lag) / sd ** 2:.2f}")
EOF
  to=$(wc -l <"$dir/probe.log")
  sed -n "$((from + 1)),${to}p" "$dir/probe.log" | awk '{ print $2 }' | sort -n >"$dir/latencies"
  n=$(wc -l <"$dir/latencies")
  echo "  probe: $n operations, p50 $(sed -n "$((n / 2))p" "$dir/latencies") ms, p99 $(sed -n "$((n * 99 / 100))p" "$dir/latencies") ms"
done
