#!/usr/bin/env bash
# safeprune run against `docker system prune -a -f --volumes`, on the same
# private dockerd and identical fresh fixtures, alternately (A B A B ...):
# wall time and the engine's CPU time (dockerd, containerd and shims), each
# side talking to the engine's socket directly; then one more run of each
# side through benches/speed/count_proxy.py, which counts the API calls it
# makes (the proxy, a Python process, adds its own time to every call: timing
# through it would charge that to the side that makes more calls; set
# TIME_THROUGH_PROXY=1 to time through it all the same). Prints each run,
# then medians and the safeprune/docker ratios. BENCHMARKS.md holds the
# figures.
#
# A fixture "C/I/V" is C stopped containers (a tenth run to their exit, the
# rest never started; a third with an anonymous volume), I unused images of
# varied sizes, V unused named volumes, three unused networks, and what both
# sides keep: a running container with its image and a named volume.
#
# Run: benches/speed/vs_prune.sh [FIXTURE ...]   (default: 200/50/50 2000/300/300)
#      PAIRS=N for N alternating pairs per fixture (default 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
fixtures=("$@")
[ ${#fixtures[@]} -gt 0 ] || fixtures=(200/50/50 2000/300/300)
pairs=${PAIRS:-3}
for tool in /usr/bin/time python3 unshare docker dockerd; do
  command -v "$tool" >/dev/null || { echo "vs_prune: needs $tool" >&2; exit 1; }
done
cargo build --release --locked --quiet
bin="$PWD/target/release/safeprune"

# shellcheck source=benches/lib/private_dockerd.sh
. benches/lib/private_dockerd.sh
dir=$(mktemp -d /tmp/spvs-XXXXXX)
proxy_sock="$dir/p.sock"
calls="$dir/calls.log"
: >"$calls"
cleanup() {
  if [ -n "${proxy:-}" ]; then kill "$proxy" 2>/dev/null || true; fi
  stop_private_dockerd
  remove_dir "$dir"
}
trap cleanup EXIT
# A signal (timeout, ^C) exits through the EXIT trap, which tears down.
trap 'exit 143' INT TERM

start_private_dockerd "$dir"
python3 benches/speed/count_proxy.py "$proxy_sock" "$engine_sock" "$calls" &
proxy=$!
for _ in $(seq 1 50); do [ -S "$proxy_sock" ] && break; sleep 0.1; done

ticks=$(getconf CLK_TCK)

# The images: busybox, varied by an extra file of a varied size.
busybox_root "$dir/rootfs"
image() { # NAME EXTRA_KIB
  head -c "$(($2 * 1024))" /dev/urandom >"$dir/rootfs/extra"
  tar -C "$dir/rootfs" -cf - . | docker import - "$1" >/dev/null
  rm -f "$dir/rootfs/extra"
}

# What both keep: a running container, its image and its named volume.
image bench/keep:1 1
docker volume create keep-vol >/dev/null
docker run -d --name keeper -v keep-vol:/data bench/keep:1 sleep 1000000 >/dev/null

# Built through the API (benches/lib/fixture.py), several calls at once: the
# CLI's start-up made a 2,000-container fixture take many minutes. A tenth
# of the containers run to their exit first, so that both sides meet
# exited containers with exit times as well as never-started ones.
fixture() { # C I V
  python3 benches/lib/fixture.py "$engine_sock" "$dir/rootfs" "$1" "$2" "$3" --started $(($1 / 10))
}

left() {
  printf '%s containers, %s images, %s volumes, %s networks' \
    "$(docker ps -aq | wc -l)" "$(docker images -q | wc -l)" \
    "$(docker volume ls -q | wc -l)" "$(docker network ls -q | wc -l)"
}

timed_sock=$engine_sock
[ "${TIME_THROUGH_PROXY:-0}" = 1 ] && timed_sock=$proxy_sock
everything_policy "$dir/policy.yaml" "$proxy_sock" "$dir/lock"

# One side on a fresh fixture, on SOCKET: wall seconds, engine CPU
# seconds, and the API calls the proxy counted (0 when it was not used).
measure() { # NAME SOCKET C I V
  local name=$1 sock=$2 before_calls before_ticks wall own cpu_ticks n timing report
  fixture "$3" "$4" "$5"
  sed "s#unix://$proxy_sock#unix://$sock#" "$dir/policy.yaml" >"$dir/run.yaml"
  before_calls=$(wc -l <"$calls")
  before_ticks=$(engine_ticks)
  if [ "$name" = safeprune ]; then
    report="$dir/report-$(date +%s%N).json"
    timing=$( { /usr/bin/time -f '%e %U %S' "$bin" --config "$dir/run.yaml" -q run --output json >"$report"; } 2>&1 | tail -n 1)
    # What the report did not delete, by kind and reason (nothing when all went).
    python3 -c 'import json, sys, collections
r = json.load(open(sys.argv[1]))
c = collections.Counter((o["kind"], o["result"], o["reason"], (o.get("error") or "")[:90]) for o in r.get("outcomes", []) if o["result"] != "deleted")
for k, n in sorted(c.items()): print("    not deleted:", n, *k)' "$report"
  else
    timing=$( { DOCKER_HOST="unix://$sock" /usr/bin/time -f '%e %U %S' docker system prune -a -f --volumes >/dev/null; } 2>&1 | tail -n 1)
  fi
  wall=${timing%% *}
  own=$(awk '{print $2 + $3}' <<<"$timing")
  cpu_ticks=$(($(engine_ticks) - before_ticks))
  n=$(($(wc -l <"$calls") - before_calls))
  printf '  %-9s wall %6.2f s  own cpu %5.2f s  engine cpu %6.2f s  api calls %6d  left: %s\n' \
    "$name" "$wall" "$own" "$(echo "$cpu_ticks / $ticks" | bc -l)" "$n" "$(left)"
  echo "$name $wall $(echo "$cpu_ticks / $ticks" | bc -l) $n" >>"$dir/${6:-results}"
}

# plan against the engine's own list calls, on a fresh fixture, without the
# proxy: median of 3 whole-process runs, with the policy above and with the
# build cache left unread (API 1.41 reads it through a full /system/df).
plan_vs_lists() { # C I V
  local lists with_df without_df
  fixture "$1" "$2" "$3"
  sed "s#unix://$proxy_sock#unix://$engine_sock#" "$dir/policy.yaml" >"$dir/direct.yaml"
  sed 's#^build_cache: .*#build_cache: { enabled: false }#' "$dir/direct.yaml" >"$dir/direct-nobc.yaml"
  lists=$(python3 benches/speed/lists.py "$engine_sock" 3)
  with_df=$(for _ in 1 2 3; do /usr/bin/time -f '%e' "$bin" --config "$dir/direct.yaml" -q plan 2>&1 >/dev/null | tail -n 1; done | median)
  without_df=$(for _ in 1 2 3; do /usr/bin/time -f '%e' "$bin" --config "$dir/direct-nobc.yaml" -q plan 2>&1 >/dev/null | tail -n 1; done | median)
  printf '  plan %.2f s (build cache unread: %.2f s); the four list calls %.3f s; ratios %.2fx, %.2fx\n' \
    "$with_df" "$without_df" "$lists" "$(echo "$with_df / $lists" | bc -l)" "$(echo "$without_df / $lists" | bc -l)"
  docker system prune -a -f --volumes >/dev/null
}

# The calls of the last run, by endpoint (ids and names folded).
calls_by_endpoint() { # FIRST_LINE
  tail -n +"$1" "$calls" | sed -E 's#/v1\.[0-9]+##; s#[0-9a-f]{64}#ID#g; s#(vol|net|img)-?[0-9]+#\1-N#g; s#since=[^&]*&until=[^& ]*#since=T\&until=T#; s#\?.*##' |
    sort | uniq -c | sort -rn | head -n 8 | sed 's/^/      /'
}

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "dockerd $(dockerd --version | cut -d' ' -f3 | tr -d ,) (API $(docker version -f '{{.Server.APIVersion}}')), $(nproc) cores; $pairs pairs per fixture"
for f in "${fixtures[@]}"; do
  IFS=/ read -r c i v <<<"$f"
  echo "fixture $c containers / $i images / $v volumes:"
  : >"$dir/results"
  plan_vs_lists "$c" "$i" "$v"
  : >"$dir/counted"
  for _ in $(seq 1 "$pairs"); do
    first=$(($(wc -l <"$calls") + 1))
    measure safeprune "$timed_sock" "$c" "$i" "$v"
    measure docker "$timed_sock" "$c" "$i" "$v"
  done
  if [ "$timed_sock" = "$proxy_sock" ]; then
    cp "$dir/results" "$dir/counted"
  else
    echo "  counted through the proxy (not timed):"
    first=$(($(wc -l <"$calls") + 1))
    measure safeprune "$proxy_sock" "$c" "$i" "$v" counted
    measure docker "$proxy_sock" "$c" "$i" "$v" counted
  fi
  echo "  calls of the last safeprune run through the proxy, by endpoint:"
  calls_by_endpoint "$first"
  for col in 2 3 4; do
    from=results
    [ $col = 4 ] && from=counted
    s=$(awk -v c=$col '$1 == "safeprune" {print $c}' "$dir/$from" | median)
    d=$(awk -v c=$col '$1 == "docker" {print $c}' "$dir/$from" | median)
    case $col in 2) what="wall (s)" ;; 3) what="engine cpu (s)" ;; 4) what="api calls" ;; esac
    printf '  median %-15s safeprune %9.2f  docker %9.2f  ratio %5.2fx\n' "$what" "$s" "$d" "$(echo "$s / $d" | bc -l)"
  done
done
