#!/usr/bin/env bash
# benches/pace_probe.sh on containerd (issue 24: "Run it on containerd
# too"): the same latency probe (benches/io_probe.py) on the file system of
# a private containerd's root, while, on identical fresh fixtures whose
# objects hold real bytes, these take turns (the order rotating each
# repeat):
#   idle       nothing, for IDLE_SECS (default 20)
#   ctr-rm     the stand-in for `docker system prune`, which containerd
#              lacks: `ctr containers rm` of the fixture's C containers,
#              then `ctr images rm --sync` of its I images, the same
#              objects safeprune removes, named by the bench
#   unpaced    safeprune run (runtime.kind containerd, the private socket
#              and the bench's namespace only)
#   paced      safeprune run with safety.pace (PACE, default
#              {io_pressure_percent: 10, max_delay: 10m}; or, with
#              PACE_OVER_IDLE=M, M points above the node's own pressure
#              with the probe alone: see benches/probe_windows.sh)
# Its output is pace_probe.sh's (wall time, the probe's operations inside
# each run with their p50, p99 and max, the share of the window PSI io
# `some` covered; then all repeats, p99 against idle's), plus, after each
# side that removes, the check that exactly the fixture's candidates are
# gone and what it must keep is there (with the JSON report's deletion
# counts for safeprune), and the paced report's `pace` object.
#
# A fixture "C/I", in the namespace spbench (benches/ctr_fixture.py): C
# containers never started, whose writable snapshots each hold WRITE_KIB
# (default 2048) KiB of random bytes, and I unused images of IMAGE_KIB
# (default 12288) KiB of random bytes each (distinct layers, unpacked);
# kept: a container labelled io.kubernetes.container.name=istio-init (the
# default protect rule), with its bytes, and the base image all the
# containers were made from.
#
# Run: benches/pace_probe_containerd.sh [FIXTURE]   (default 600/150)
#      CONTAINERD=1.6 (Debian's, default) or 2 (Debian unstable's 2.x, from
#      $SAFEPRUNE_TEST_RUNTIMES/containerd); REPEATS=N (default 3);
#      SIDES="idle paced" (default "idle ctr-rm unpaced paced"): only these
# A repeat at 600/150 takes about 8 minutes on 2 cores, mostly building
# its three fixtures; p99 wants many operations (see pace_probe.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
fixture=${1:-600/150}
version=${CONTAINERD:-1.6}
repeats=${REPEATS:-3}
idle_secs=${IDLE_SECS:-20}
pace=${PACE:-"{io_pressure_percent: 10, max_delay: 10m}"}
write_kib=${WRITE_KIB:-2048}
image_kib=${IMAGE_KIB:-12288}
namespace=spbench
for tool in python3 unshare bc; do
  command -v "$tool" >/dev/null || { echo "pace_probe_containerd: needs $tool" >&2; exit 1; }
done
[ -r /proc/pressure/io ] || { echo "pace_probe_containerd: needs PSI (/proc/pressure/io)" >&2; exit 1; }
IFS=/ read -r containers images <<<"$fixture"
cargo build --release --locked --quiet
bin="$PWD/target/release/safeprune"

# shellcheck source=benches/private_dockerd.sh
. benches/private_dockerd.sh
# shellcheck source=benches/private_containerd.sh
. benches/private_containerd.sh
# shellcheck source=benches/probe_windows.sh
. benches/probe_windows.sh
# /var/tmp, as the Docker bench: the containerd root and the probe's file
# in one directory, so on one file system.
dir=$(mktemp -d /var/tmp/spctrpace-XXXXXX)
cleanup() {
  stop_probe
  stop_private_containerd
  remove_dir "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

start_private_containerd "$dir" "$version"
busybox_root "$dir/rootfs"

start_probe "$dir"

# The policies, with pace as it stands (with PACE_OVER_IDLE, pace_over_idle
# sets it again and calls this before each paced side).
write_policies() {
  pace_policies "$dir" "$pace" \
    "runtime: { kind: containerd, containerd: { endpoint: \"$engine_sock\", namespaces: [$namespace] } }" \
    'containers: { min_age: "0" }' \
    'images: { min_age: "0" }'
}
write_policies

# Fails the bench, with what is left, unless `ctr LIST` in the namespace
# prints exactly WANT (a sorted, newline-separated list).
expect_left() { # WHAT WANT LIST...
  local what=$1 want=$2 got
  shift 2
  got=$(bctr -n "$namespace" "$@" | sort)
  [ "$got" = "$want" ] || {
    printf 'pace_probe_containerd: %s left:\n%s\nexpected:\n%s\n' "$what" "$got" "$want" >&2
    exit 1
  }
}

# The snapshot keys in the namespace, sorted.
snapshot_keys() { bctr -n "$namespace" snapshots ls | awk 'NR > 1 { print $1 }' | sort; }

# After a side that removed: exactly the fixture's candidates are gone,
# their snapshots too, and the kept container and the base image remain
# with theirs (KEEP_SNAPSHOTS: the kept container's and the base layer's);
# after safeprune, its JSON report says it deleted exactly the candidates.
check_removed() { # NAME PREFIX KEEP_SNAPSHOTS
  local name=$1 p=$2
  expect_left containers "$p-kept" containers ls -q
  expect_left images "bench.local/$p-base:1" images ls -q
  [ "$(snapshot_keys)" = "$3" ] || {
    printf 'pace_probe_containerd: snapshots left after %s:\n%s\n' "$name" "$(snapshot_keys)" >&2
    exit 1
  }
  case $name in
    unpaced | paced) ;;
    *) echo "    $name: removed exactly the candidates; the kept ones remain" && return ;;
  esac
  python3 - "$dir/$name.json" "$name" "$p" "$containers" "$images" <<'PY'
import json, sys
report, name, p, containers, images = sys.argv[1:]
outcomes = json.load(open(report))["outcomes"]
deleted = [o for o in outcomes if o["result"] == "deleted"]
want = {f"{p}-c{k}" for k in range(int(containers))} | {
    f"bench.local/{p}-img{k}:1" for k in range(int(images))}
got = {o["name"] for o in deleted if o["kind"] == "container"}
# An image's refs: its tag and its digest reference (name@sha256:...).
got |= {r for o in deleted if o["kind"] == "image" for r in o.get("refs", []) if "@" not in r}
by_kind = {}
for o in deleted:
    by_kind[o["kind"]] = by_kind.get(o["kind"], 0) + 1
if got != want or len(deleted) != len(outcomes):
    sys.exit(f"pace_probe_containerd: {name} deleted {len(deleted)} of {len(outcomes)} planned;"
             f" missing {sorted(want - got)[:5]}, extra {sorted(got - want)[:5]}")
freed = sum(o["bytes"] or 0 for o in deleted) / (1 << 20)
print(f"    {name}: removed exactly the candidates; the kept ones remain; report: deleted"
      f" {by_kind.get('container', 0)} containers and {by_kind.get('image', 0)} images"
      f" ({freed:.0f} MiB), none skipped or failed")
PY
}

side() { # NAME
  local name=$1 p="b$RANDOM" keep=""
  if [ "$name" != idle ]; then
    python3 benches/ctr_fixture.py "$ctr_bin" "$engine_sock" "$namespace" "$dir/rootfs" \
      "$containers" "$images" --write-kib "$write_kib" --image-kib "$image_kib" --prefix "$p"
    keep=$(bctr -n "$namespace" snapshots ls | awk -v k="$p-kept" '$1 == k { print $1; print $2 }' | sort)
    sync
    sleep 5 # let the fixture's own writes settle out of the probe's way
  fi
  [ "$name" != paced ] || pace_over_idle
  window_begin
  case $name in
    idle) sleep "$idle_secs" ;;
    ctr-rm)
      # shellcheck disable=SC2046 # one argument per name
      bctr -n "$namespace" containers rm $(seq -f "$p-c%.0f" 0 $((containers - 1))) >/dev/null
      # shellcheck disable=SC2046
      bctr -n "$namespace" images rm --sync $(seq -f "bench.local/$p-img%.0f:1" 0 $((images - 1))) >/dev/null
      ;;
    unpaced | paced) "$bin" --config "$dir/$name.yaml" -q run >/dev/null ;;
  esac
  window_end "$name" "$dir"
  [ "$name" = idle ] && return
  check_removed "$name" "$p" "$keep"
  [ "$name" != paced ] || print_pace "$dir/paced.json"
  # Empty the namespace for the next fixture.
  bctr -n "$namespace" containers rm "$p-kept" >/dev/null
  bctr -n "$namespace" images rm --sync "bench.local/$p-base:1" >/dev/null
  [ -z "$(snapshot_keys)" ] || { echo "pace_probe_containerd: snapshots left: $(snapshot_keys)" >&2; exit 1; }
}

echo "containerd $engine_version, $(nproc) cores, fixture $fixture" \
  "(${write_kib} KiB written per container, ${image_kib} KiB per image), $repeats repeats"
echo "no docker side: containerd has no \`docker system prune\`; ctr-rm stands in" \
  "(ctr containers rm, then ctr images rm --sync, of the same objects)"
# shellcheck disable=SC2086 # SIDES is a list of words
run_sides "$dir" "$repeats" ${SIDES:-idle ctr-rm unpaced paced}
