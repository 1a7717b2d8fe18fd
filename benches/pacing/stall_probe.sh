#!/usr/bin/env bash
# What the workloads feel of a paced run, by the stall budget: the latency
# probe (benches/pacing/io_probe.py: 4 KiB O_DIRECT read + write + fsync,
# 100 a second, on the file system of the engine's data) runs in a
# cgroup v2 of its own that plays the workloads (safety.pace.
# workloads_cgroup); the private engine and safeprune run outside it.
# Each arm is interleaved with idle in ABBA order, so that what drifts on
# the machine hits both alike:
#   paced      ONE safeprune run over a fixture, stopped (SIGSTOP) during
#              idle blocks and continued (SIGCONT) in its own, blocks of
#              BLOCK_SECS (default 40, 30 to 60): I P P I I P P I ...; the
#              first DROP_SECS (default 3) of probe operations after each
#              switch are dropped. A run that ends before the arm holds
#              MIN_OPS (default 10000) kept operations is followed by a
#              new fixture (its building and SETTLE_SECS are not measured)
#              and a new run. Its policy: safety.pace {io_pressure_percent:
#              CEILING (10), max_delay: MAX_DELAY (60m),
#              added_io_pressure_percent: ADDED (0.1, the default policy's), workloads_cgroup:
#              the probe's cgroup, on_max_delay: continue};
#              safety.concurrency unset (auto), as the older benches.
#   unpaced    safeprune run without pace; docker: docker system prune -a
#              -f --volumes (Docker only: containerd has none). Each run
#              is a block, all its operations the arm's, RUNS (default 4)
#              of them on fresh fixtures, with an idle block of the last
#              run's length (plus DROP_SECS) before or after: I R R I ...
# With BUSY=1 a steady writer (io_probe.py at BUSY_RATE (20) a second,
# BUSY_KIB (1024) KiB written and synced each, in the workloads' cgroup)
# runs from before the first block to the last: a busy node, whose
# workloads stall by themselves throughout. BUSY and DRIFT exclude each
# other.
# With DRIFT=1 a steady writer (io_probe.py at WRITER_RATE (50) a second,
# WRITER_KIB (256) KiB written each, in the workloads' cgroup too) starts
# at the first ABBA group edge, or edge between a group's two paced blocks
# with the run going, where the paced arm holds MIN_OPS/2 kept
# operations and its run has removed half its objects, and runs to the
# arm's end, which then holds MIN_OPS/2 kept operations after it; the
# figures are given before it (phase pre) and with it (phase drift).
#
# The stall is also judged from outside the pacer: PSI `some total` of
# the workloads' cgroup's io.pressure and cpu.pressure is read at each
# block's start, after its dropped seconds and at its end; the report
# gives the stall the arm's blocks added over idle ones (I/O and CPU
# summed, as the budget spends it, and I/O alone), percent of wall time
# and against ADDED. An idle block's first DROP_SECS after an arm block
# count for the arm: a removal's late stall falls there.
#
# The figures (benches/pacing/stall_report.py): per arm, idle's p99 over
# all its idle operations, the share of the arm's operations slower than
# it with a 95% interval (block bootstrap), p50/p99/max of both, objects
# per second in the arm's blocks (from safeprune's audit log) and each run's
# JSON report's `pace`. Logs, blocks, reports and figures stay in OUT
# (default /var/tmp/stall-<time>-<engine>).
#
# Fixture "C/I/V": on Docker benches/lib/fixture.py's (C containers run to
# their exit after writing WRITE_KIB (2048) KiB, I images of IMAGE_KIB
# (12288) KiB, V volumes); on containerd benches/lib/ctr_fixture.py's C/I
# (V is not used), with CONTAINERD=1.6 or 2 as
# benches/lib/private_containerd.sh.
#
# Run: benches/pacing/stall_probe.sh [FIXTURE]   (default 600/150/200)
#      ENGINE=docker|containerd  ARMS="paced unpaced docker" (default paced)
#      MAX_ARM_SECS=S: stop (SIGTERM) a paced run still going once the arm
#      holds MIN_OPS and S seconds have passed (default 0: never)
#      MAX_RUNS=N: at most N paced runs (fixtures) in the arm, even short of
#      MIN_OPS (default 0: no limit), for a pacer that finishes in seconds
set -euo pipefail
{ # read whole before it runs, so that editing the file cannot change a run
cd "$(dirname "$0")/../.."
fixture=${1:-600/150/200}
engine=${ENGINE:-docker}
arms=${ARMS:-paced}
block_secs=${BLOCK_SECS:-40}
drop_secs=${DROP_SECS:-3}
min_ops=${MIN_OPS:-10000}
added=${ADDED:-0.1}
ceiling=${CEILING:-10}
max_delay=${MAX_DELAY:-60m}
runs=${RUNS:-4}
settle=${SETTLE_SECS:-5}
drift=${DRIFT:-0}
busy=${BUSY:-0}
busy_rate=${BUSY_RATE:-20}
busy_kib=${BUSY_KIB:-1024}
writer_rate=${WRITER_RATE:-50}
writer_kib=${WRITER_KIB:-256}
write_kib=${WRITE_KIB:-2048}
image_kib=${IMAGE_KIB:-12288}
max_arm_secs=${MAX_ARM_SECS:-0}
max_runs=${MAX_RUNS:-0}
rate=100 # the probe's operations a second (io_probe.py's default)
out=${OUT:-/var/tmp/stall-$(date -u +%Y%m%dT%H%M%SZ)-$engine}
if ! [[ $block_secs =~ ^[0-9]+$ ]] || [ "$block_secs" -lt 30 ] || [ "$block_secs" -gt 60 ]; then
  echo "stall_probe: BLOCK_SECS must be 30 to 60" >&2
  exit 2
fi
if ! [[ $runs =~ ^[0-9]+$ ]] || [ $((runs % 2)) -ne 0 ] || [ "$runs" -eq 0 ]; then
  echo "stall_probe: RUNS must be even" >&2
  exit 2
fi
case $engine in docker | containerd) ;; *) echo "stall_probe: ENGINE docker or containerd" >&2; exit 2 ;; esac
if [ "$busy" = 1 ] && [ "$drift" = 1 ]; then
  echo "stall_probe: BUSY and DRIFT exclude each other" >&2
  exit 2
fi
for tool in python3 unshare; do
  command -v "$tool" >/dev/null || { echo "stall_probe: needs $tool" >&2; exit 1; }
done
# The probe in the workloads' cgroup, and what reads their stall.
# "${in_cgroup[@]}" CGROUP CMD... runs CMD in CGROUP (a cgroup v2
# directory), moved there before it starts; with &, $! is CMD's pid.
# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
in_cgroup=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"')
# start_probe DIR CGROUP: the probe on a file in DIR/probe (DIR on the file
# system of the engine's data), in CGROUP, logging to DIR/probe.log; sets
# probe (its pid).
start_probe() {
  mkdir -p "$1/probe"
  "${in_cgroup[@]}" "$2" python3 benches/pacing/io_probe.py "$1/probe" "$1/probe.log" &
  probe=$!
  sleep 2
}
stop_probe() {
  if [ -n "${probe:-}" ]; then
    kill "$probe" 2>/dev/null || true
    wait "$probe" 2>/dev/null || true
  fi
  probe=""
}
# PSI `some` total (microseconds stalled) now, of a cgroup's io.pressure
# or cpu.pressure.
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
# pace_policies DIR PACE LINE...: DIR/unpaced.yaml and DIR/paced.yaml, the
# LINEs (runtime and kinds), no deletion limit (paced: with `pace: PACE`),
# the lock, state, JSON report (DIR/<side>.json) and audit log
# (DIR/<side>.audit) in DIR.
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
cg_root=$(cgroup_v2_root) || { echo "stall_probe: no cgroup v2 mount" >&2; exit 1; }
IFS=/ read -r containers images volumes <<<"$fixture"
volumes=${volumes:-0}
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/safeprune"

# shellcheck source=benches/lib/private_dockerd.sh
. benches/lib/private_dockerd.sh
# shellcheck source=benches/lib/private_containerd.sh
. benches/lib/private_containerd.sh
dir=$(mktemp -d /var/tmp/spstall-XXXXXX)
mkdir -p "$out"
ln -s "$out/probe.log" "$dir/probe.log"
cg="$cg_root/${dir##*/}"
mkdir "$cg"
run_pid="" writer=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ -n "$run_pid" ]; then kill -CONT "$run_pid" 2>/dev/null || true; kill "$run_pid" 2>/dev/null || true; wait "$run_pid" 2>/dev/null || true; fi
  # Defined further down: an engine that fails to start exits before.
  if declare -F stop_writer >/dev/null; then stop_writer; fi
  stop_probe
  for _ in $(seq 1 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
  stop_private_dockerd
  remove_dir "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

namespace=spbench
# The fixture's images are imported, which no registry can give back: on a
# CRI runtime `images.keep_unpullable: auto` would keep them all.
if [ "$engine" = docker ]; then
  start_private_dockerd "$dir"
  engine_version="dockerd $(dockerd --version | cut -d' ' -f3 | tr -d ,)"
  runtime="runtime: { kind: docker, docker: { endpoint: unix://$engine_sock } }"
  kinds=('containers: { min_age: "0" }' 'images: { min_age: "0", keep_unpullable: false }'
    'volumes: { enabled: true, anonymous_only: false, min_age: "0" }'
    'networks: { min_age: "0" }' 'build_cache: { min_age: "0" }')
  # with the anonymous volumes of a third of the containers, 3 networks and the base image
  objects=$((containers + (containers + 2) / 3 + images + volumes + 4))
  make_fixture() {
    python3 benches/lib/fixture.py "$engine_sock" "$dir/rootfs" "$containers" "$images" "$volumes" \
      --started "$containers" --write-kib "$write_kib" --image-kib "$image_kib" --prefix "$1"
  }
  empty_engine() { docker system prune -a -f --volumes >/dev/null; }
else
  start_private_containerd "$dir" "${CONTAINERD:-1.6}"
  engine_version="containerd $engine_version"
  runtime="runtime: { kind: containerd, containerd: { endpoint: \"$engine_sock\", namespaces: [$namespace] } }"
  kinds=('containers: { min_age: "0" }' 'images: { min_age: "0", keep_unpullable: false }')
  objects=$((containers + images))
  make_fixture() {
    python3 benches/lib/ctr_fixture.py "$ctr_bin" "$engine_sock" "$namespace" "$dir/rootfs" \
      "$containers" "$images" --write-kib "$write_kib" --image-kib "$image_kib" --prefix "$1"
  }
  # Everything in the bench's namespace: the kept container, the base image.
  empty_engine() {
    local left
    mapfile -t left < <(bctr -n "$namespace" containers ls -q)
    [ ${#left[@]} -eq 0 ] || bctr -n "$namespace" containers rm "${left[@]}" >/dev/null
    mapfile -t left < <(bctr -n "$namespace" images ls -q)
    [ ${#left[@]} -eq 0 ] || bctr -n "$namespace" images rm --sync "${left[@]}" >/dev/null
  }
fi
busybox_root "$dir/rootfs"
pace_policies "$dir" "{io_pressure_percent: $ceiling, max_delay: $max_delay, added_io_pressure_percent: $added, workloads_cgroup: $cg, on_max_delay: continue}" \
  "$runtime" "${kinds[@]}"
start_probe "$dir" "$cg"
if [ "$busy" = 1 ]; then
  mkdir -p "$dir/busy"
  "${in_cgroup[@]}" "$cg" python3 benches/pacing/io_probe.py "$dir/busy" "$out/busy.log" \
    --rate "$busy_rate" --write-kib "$busy_kib" &
  writer=$!
  sleep 2
fi

# --- blocks -----------------------------------------------------------------

now_us() { echo "${EPOCHREALTIME/./}"; }
# The workloads' stall now: `some total` of io.pressure and cpu.pressure.
psi_now() { echo "$(psi_total "$cg/io.pressure") $(psi_total "$cg/cpu.pressure" 2>/dev/null || echo 0)"; }
alive() { local st; read -r _ _ st _ 2>/dev/null <"/proc/$1/stat" || return 1; [ "$st" != Z ]; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

# The state of the block sequence: after a fixture (a gap), or a block of
# the other side, the next block's first DROP_SECS are dropped.
gap=1 last_side="" phase=pre
idle_blocks=0 arm_blocks=0
# Appends a block to OUT/blocks: CMP SIDE BEGIN END DROP PSI_BEGIN
# PSI_DROP (each "io cpu", psi_now's), then PHASE, the run (run_n's for an
# arm block) and psi_now at its end; sets block_kept (its seconds past the
# drop) and block_raw (all its seconds).
record() {
  local run=-
  [ "$2" = idle ] || run=$run_n
  echo "$1 $2 $3 $4 $5 $phase $run $6 $7 $(psi_now)" >>"$out/blocks"
  block_kept=$(awk -v b="$3" -v e="$4" -v d="$5" 'BEGIN { k = e - b - d; printf "%.3f", (k > 0 ? k : 0) }')
  block_raw=$(awk -v b="$3" -v e="$4" 'BEGIN { printf "%.3f", e - b }')
  gap=0 last_side=$2
  if [ "$2" = idle ]; then idle_blocks=$((idle_blocks + 1)); else arm_blocks=$((arm_blocks + 1)); fi
}

# One block: CMP SIDE MICROSECONDS [PID]: until the time is up or PID ends.
block() {
  local cmp=$1 side=$2 until begin drop=$drop_secs psi_b psi_d="" dropped
  [ $gap = 1 ] || [ "$side" != "$last_side" ] || drop=0
  begin=$EPOCHREALTIME
  psi_b=$(psi_now)
  [ "$drop" != 0 ] || psi_d=$psi_b
  dropped=$(($(now_us) + drop * 1000000))
  until=$(($(now_us) + $3))
  while [ "$(now_us)" -lt "$until" ]; do
    if [ -z "$psi_d" ] && [ "$(now_us)" -ge "$dropped" ]; then psi_d=$(psi_now); fi
    if [ -n "${4:-}" ] && ! alive "$4"; then break; fi
    sleep 0.1
  done
  [ -n "$psi_d" ] || psi_d=$(psi_now)
  record "$cmp" "$side" "$begin" "$EPOCHREALTIME" "$drop" "$psi_b" "$psi_d"
}

new_fixture() {
  local p="s$RANDOM"
  empty_engine
  make_fixture "$p"
  sync
  sleep "$settle" # let the fixture's own writes settle out of the probe's way
  gap=1
}

stop_writer() {
  if [ -n "${writer:-}" ]; then
    kill "$writer" 2>/dev/null || true
    wait "$writer" 2>/dev/null || true
  fi
  writer=""
}

# --- the paced arm ---------------------------------------------------------

run_n=0 kept_pre=0 kept_drift=0
# Whether SECONDS kept hold at least OPS probe operations.
enough() { awk -v k="$1" -v r=$rate -v m="$2" 'BEGIN { exit !(k * r >= m) }'; }
needs_more() {
  if [ "$max_runs" != 0 ] && [ "$run_n" -ge "$max_runs" ]; then return 1; fi
  if [ "$drift" = 1 ]; then
    [ $phase = pre ] && return 0
    if enough "$kept_drift" $((min_ops / 2)); then return 1; fi
  elif enough "$kept_pre" "$min_ops"; then
    return 1
  fi
  return 0
}

deleted_now() {
  local n
  n=$(grep -c '"result":"deleted"' "$dir/paced.audit" 2>/dev/null) || true
  echo "${n:-0}"
}

maybe_start_writer() {
  [ "$drift" = 1 ] && [ $phase = pre ] || return 0
  enough "$kept_pre" $((min_ops / 2)) || return 0
  if [ -n "$run_pid" ]; then [ "$(deleted_now)" -ge $((objects / 2)) ] || return 0; fi
  mkdir -p "$dir/writer"
  "${in_cgroup[@]}" "$cg" python3 benches/pacing/io_probe.py "$dir/writer" "$out/writer.log" \
    --rate "$writer_rate" --write-kib "$writer_kib" &
  writer=$!
  sleep 2
  phase=drift gap=1
  echo "  writer started ($writer_rate a second, $writer_kib KiB each), $kept_pre s kept before it;" \
    "$([ -n "$run_pid" ] && echo "run $run_n had removed $(deleted_now) of $objects" || echo "between runs")"
}

finish_paced_run() { # [stopped]
  local rc=0
  wait "$run_pid" || rc=$?
  run_pid=""
  mv "$dir/paced.json" "$out/paced-$run_n.json"
  mv "$dir/paced.audit" "$out/paced-$run_n.audit"
  # A stop that fell in one of the run's waits counts in its paced_seconds,
  # and objects_per_second is over its whole span: both hold the stops.
  echo "  paced run $run_n ended (exit $rc), stopped ${stopped} s in all;" \
    "$(python3 benches/pacing/stall_report.py --summary "$out/paced-$run_n.json")"
  [ $rc = 0 ] || [ -n "${1:-}" ] || { echo "stall_probe: the paced run failed, exit $rc" >&2; exit 1; }
}

paced_arm() {
  local pos=0 started
  local abba=(idle arm arm idle)
  idle_blocks=0 arm_blocks=0 phase=pre run_n=0 kept_pre=0 kept_drift=0
  echo "paced arm: blocks of ${block_secs} s, ABBA, first ${drop_secs} s after each switch dropped"
  new_fixture
  started=$(now_us)
  while :; do
    if [ $((pos % 4)) = 0 ]; then
      [ -n "$run_pid" ] || needs_more || break
      maybe_start_writer
    elif [ $((pos % 4)) = 2 ] && [ -n "$run_pid" ]; then
      # Between the group's two paced blocks, the run going on without a
      # stop: a run shorter than two blocks meets no group edge alive.
      maybe_start_writer
    fi
    if [ "${abba[pos % 4]}" = arm ]; then
      if [ -z "$run_pid" ]; then
        needs_more || { pos=$((pos + 1)); continue; }
        run_n=$((run_n + 1))
        "$bin" --config "$dir/paced.yaml" -q run >"$out/paced-$run_n.out" 2>&1 &
        run_pid=$! stopped=0
      else
        kill -CONT "$run_pid"
      fi
      block paced arm $((block_secs * 1000000)) "$run_pid"
      if [ $phase = pre ]; then kept_pre=$(add "$kept_pre" "$block_kept"); else kept_drift=$(add "$kept_drift" "$block_kept"); fi
      if ! alive "$run_pid"; then
        finish_paced_run
        needs_more && new_fixture
      elif [ "$max_arm_secs" != 0 ] && ! needs_more && [ $(($(now_us) - started)) -ge $((max_arm_secs * 1000000)) ]; then
        echo "  MAX_ARM_SECS: stopping paced run $run_n (SIGTERM)"
        kill -TERM "$run_pid"
        finish_paced_run stopped
      fi
    else
      if [ -n "$run_pid" ]; then
        kill -STOP "$run_pid"
        block paced idle $((block_secs * 1000000))
        stopped=$(add "$stopped" "$block_raw")
      else
        block paced idle $((block_secs * 1000000))
      fi
    fi
    pos=$((pos + 1))
  done
  while [ $idle_blocks -lt $arm_blocks ]; do block paced idle $((block_secs * 1000000)); done
  stop_writer
  echo "  paced arm: $arm_blocks paced and $idle_blocks idle blocks, $run_n run(s); kept ${kept_pre} s before the writer, ${kept_drift} s with it"
}

# --- unpaced and docker arms ------------------------------------------------

run_arm() { # NAME
  local name=$1 r est_us=${RUN_SECS:-5}000000 t0 wall_us total_us=0 n psi0
  echo "$name arm: $runs runs, each between idle blocks of its length plus ${drop_secs} s (I R R I ...)"
  idle_blocks=0 arm_blocks=0 phase=pre run_n=0
  for r in $(seq 1 "$runs"); do
    new_fixture
    run_n=$r
    [ $((r % 2)) = 0 ] || block "$name" idle $((est_us + drop_secs * 1000000))
    n=""
    [ "$name" != docker ] || n=$(($(docker ps -aq | wc -l) + $(docker images -aq | wc -l) + $(docker volume ls -q | wc -l) + 3))
    # A run is one block, all its operations the arm's (no drop).
    psi0=$(psi_now)
    t0=$EPOCHREALTIME
    if [ "$name" = docker ]; then
      docker system prune -a -f --volumes >/dev/null
    else
      "$bin" --config "$dir/unpaced.yaml" -q run >"$out/unpaced-$r.out" 2>&1
    fi
    record "$name" arm "$t0" "$EPOCHREALTIME" 0 "$psi0" "$psi0"
    wall_us=$(($(now_us) - ${t0/./}))
    if [ "$name" = unpaced ]; then
      mv "$dir/unpaced.json" "$out/unpaced-$r.json"
      mv "$dir/unpaced.audit" "$out/unpaced-$r.audit"
      n=$(grep -c '"result":"deleted"' "$out/unpaced-$r.audit") || true
    fi
    echo "$name $r $(awk -v w="$wall_us" 'BEGIN { printf "%.3f", w / 1e6 }') $n" >>"$out/runs"
    echo "  $name run $r: $(awk -v w="$wall_us" -v n="$n" 'BEGIN { printf "%.2f s, %s objects, %.1f/s", w / 1e6, n, n / (w / 1e6) }')"
    total_us=$((total_us + wall_us))
    est_us=$((total_us / r))
    [ $((r % 2)) = 1 ] || block "$name" idle $((wall_us + drop_secs * 1000000))
  done
}

echo "$engine_version, $(nproc) cores, fixture $fixture (${write_kib} KiB written per container," \
  "${image_kib} KiB per image$([ "$engine" = docker ] || echo '; volumes not used on containerd'))"
echo "arms: $arms; ADDED=$added CEILING=$ceiling MAX_DELAY=$max_delay MIN_OPS=$min_ops DRIFT=$drift BUSY=$busy;" \
  "probe cgroup $cg; OUT $out; load $(cut -d' ' -f1-3 /proc/loadavg); $(df -h --output=avail / | tail -1 | tr -d ' ') free on /"
: >"$out/blocks"
for arm in $arms; do
  case $arm in
    paced) paced_arm ;;
    unpaced) run_arm unpaced ;;
    docker)
      if [ "$engine" = docker ]; then run_arm docker; else
        echo "docker arm skipped: containerd has no \`docker system prune\`"
      fi
      ;;
    *) echo "stall_probe: unknown arm $arm" >&2; exit 2 ;;
  esac
done
stop_writer
stop_probe
audits=()
for f in "$out"/paced-*.audit; do [ -e "$f" ] && audits+=(--audit "paced=$f"); done
for f in "$out"/unpaced-*.audit; do [ -e "$f" ] && audits+=(--audit "unpaced=$f"); done
reports=()
for f in "$out"/paced-*.json; do [ -e "$f" ] && reports+=(--report "$f"); done
python3 benches/pacing/stall_report.py "$out/probe.log" "$out/blocks" --target "$added" "${audits[@]}" "${reports[@]}" | tee "$out/figures.txt"
exit
}
