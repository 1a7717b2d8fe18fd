# shellcheck shell=bash
# Sourced by the containerd benchmarks: a private containerd, torn down on
# exit. Nothing of the host's containerd (nor Docker's) is touched.
#
#   start_private_containerd DIR VERSION
#                     containerd VERSION (1.6: Debian's, on PATH; 2: Debian
#                     unstable's 2.x from $SAFEPRUNE_TEST_RUNTIMES/containerd,
#                     which scripts/runtimes.sh fetches)
#                     as pid 1 of its own pid, mount and network namespaces
#                     (its shims, mounts and interfaces go with it), with
#                     its root, state, config, NRI and CNI directories in
#                     DIR and its socket at DIR/c.sock; sets engine_sock,
#                     engine_version, unshare_pid and the function `bctr`
#                     (its own release's ctr on that socket); DIR/containerd.log
#                     is its log. The CRI plugin is on, as on a node, with
#                     restrict_oom_score_adj (root here lacks
#                     CAP_SYS_RESOURCE) and CNI read from DIR only.
#   stop_private_containerd
#                     kills it (call from the caller's EXIT trap)
# remove_dir (benches/lib/private_dockerd.sh) removes DIR once it has let go.

start_private_containerd() {
  local dir=$1 version=$2 bindir=""
  engine_sock="$dir/c.sock"
  mkdir -p "$dir/cni"
  case $version in
    1.6) containerd_config_v2 "$dir" >"$dir/config.toml" ;;
    2)
      bindir="${SAFEPRUNE_TEST_RUNTIMES:?CONTAINERD=2 needs SAFEPRUNE_TEST_RUNTIMES (scripts/runtimes.sh target/runtimes, then SAFEPRUNE_TEST_RUNTIMES=\$PWD/target/runtimes)}/containerd"
      [ -x "$bindir/containerd" ] || { echo "no containerd in $bindir: run scripts/runtimes.sh" >&2; return 1; }
      containerd_config_v3 "$dir" >"$dir/config.toml"
      ;;
    *) echo "CONTAINERD must be 1.6 or 2, not $version" >&2; return 1 ;;
  esac
  ctr_bin=${bindir:+$bindir/}ctr
  # The release's own directory goes first on PATH, so its shim is the one
  # containerd finds (tests/integration/util/containerd/daemon.rs).
  # shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
  unshare --pid --fork --kill-child --mount --mount-proc --net --propagation private \
    sh -c 'ip link set lo up; mount -n -t tmpfs -o mode=755 sp-run /run &&
      if [ -n "$2" ]; then PATH="$2:$PATH"; export PATH; fi && exec containerd --config "$1"' \
    sh "$dir/config.toml" "$bindir" >"$dir/containerd.log" 2>&1 &
  unshare_pid=$!
  for _ in $(seq 1 150); do bctr version >/dev/null 2>&1 && break; sleep 0.2; done
  bctr version >/dev/null || { echo "containerd did not start; log: $dir/containerd.log" >&2; return 1; }
  # shellcheck disable=SC2034 # for the sourcing script
  engine_version=$(bctr version | awk '/^Server:/ { s = 1 } s && /Version:/ { print $2; exit }')
}

# ctr of the private containerd's release, on its socket. 2.3's ctr warns
# on every call that cgroup v1 is deprecated: that line is dropped, the
# rest of its stderr kept (the status is ctr's, under pipefail).
bctr() {
  { "$ctr_bin" --address "$engine_sock" "$@" 2>&1 >&3 3>&- |
    { grep -v 'DEPRECATION: The support for cgroup v1' >&2 || true; }; } 3>&1
}

# The teardown is stop_private_dockerd's: SIGKILL to unshare (its
# --kill-child) kills the engine, pid 1 of the namespace, and all inside.
stop_private_containerd() { stop_private_dockerd; }

# Plugins that would reach outside DIR (opt installs into /opt/containerd)
# or probe devices and tools that are not here.
containerd_disabled_plugins() {
  echo '  "io.containerd.internal.v1.opt",'
  echo '  "io.containerd.snapshotter.v1.zfs",'
  echo '  "io.containerd.snapshotter.v1.devmapper",'
  echo '  "io.containerd.tracing.processor.v1.otlp",'
  echo '  "io.containerd.internal.v1.tracing",'
}

containerd_config_v2() {
  cat <<EOF
version = 2
root = "$1/root"
state = "$1/state"
disabled_plugins = [
$(containerd_disabled_plugins)
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.aufs",
]
[grpc]
  address = "$1/c.sock"
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "$1/cni"
    bin_dir = "$1/cni"
EOF
}

# containerd 2.x's schema (2.3 migrates it at start): the CRI plugin split
# in two. NRI, on by default, is off: it plays no part in removals, and
# would listen and read plugins outside DIR.
containerd_config_v3() {
  cat <<EOF
version = 3
root = "$1/root"
state = "$1/state"
disabled_plugins = [
$(containerd_disabled_plugins)
  "io.containerd.nri.v1.nri",
]
[grpc]
  address = "$1/c.sock"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["$1/cdi"]
  cni = { conf_dir = "$1/cni", bin_dirs = ["$1/cni"] }
EOF
}
