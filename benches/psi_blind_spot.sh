#!/usr/bin/env bash
# What a workload's io.pressure does not see (issue 38): the latency probe
# (benches/io_probe.py, 100 operations a second) runs in a cgroup v2 of its
# own, and beside it, outside that cgroup, by turns for SECS (default 15)
# each: nothing (idle), one busy loop per CPU (cpu), and the deletion of
# FILES (default 6000) small files made beforehand, twice (rm), and a
# writer that appends 4 KiB and calls fdatasync FSYNC_RATE (default 30)
# times a second, as an engine's metadata store commits, twice (fsync). For each
# phase: the probe cgroup's io.pressure and cpu.pressure `some total`
# growth, the probe's latency above the idle phases' median summed, and
# the share of its operations slower than the idle phases' p99 (the first
# second of each phase dropped).
#
# Run: benches/psi_blind_spot.sh   (as root; DIR, default /var/tmp/psi-blind,
# on the file system to probe; it is emptied first and removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SECS:-15}
files=${FILES:-6000}
fsync_rate=${FSYNC_RATE:-30}
dir=${DIR:-/var/tmp/psi-blind}
# shellcheck source=benches/probe_windows.sh
. benches/probe_windows.sh
cg_root=$(cgroup_v2_root) || { echo "psi_blind_spot: no cgroup v2 hierarchy" >&2; exit 1; }
cg=$(mktemp -d "$cg_root/psiblind-XXXXXX")
rm -rf "$dir"
mkdir -p "$dir/churn"
cleanup() {
  stop_probe
  rm -rf "$dir"
  rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
total() { psi_total "$cg/$1.pressure"; }
for set in 1 2; do
  python3 - "$dir/churn/$set" "$files" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for i in range(n):
    with open(os.path.join(d, str(i)), "wb") as f:
        f.write(b"x" * 8192)
PY
done
sync
start_probe "$dir" "$cg"
sleep 6
phase() { # NAME WHAT [SET]
  local t0 i0 c0
  t0=$(date +%s.%N) i0=$(total io) c0=$(total cpu)
  case $2 in
    idle) sleep "$secs" ;;
    cpu)
      local pids=()
      for _ in $(seq "$(nproc)"); do (while :; do :; done) & pids+=($!); done
      sleep "$secs"
      kill "${pids[@]}"
      wait "${pids[@]}" 2>/dev/null || true
      ;;
    rm)
      rm -rf "$dir/churn/$3"
      sync -f "$dir/probe"
      sleep "$(python3 -c "import time; print(max(0.0, $secs - (time.time() - $t0)))")"
      ;;
    fsync)
      # Each append allocates a block: its fdatasync commits the journal,
      # which a workload's own fsync may then wait on.
      python3 - "$dir/fsync-$3" "$secs" "$fsync_rate" <<'PY'
import os, sys, time
path, secs, rate = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
began, n = time.time(), 0
while time.time() - began < secs:
    os.write(fd, b"x" * 4096)
    os.fdatasync(fd)
    n += 1
    time.sleep(max(0.0, n / rate - (time.time() - began)))
os.close(fd)
PY
      ;;
  esac
  echo "$1 $t0 $(date +%s.%N) $i0 $(total io) $c0 $(total cpu)" >>"$dir/phases"
}
phase idle1 idle
phase cpu1 cpu
phase idle2 idle
phase rm1 rm 1
phase idle3 idle
phase rm2 rm 2
phase idle4 idle
phase fsync1 fsync 1
phase idle5 idle
phase fsync2 fsync 2
stop_probe
echo "$(nproc) CPUs, $(uname -r), probe on $(df --output=source,fstype "$dir" | tail -1), ${secs} s phases"
python3 - "$dir" <<'PY'
import statistics, sys
d = sys.argv[1]
ops = [tuple(map(float, l.split())) for l in open(d + "/probe.log")]
phases = [l.split() for l in open(d + "/phases")]
def kept(p):
    t0, t1 = float(p[1]), float(p[2])
    return [lat for t, lat in ops if t0 + 1 <= t <= t1]
idle = sorted(lat for p in phases if p[0].startswith("idle") for lat in kept(p))
median, p99 = statistics.median(idle), idle[int(len(idle) * 0.99)]
print(f"idle: median {median:.3f} ms, p99 {p99:.3f} ms over {len(idle)} operations")
for p in phases:
    o = kept(p)
    i0, i1, c0, c1 = map(int, p[3:7])
    above = sum(max(0.0, lat - median) for lat in o) / 1000
    slow = 100 * sum(lat > p99 for lat in o) / len(o)
    print(f"{p[0]:6} {len(o):5} ops  io.pressure some +{(i1 - i0) / 1e6:.3f} s  "
          f"cpu.pressure some +{(c1 - c0) / 1e6:.3f} s  latency above idle median "
          f"{above:.3f} s  slower than idle p99 {slow:.2f}%  max {max(o):.1f} ms")
PY
