#!/usr/bin/env bash
# shellcheck disable=SC2317 # cleanup, ns_init and inner_* run via trap, bash -c and the written inner script
# Proves that README.md's commands work verbatim on a fresh Debian 12 root.
#
# It makes a minimal Debian 12 (bookworm) root with debootstrap, puts a clean
# clone of this repository (HEAD) in it at /src/safeprune, gives it Rust the
# way the README presumes (a root user who installed rustup: ~/.rustup, here
# the host's toolchain bound read-only, and ~/.cargo/bin on PATH), enters it
# in new mount, pid, network and uts namespaces, and runs there, as root from
# /src/safeprune, the README's own command blocks, extracted from README.md at
# run time (so this follows the README, not a copy of it):
#
#   quickstart   "## Quick start", first sh block: must exit 0 and print a
#                table headed "safeprune plan on ... (docker)"
#   install      "## Install", first sh block: must exit 0 and leave
#                safeprune at /usr/local/bin/safeprune
#   containerd   "## On containerd and CRI-O nodes", first sh block, on a simulated
#                containerd node (the quick start's dockerd stopped, Debian's
#                containerd started on /run/containerd/containerd.sock): must
#                exit 0, with "safeprune plan/run on ... (containerd)"
#   tests        "## Quick start", second sh block (scripts/test.sh, which
#                CI's .ci/run runs), on a fresh state (whatever an earlier
#                block started, dockerd or containerd, stopped first; the
#                tests start their own private engines): must exit 0, with
#                nextest's summary line "Summary [...] N tests run: N
#                passed" (or, without cargo-nextest: cargo test's "test
#                result: ok." lines, none FAILED)
#
# Each block runs as `sh -ex BLOCK` (stop at the first failing command, show
# each command). Everything started inside (dockerd, containerd) is stopped
# at the end, and the namespaces die with it. Exits non-zero if a block fails.
#
# SAFEPRUNE_BLOCKS picks the blocks (default: all four, "quickstart install
# containerd tests"); they run in that order whatever the order given.
# install's `safeprune plan` reads the quick start's dockerd, and containerd
# needs install's /usr/local/bin/safeprune, so each needs the one before it;
# tests needs none (SAFEPRUNE_BLOCKS=tests runs the test command alone, on
# the root as debootstrap made it).
#
# Run (as root, on a Debian 12 host; a cold release build takes a while):
#
#   scripts/readme-on-fresh-debian.sh [WORKDIR] 2>&1 | tee /tmp/readme-test.log
#
# or the test command alone (a cold debug build and the suite, some minutes):
#
#   SAFEPRUNE_BLOCKS=tests scripts/readme-on-fresh-debian.sh 2>&1 | tee /tmp/readme-test.log
#
# WORKDIR (default: a fresh `mktemp -d`, removed at the end) must be empty,
# absent, or a WORKDIR of an earlier run (it is then wiped and made again); a
# WORKDIR given is kept for inspection. Environment:
#
#   SAFEPRUNE_ROOTFS_CACHE  tarball of the bootstrapped root, reused when it
#                           exists, written after a fresh debootstrap
#                           (default /var/cache/safeprune/bookworm-minbase.tar)
#   SAFEPRUNE_MIRROR        Debian mirror (default: the host's, from
#                           /etc/apt/sources.list*, else deb.debian.org)
#   SAFEPRUNE_NET           slirp (default: a private network namespace that
#                           reaches the network through slirp4netns) or host
#                           (see "Networking" below)
#   SAFEPRUNE_PREINSTALL    Debian packages to install in the root before the
#                           blocks, for "what if the node already had X"
#                           (default none: the root is as debootstrap made it)
#   SAFEPRUNE_PATCH         a patch (git apply) for the clone, to check a
#                           proposed fix to README.md or scripts/ before it is
#                           committed (default none: HEAD as it is)
#   SAFEPRUNE_KEEP_ROOT=1   keep a mktemp WORKDIR too
#   SAFEPRUNE_BLOCKS        the blocks to run (see above; default all four)
#   SAFEPRUNE_NEXTEST       auto (default: host if the host has cargo-nextest
#                           on PATH, else none), host (copy the host's
#                           cargo-nextest into the root's ~/.cargo/bin, where
#                           `cargo install cargo-nextest` puts it: CI's image
#                           has it, and scripts/test.sh runs the suite with it
#                           when it is there) or none (the root as the README
#                           leaves it: scripts/test.sh falls back to cargo
#                           test). Only the tests block uses it.
#
# Host requirements: root, git, util-linux's unshare, iproute2; debootstrap
# and slirp4netns are installed from Debian when missing.
#
# Networking: apt-get and cargo inside need the network. A private network
# namespace reaches nothing by itself, so slirp4netns (user-mode TCP/IP, the
# thing rootless Docker uses) gives it a tap0 with NAT to the host's network:
# nothing changes on the host (no veth, no iptables rule, no ip_forward), and
# the docker0 bridge and iptables rules the quick start's dockerd makes stay
# in the namespace and vanish with it. SAFEPRUNE_NET=host is the fallback
# where slirp4netns cannot run: the root then shares the host's network
# namespace; dockerd's sockets are still the root's own (/run is a tmpfs of
# the root, so /var/run/docker.sock is not the host's), dockerd is still
# killed at the end, and the script saves the host's iptables rules and
# ip_forward before and restores them after (a table dockerd made is left
# empty, with ACCEPT policies), and deletes a docker0 that was not there
# before. Meanwhile the host has dockerd's rules (FORWARD policy DROP).
#
# The kernel's file systems, as on a Debian 12 machine: / is a mount of its
# own (WORKDIR bound onto itself: `unshare --mount`, which scripts/test.sh
# and the tests' private engines run, makes / private and fails in a chroot
# whose / is a mere directory), /proc is the new pid namespace's, /sys a
# fresh sysfs (the new network namespace's), /dev the host's (devices,
# /dev/pts) with a /dev/shm of its own, /run and /tmp tmpfs of the root's
# own, and /sys/fs/cgroup the host's, bound read-write as it is: on a Debian
# 12 host that is cgroup2 alone, as systemd mounts it, with its controllers;
# a host with cgroup v1 hierarchies (hybrid: some VMs, older systems) gives
# the root those too, and the script says so. A fresh cgroup2 mount would be
# no better there: a controller a v1 hierarchy holds is missing from cgroup2
# (on a hybrid host, most of them: cpu, memory, pids, io), so the engines'
# containers would run without those; and mounting cgroup2 again would reset
# the host's cgroup2 options (nsdelegate) too.
#
# From the host besides Rust, only its network's settings: resolv.conf (DNS)
# and the local CA certificates (/usr/local/share/ca-certificates/*.crt, e.g.
# a TLS-intercepting egress proxy's), copied to the same places in the root.
# Those CAs are trusted in the root only once ca-certificates is installed
# there (its update-ca-certificates reads that directory), as on any Debian
# machine: a root without ca-certificates trusts no HTTPS server at all.
set -euo pipefail

die() {
  echo "readme-test: $*" >&2
  exit 2
}
say() { echo "readme-test: $*"; }

[ "$(id -u)" -eq 0 ] || die "run as root"

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$script_dir" rev-parse --show-toplevel)
# The fresh root's steps, shared with scripts/deb-test.sh.
# shellcheck source=scripts/lib/debian-root.sh
. "$script_dir/lib/debian-root.sh"
cache=${SAFEPRUNE_ROOTFS_CACHE:-/var/cache/safeprune/bookworm-minbase.tar}
net_mode=${SAFEPRUNE_NET:-slirp}
preinstall=${SAFEPRUNE_PREINSTALL:-}
keep_root=${SAFEPRUNE_KEEP_ROOT:-0}
patch=${SAFEPRUNE_PATCH:-}
[ -z "$patch" ] || patch=$(realpath "$patch")
blocks=${SAFEPRUNE_BLOCKS:-quickstart install containerd tests}
nextest=${SAFEPRUNE_NEXTEST:-auto}
host_rustup=${RUSTUP_HOME:-/root/.rustup}
host_cargo_bin=${CARGO_HOME:-/root/.cargo}/bin
case "$net_mode" in slirp | host) ;; *) die "SAFEPRUNE_NET is slirp or host, not $net_mode" ;; esac
[ -d "$host_rustup/toolchains" ] || die "no rustup toolchain at $host_rustup"
[ -x "$host_cargo_bin/cargo" ] || die "no cargo proxy in $host_cargo_bin"
read -ra wanted <<<"$blocks"
[ ${#wanted[@]} -gt 0 ] || die "SAFEPRUNE_BLOCKS names no block"
for b in "${wanted[@]}"; do
  case "$b" in quickstart | install | containerd | tests) ;; *) die "SAFEPRUNE_BLOCKS: no block $b (quickstart install containerd tests)" ;; esac
done
wants() { [[ " ${wanted[*]} " == *" $1 "* ]]; }
if wants install && ! wants quickstart; then
  die "SAFEPRUNE_BLOCKS: install needs quickstart (its safeprune plan reads the quick start's dockerd)"
fi
if wants containerd && ! wants install; then
  die "SAFEPRUNE_BLOCKS: containerd needs install (it runs /usr/local/bin/safeprune)"
fi
blocks=""
for b in quickstart install containerd tests; do
  wants "$b" && blocks="${blocks:+$blocks }$b"
done
host_nextest=""
case "$nextest" in
  auto | host)
    host_nextest=$(command -v cargo-nextest 2>/dev/null) || host_nextest=""
    [ -n "$host_nextest" ] || [ "$nextest" = auto ] || die "SAFEPRUNE_NEXTEST=host but the host has no cargo-nextest on PATH"
    ;;
  none) ;;
  *) die "SAFEPRUNE_NEXTEST is auto, host or none, not $nextest" ;;
esac
wants tests || host_nextest=""

marker=.readme-on-fresh-debian # in a WORKDIR this script made
root=""
created_root=false
state=""
ns_pid=""
slirp_pid=""
host_net_saved=false
had_docker0=false

# Idempotent: every step is guarded and cleared once done, so a second call
# (EXIT after INT or TERM) does nothing more.
cleanup() {
  local rc=$?
  set +e
  if [ -n "$ns_pid" ]; then
    # Only on an abort: unshare blocks SIGTERM while its child runs, but with
    # --kill-child its SIGKILL becomes the child's (pid 1 of the new pid
    # namespace), and with that every process inside dies (dockerd,
    # containerd) and the mount namespace goes.
    kill -KILL "$ns_pid" 2>/dev/null
    wait "$ns_pid" 2>/dev/null
    ns_pid=""
  fi
  if [ -n "$slirp_pid" ]; then
    kill -TERM "$slirp_pid" 2>/dev/null
    wait "$slirp_pid" 2>/dev/null
    slirp_pid=""
  fi
  if $host_net_saved; then
    if ! $had_docker0 && ip link show docker0 >/dev/null 2>&1; then
      ip link delete docker0
    fi
    restore_iptables "$state/iptables.save"
    cat "$state/ip_forward" >/proc/sys/net/ipv4/ip_forward
    host_net_saved=false
  fi
  if $created_root && [ "$keep_root" != 1 ] && [ -n "$root" ]; then
    # The root's mounts lived in the dead mount namespace; never delete
    # through a mount that is somehow still there (the rustup bind mount).
    if debian_root_mounts_under "$root"; then
      echo "readme-test: mounts remain under $root; not removing it" >&2
    else
      rm -rf --one-file-system "$root"
    fi
    root=""
  elif [ -n "$root" ]; then
    say "the root is kept at $root"
    root=""
  fi
  if [ -n "$state" ]; then
    rm -rf "$state"
    state=""
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The host's iptables as saved in $1: the tables saved are restored whole
# (iptables-restore flushes each table it names); a table made since (dockerd
# makes filter and nat where there were none) is emptied: its rules and chains
# deleted, its built-in chains' policies ACCEPT, as a table fresh made.
restore_iptables() {
  local t c
  iptables-restore <"$1"
  for t in $(iptables-save | sed -n 's/^\*//p'); do
    grep -qx "\*$t" "$1" && continue
    iptables -t "$t" -F
    iptables -t "$t" -X
    for c in $(iptables -t "$t" -S | sed -n 's/^-P \([^ ]*\) .*/\1/p'); do
      iptables -t "$t" -P "$c" ACCEPT
    done
  done
}

elapsed() { echo "$(($(date +%s) - $1)) s"; }

apt_host_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "$@"
}

# The first plain Debian archive among the host's apt sources (one-line and
# deb822 forms).
host_mirror() {
  local f url=""
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    url=$(sed -nE 's,^[[:space:]]*(deb|URIs:)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?://[^[:space:]]+/debian)/?([[:space:]].*)?$,\3,p' "$f" | head -n 1)
    [ -n "$url" ] && break
  done
  echo "${url:-http://deb.debian.org/debian}"
}

# The lines of the N-th ```sh block of the README section "## HEADING".
readme_block() {
  awk -v h="## $2" -v n="$3" '
    $0 == h { insec = 1; next }
    insec && /^## / { exit }
    insec && !inblk && /^```sh[[:space:]]*$/ { if (++k == n) inblk = 1; next }
    inblk && /^```[[:space:]]*$/ { exit }
    inblk { print }
  ' "$1"
}

# ---------------------------------------------------------------- the root
if [ $# -ge 1 ]; then
  root=$1
  if [ -e "$root" ] && [ -n "$(ls -A "$root")" ]; then
    [ -e "$root/$marker" ] || die "$root is not empty and not a WORKDIR of this script"
  fi
  mkdir -p "$root"
  root=$(realpath "$root")
else
  root=$(mktemp -d)
  created_root=true
fi
[ "$root" != / ] || die "WORKDIR is /"
state=$(mktemp -d)
if [ -e "$root/$marker" ]; then
  debian_root_mounts_under "$root" && die "mounts remain under $root"
  say "wiping the earlier run's root in $root"
  find "$root" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
fi
touch "$root/$marker"

t0=$(date +%s)
t=$t0
if [ -s "$cache" ]; then
  say "phase bootstrap: unpacking the cached root $cache"
  debian_root_unpack "$root" "$cache"
  how="from the cache"
else
  command -v debootstrap >/dev/null 2>&1 || apt_host_install debootstrap
  mirror=${SAFEPRUNE_MIRROR:-$(host_mirror)}
  say "phase bootstrap: debootstrap --variant=$debian_root_variant $debian_root_suite $root $mirror"
  debian_root_bootstrap "$root" "$mirror"
  mkdir -p "$(dirname "$cache")"
  # The marker is this run's WORKDIR's, not the root's.
  debian_root_save "$root" "$cache" "$marker"
  say "cached the root in $cache"
  how="by debootstrap"
fi
debian_root_ready "$root" || die "the root is not Debian 12"
bootstrap_time=$(elapsed "$t")
say "phase bootstrap: $bootstrap_time ($how)"

# ---------------------------------------------------------------- the clone
t=$(date +%s)
mkdir -p "$root/src"
git clone --quiet --no-hardlinks "$repo" "$root/src/safeprune"
commit=$(git -C "$root/src/safeprune" rev-parse HEAD)
say "cloned $repo at $commit ($(git -C "$root/src/safeprune" log -1 --format=%s))"
if [ -n "$patch" ]; then
  git -C "$root/src/safeprune" apply "$patch"
  say "NOT HEAD as it is: applied $patch:"
  git -C "$root/src/safeprune" diff --stat | sed 's/^/    /'
  commit="$commit + $(basename "$patch")"
fi

# Rust as rustup leaves it: the toolchains in ~/.rustup (the host's, read-only)
# and a CARGO_HOME of the root's own holding the proxies (cargo, rustc, ...).
mkdir -p "$root/root/.rustup" "$root/root/.cargo"
cp -a "$host_cargo_bin" "$root/root/.cargo/"
if [ -n "$host_nextest" ]; then
  # Not the README's: CI's image has cargo-nextest, and scripts/test.sh runs
  # the suite with it when `cargo nextest` works (else with cargo test).
  cp -L "$host_nextest" "$root/root/.cargo/bin/cargo-nextest"
  say "NOT the README: cargo-nextest for the tests block, the host's $host_nextest ($("$host_nextest" --version | head -n 1))"
fi

# The host's network: DNS and local CAs (see the header).
rm -f "$root/etc/resolv.conf"
if [ "$net_mode" = slirp ] && grep -qE '^nameserver[[:space:]]+(127\.|::1)' /etc/resolv.conf; then
  # a resolver on the host's loopback is out of reach: slirp4netns's own
  echo "nameserver 10.0.2.3" >"$root/etc/resolv.conf"
else
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
fi
for crt in /usr/local/share/ca-certificates/*.crt; do
  [ -e "$crt" ] || continue
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -L "$crt" "$root/usr/local/share/ca-certificates/"
done

# The README's blocks, from the clone's README.
work=$root/.readme-test
mkdir -p "$work/blocks" "$work/logs"
readme_block "$root/src/safeprune/README.md" "Quick start" 1 >"$work/blocks/quickstart.sh"
readme_block "$root/src/safeprune/README.md" "Install" 1 >"$work/blocks/install.sh"
readme_block "$root/src/safeprune/README.md" "On containerd and CRI-O nodes" 1 >"$work/blocks/containerd.sh"
readme_block "$root/src/safeprune/README.md" "Quick start" 2 >"$work/blocks/tests.sh"
for b in $blocks; do
  [ -s "$work/blocks/$b.sh" ] || die "README.md has no sh block for $b"
done
say "blocks: $blocks"
setup_time=$(elapsed "$t")
say "phase clone and setup: $setup_time"

# ------------------------------------------------- inside the namespaces
# pid 1 of the new namespaces, still on the host's file system and binaries:
# mount what a container runtime needs, then run the inner script chrooted.
ns_init() {
  set -euo pipefail
  local r=$1 rustup=$2 net=$3 preinstall=$4 blocks=$5
  # The root a mount of its own, as a machine's / is: else, chrooted into a
  # mere directory, `unshare --mount` (scripts/test.sh, the tests' private
  # engines) fails, as it cannot make / private: "cannot change root
  # filesystem propagation: Invalid argument".
  mount --rbind "$r" "$r" # with the /proc that unshare --mount-proc put there
  # The host's /dev, a read-write sysfs, and /run and /tmp of the root's own.
  debian_root_mount_kernel_fs "$r" nosuid,nodev,noexec
  # the root's own /dev/shm, as a machine has (the host's is bound with /dev)
  mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/dev/shm"
  mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
  mount --bind -o ro "$rustup" "$r/root/.rustup"
  echo safeprune-bookworm >/proc/sys/kernel/hostname
  if [ "$net" = slirp ]; then
    ip link set lo up
    local i
    for i in $(seq 1 100); do
      ip route show default 2>/dev/null | grep -q tap0 && break
      [ "$i" -lt 100 ] || {
        echo "readme-test: slirp4netns gave no tap0 route" >&2
        return 1
      }
      sleep 0.2
    done
  fi
  chroot "$r" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash /.readme-test/inner.sh "$preinstall" "$blocks"
}

# The inner script, in the root, as root, from /src/safeprune.
inner_stop() { # pid name: TERM, up to 20 s, then KILL
  local pid=$1 name=$2 i
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  echo "readme-test: stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$i" -lt 40 ] && sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
}

inner_cleanup() {
  local pid=""
  [ -r /run/docker.pid ] && pid=$(cat /run/docker.pid)
  inner_stop "$pid" dockerd
  inner_stop "${containerd_pid:-}" containerd
}

inner_block() { # name check...: run the block, then each check on its log
  local name=$1 log=/.readme-test/logs/$1.log rc start
  shift
  echo
  echo "======== README block: $name ========"
  sed 's/^/    /' "/.readme-test/blocks/$name.sh"
  echo "======== running it (sh -ex), in $PWD ========"
  start=$(date +%s)
  sh -ex "/.readme-test/blocks/$name.sh" </dev/null 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  local took verdict
  took=$(($(date +%s) - start))
  verdict="ok (exit 0, $took s)"
  if [ "$rc" -ne 0 ]; then
    verdict="FAILED (exit $rc, $took s)"
  else
    local check
    for check in "$@"; do
      if ! eval "$check" <"$log" >/dev/null 2>&1; then
        verdict="FAILED (exit 0 but not: $check; $took s)"
        break
      fi
    done
  fi
  echo "======== $name: $verdict ========"
  summary+=("README block $name: $verdict")
  [ "$rc" -eq 0 ] && [[ "$verdict" == ok* ]]
}

# Whether the test command's log on stdin shows every test passed: nextest's
# summary line "Summary [...] N tests run: N passed[...]" (N > 0; a failed,
# timed-out or otherwise unpassed test makes the counts differ), or where
# scripts/test.sh ran cargo test, "test result: ok." lines and no FAILED one.
inner_tests_passed() {
  local log summary run passed
  log=$(cat)
  summary=$(grep -E '^ *Summary \[ *[0-9.]+s\] [0-9]+ tests? run: ' <<<"$log" | tail -n 1)
  if [ -n "$summary" ]; then
    run=$(sed -E 's/.*\] ([0-9]+) tests? run: .*/\1/' <<<"$summary")
    passed=$(sed -nE 's/.* run: ([0-9]+) passed.*/\1/p' <<<"$summary")
    [ "$run" -gt 0 ] && [ "$run" = "$passed" ]
  else
    grep -q '^test result: ok\.' <<<"$log" && ! grep -q '^test result: FAILED' <<<"$log"
  fi
}

inner_main() {
  set -uo pipefail
  local preinstall=$1 blocks=" $2 " failed=0 i
  summary=()
  containerd_pid=""
  trap inner_cleanup EXIT
  cd /src/safeprune || return 1
  echo "readme-test: inside: $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release), hostname $(cat /proc/sys/kernel/hostname), as $(id -un), PATH=$PATH"
  echo "readme-test: blocks:$blocks"

  if [ -n "$preinstall" ]; then
    echo "readme-test: NOT the README: preinstalling $preinstall"
    local pkgs
    read -ra pkgs <<<"$preinstall"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" ||
      return 1
  fi

  if [[ "$blocks" == *" quickstart "* ]]; then
    inner_block quickstart "grep -q '^safeprune plan on .* (docker) at '" || failed=1
  fi
  if [[ "$blocks" == *" install "* ]]; then
    inner_block install "grep -q '^safeprune plan on .* (docker) at '" \
      "test \"\$(command -v safeprune)\" = /usr/local/bin/safeprune" || failed=1
  fi

  local start pid=""
  if [[ "$blocks" == *" containerd "* ]]; then
    echo
    echo "======== not the README: simulating a containerd node ========"
    start=$(date +%s)
    [ -r /run/docker.pid ] && pid=$(cat /run/docker.pid)
    inner_stop "$pid" "the quick start's dockerd"
    compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null || apt-get update -qq
    echo "readme-test: apt-get install -y containerd"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q containerd
    containerd >/var/log/containerd.log 2>&1 &
    containerd_pid=$!
    for i in $(seq 1 60); do
      ctr version >/dev/null 2>&1 && break
      sleep 0.5
    done
    if ctr version >/dev/null 2>&1; then
      echo "readme-test: containerd $(ctr version 2>/dev/null | sed -n 's/^ *Version: *//p' | tail -n 1) answers on /run/containerd/containerd.sock ($(($(date +%s) - start)) s)"
      inner_block containerd "grep -q '^safeprune plan on .* (containerd) at '" \
        "grep -q '^safeprune run on .* (containerd) at '" || failed=1
    else
      echo "readme-test: containerd did not answer; its log:"
      tail -n 20 /var/log/containerd.log
      summary+=("README block containerd: FAILED (not run: containerd did not start)")
      failed=1
    fi
  fi

  if [[ "$blocks" == *" tests "* ]]; then
    echo
    echo "======== not the README: a fresh state for the test command ========"
    # The tests start private engines of their own; nothing an earlier block
    # started (the quick start's dockerd, the containerd node's containerd)
    # stays running beside them.
    inner_cleanup
    containerd_pid=""
    if cargo nextest --version >/dev/null 2>&1; then
      echo "readme-test: $(cargo nextest --version | head -n 1) is there: scripts/test.sh runs the suite with it"
    else
      echo "readme-test: no cargo-nextest: scripts/test.sh runs the suite with cargo test"
    fi
    inner_block tests inner_tests_passed || failed=1
    if grep -qE '^ *Summary \[' /.readme-test/logs/tests.log; then
      grep -E '^ *Summary \[' /.readme-test/logs/tests.log | tail -n 1 | sed 's/^ */readme-test: tests: nextest: /'
    else
      echo "readme-test: tests: cargo test: $(grep -c '^test result: ok\.' /.readme-test/logs/tests.log) \"test result: ok.\" lines, $(grep -c '^test result: FAILED' /.readme-test/logs/tests.log) FAILED"
    fi
  fi

  inner_cleanup
  trap - EXIT
  echo
  printf '%s\n' "${summary[@]}"
  return "$failed"
}

{
  echo '#!/bin/bash'
  echo '# Written by scripts/readme-on-fresh-debian.sh; runs inside the fresh root.'
  declare -f inner_stop inner_cleanup inner_block inner_tests_passed inner_main
  echo 'inner_main "$@"'
} >"$work/inner.sh"

t=$(date +%s)
unshare_args=(--mount --pid --uts --fork --kill-child --propagation private --mount-proc="$root/proc")
if [ "$net_mode" = slirp ]; then
  command -v slirp4netns >/dev/null 2>&1 || apt_host_install slirp4netns
  unshare_args+=(--net)
else
  command -v iptables-save >/dev/null 2>&1 || apt_host_install iptables
  ip link show docker0 >/dev/null 2>&1 && had_docker0=true
  iptables-save >"$state/iptables.save"
  cat /proc/sys/net/ipv4/ip_forward >"$state/ip_forward"
  host_net_saved=true
fi
case "$(stat -fc %T /sys/fs/cgroup)" in
  cgroup2fs) say "cgroups: the host's cgroup2 at /sys/fs/cgroup, bound as it is, as on a Debian 12 machine (controllers: $(cat /sys/fs/cgroup/cgroup.controllers))" ;;
  *) say "cgroups: NOT as on a Debian 12 machine (cgroup2 alone at /sys/fs/cgroup): the host's $(stat -fc %T /sys/fs/cgroup) there, with $(awk '$3 == "cgroup" { sub(".*/", "", $2); printf "%s ", $2 }' /proc/self/mounts)(v1) and $(awk '$3 == "cgroup2" { print $2 }' /proc/self/mounts | head -n 1) (cgroup2), bound as they are" ;;
esac
say "phase namespaces: unshare ${unshare_args[*]} (network: $net_mode)"
unshare "${unshare_args[@]}" bash -c "$(declare -f debian_root_mount_kernel_fs ns_init); ns_init \"\$@\"" ns_init \
  "$root" "$host_rustup" "$net_mode" "$preinstall" "$blocks" &
ns_pid=$!
if [ "$net_mode" = slirp ]; then
  host_netns=$(readlink /proc/self/ns/net)
  for i in $(seq 1 100); do
    [ "$(readlink "/proc/$ns_pid/ns/net" 2>/dev/null)" != "$host_netns" ] && break
    [ "$i" -lt 100 ] || die "unshare did not make a network namespace"
    sleep 0.1
  done
  slirp4netns --configure --mtu=65520 --disable-host-loopback "$ns_pid" tap0 >"$state/slirp4netns.log" 2>&1 &
  slirp_pid=$!
fi
rc=0
wait "$ns_pid" || rc=$?
ns_pid=""
inside_time=$(elapsed "$t")
echo
say "phase bootstrap: $bootstrap_time ($how); clone and setup: $setup_time; inside the root: $inside_time; total: $(elapsed "$t0")"
say "commit $commit: $([ "$rc" -eq 0 ] && echo "every README block passed" || echo "FAILED (exit $rc)")"
exit "$rc"
