# shellcheck shell=bash
# Sourced by the latency-probe benchmarks (benches/pace_probe.sh on
# dockerd, benches/pace_probe_containerd.sh on containerd,
# benches/stall_probe.sh, benches/psi_blind_spot.sh): the probe
# (benches/io_probe.py) beside the runs, and each run's window.
#
#   start_probe DIR [CGROUP]
#                          runs the probe on a file in DIR/probe (DIR on the
#                          file system of the engine's data), logging to
#                          DIR/probe.log; sets probe (its pid); with CGROUP
#                          (a cgroup v2 directory), inside it
#   "${in_cgroup[@]}" CGROUP CMD...
#                          runs CMD in CGROUP (a cgroup v2 directory),
#                          moved there before it starts; with &, $! is
#                          CMD's pid (sh execs it)
#   stop_probe             stops it (also from the caller's EXIT trap)
#   psi_total FILE         PSI `some total` of FILE now
#   cgroup_v2_root         prints the cgroup v2 mount, or fails
#   window_begin           marks a run's start (time and PSI io `some`)
#   window_end NAME DIR    appends "NAME begin end psi-share" to DIR/windows
#   pace_policies DIR PACE LINE...
#                          writes DIR/unpaced.yaml and DIR/paced.yaml: the
#                          LINEs (runtime and kinds), no deletion limit
#                          (paced: with `pace: PACE`), the lock, state,
#                          JSON report (DIR/<side>.json) and audit log
#                          (DIR/<side>.audit) in DIR
#   pace_over_idle         with PACE_OVER_IDLE=M set: reads the share of
#                          the time PSI io `some` covers with only the
#                          probe running (IDLE_FLOOR_SECS, default 20),
#                          sets pace to a threshold M points above it,
#                          max_delay PACE_MAX_DELAY (default 60m), as an
#                          operator sets it from a node's own pressure,
#                          and calls the caller's write_policies. Called
#                          just before a paced side, after its fixture
#                          settled: read once at the bench's start, the
#                          floor came out up to 0.25 points above the idle
#                          windows that followed
#   print_pace REPORT      prints the `pace` object of a JSON report
#   run_sides DIR REPEATS SIDE...
#                          REPEATS times, calls the caller's `side NAME` for
#                          each SIDE, the order rotating each repeat; then
#                          stops the probe and prints the figures: per
#                          window, then per side over all repeats
#                          (benches/probe_report.py)

start_probe() {
  mkdir -p "$1/probe"
  if [ -n "${2:-}" ]; then
    "${in_cgroup[@]}" "$2" python3 benches/io_probe.py "$1/probe" "$1/probe.log" &
  else
    python3 benches/io_probe.py "$1/probe" "$1/probe.log" &
  fi
  probe=$!
  sleep 2
  : >"$1/windows"
}

# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
in_cgroup=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"')

stop_probe() {
  if [ -n "${probe:-}" ]; then
    kill "$probe" 2>/dev/null || true
    wait "$probe" 2>/dev/null || true
  fi
  probe=""
}

# PSI `some` total (microseconds stalled) now, of FILE: the node's
# /proc/pressure/io, or a cgroup's io.pressure or cpu.pressure.
psi_total() { awk '/^some/ { sub("total=", "", $5); print $5 }' "$1"; }

# The cgroup v2 mount: /sys/fs/cgroup on a pure v2 node,
# /sys/fs/cgroup/unified on a hybrid one; fails when there is none.
cgroup_v2_root() {
  local root
  for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    [ -e "$root/cgroup.controllers" ] && { echo "$root"; return 0; }
  done
  return 1
}

window_begin() {
  window_psi=$(psi_total /proc/pressure/io)
  window_start=$(date +%s.%N)
}

# The share of the time since window_begin that PSI io `some` covered (0 to 1).
window_share() {
  echo "($(psi_total /proc/pressure/io) - $window_psi) / 1000000 / ($(date +%s.%N) - $window_start)" | bc -l
}

window_end() { # NAME DIR
  local share
  share=$(window_share)
  echo "$1 $window_start $(date +%s.%N) $share" >>"$2/windows"
}

pace_policies() {
  local dir=$1 pace=$2 side
  shift 2
  for side in unpaced paced; do
    {
      printf '%s\n' "$@"
      if [ $side = paced ]; then
        echo "safety: { max_deletions: 1000000, pace: $pace }"
      else
        echo "safety: { max_deletions: 1000000 }"
      fi
      echo "lock_file: $dir/lock"
      echo "state_dir: $dir/state"
      echo "report: { json_path: $dir/$side.json, audit_log: $dir/$side.audit }"
    } >"$dir/$side.yaml"
  done
}

pace_over_idle() {
  [ -n "${PACE_OVER_IDLE:-}" ] || return 0
  local floor threshold
  window_begin
  sleep "${IDLE_FLOOR_SECS:-20}"
  floor=$(printf '%.2f' "$(echo "$(window_share) * 100" | bc -l)")
  threshold=$(printf '%.2f' "$(echo "$floor + $PACE_OVER_IDLE" | bc -l)")
  echo "the node's own pressure with the probe alone: ${floor}%; paced at ${threshold}% (${PACE_OVER_IDLE} above it)"
  pace="{io_pressure_percent: $threshold, max_delay: ${PACE_MAX_DELAY:-60m}}"
  write_policies
}

print_pace() {
  python3 -c 'import json,sys; print("    paced:", json.dumps(json.load(open(sys.argv[1]))["pace"]))' "$1"
}

run_sides() {
  local dir=$1 repeats=$2 r name
  shift 2
  local order=("$@")
  for r in $(seq 1 "$repeats"); do
    echo "repeat $r: ${order[*]}"
    for name in "${order[@]}"; do side "$name"; done
    order=("${order[@]:1}" "${order[0]}")
  done
  stop_probe
  python3 benches/probe_report.py "$dir/probe.log" "$dir/windows"
}
