#!/usr/bin/env bash
# Idle cost of `safeprune daemon`: resident memory and CPU time over a
# minute while it waits for its next cycle (a schedule far in the future,
# so no cycle runs; the engine is not contacted while idle).
#
# With `following` (as root), the policy sets `images.keep_recent`, so the
# daemon follows the events of a private dockerd between cycles:
# what holding that stream costs.
#
# Run: benches/daemon/daemon_idle.sh [seconds [following]]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
mode="${2:-}"
cargo build --release --quiet
dir=$(mktemp -d)
pid=""
# shellcheck source=benches/lib/private_dockerd.sh
. benches/lib/private_dockerd.sh
trap 'kill "$pid" 2>/dev/null || true; stop_private_dockerd; rm -rf "$dir"' EXIT
endpoint="unix://$dir/none.sock"
images=""
if [ "$mode" = following ]; then
  start_private_dockerd "$dir"
  endpoint="unix://$engine_sock"
  images="images: { keep_recent: 2 }"
fi
cat > "$dir/policy.yaml" <<YAML
runtime: { kind: docker, docker: { endpoint: "$endpoint" } }
schedule: "0 5 1 1 *"
lock_file: $dir/lock
state_dir: $dir/state
$images
YAML
target/release/safeprune --config "$dir/policy.yaml" -q daemon &
pid=$!
sleep 2
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
wakeups() { awk '/voluntary_ctxt_switches/ && !/non/ {s += $2} END {print s}' /proc/"$pid"/task/*/status; }
cpu0=$(cpu); wake0=$(wakeups)
sleep "$seconds"
cpu1=$(cpu); wake1=$(wakeups)
printf 'idle for %ss\n' "$seconds"
printf '  resident memory:   %s KiB (%.1f MiB)\n' "$(rss)" "$(echo "$(rss) / 1024" | bc -l)"
printf '  threads:           %s\n' "$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)"
printf '  cpu time:          %s ms\n' "$(( (cpu1 - cpu0) * 1000 / ticks ))"
printf '  voluntary wakeups: %s\n' "$((wake1 - wake0))"
