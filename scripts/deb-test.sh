#!/usr/bin/env bash
# shellcheck disable=SC2317 # cleanup, ns_main and inner_* run via trap, bash -c and the written inner script
# The Debian package, end to end (docs/install.md, "The Debian package"). It builds
# target/debian/safeprune_<version>-1_<arch>.deb with `cargo deb --locked`,
# lints it with lintian (any error fails), then installs it in a fresh
# Debian 12 root (debootstrap --variant=minbase bookworm, with man-db,
# systemd, and procps, which every Debian but a minimal image has and the
# package recommends: the daemon unit's ExecReload runs its /bin/kill, and
# systemd-analyze verify checks that it exists; no Rust, no protoc),
# entered through private mount and pid namespaces and chroot, and checks
# there, each check named when it fails:
#
#   install   dpkg -i; safeprune --version; safeprune check --offline names
#             /etc/safeprune/policy.yaml; man -w safeprune finds
#             .../man8/safeprune.8.gz and the page renders; the completions
#             load; systemd-analyze verify of the installed units says
#             nothing; no unit is enabled or started; the policy is a
#             conffile, root's, 0644, and is config/policy.yaml; the
#             alert rules are deploy/prometheus/rules.yaml, root's, 0644
#   remove    with the timer and the daemon enabled offline (systemctl
#             enable, as an admin would), dpkg -r leaves no enablement link
#             (the two masked, as Debian's helpers leave them) and the
#             conffile in place; installing again enables nothing and
#             unmasks them; no dpkg run shows an error of our scripts
#   purge     after a run of the installed safeprune has made its lock,
#             state and logs, dpkg --purge leaves no file the package
#             installed or safeprune made: the root's file list (paths,
#             types, modes, owners) equals the one taken before the first
#             install, but for dpkg's and apt's own records and logs and
#             man-db's index
#
# Nothing reaches the host: the root has its own /run and /tmp, its mounts
# live in a mount namespace that dies with the check, and the engines'
# sockets are absent (the run above fails on purpose, exit 1). Each step
# prints its time.
#
# Run as root on Debian 12 (scripts/test.sh runs it; scripts/deps.sh
# installs cargo-deb, lintian and debootstrap when missing). Environment:
#
#   SAFEPRUNE_ROOT_CACHE_DIR  where the pristine root is kept as a tarball
#                             between runs (default /var/cache/safeprune-test;
#                             a missing or unreadable cache only costs a
#                             debootstrap; delete the tarball to refresh it)
#   SAFEPRUNE_MIRROR          Debian mirror for debootstrap (default
#                             http://deb.debian.org/debian)
#   SAFEPRUNE_DEB_NO_BUILD=1  test target/debian's package as it is, without
#                             cargo deb
set -euo pipefail

say() { echo "deb-test: $*"; }
die() {
  echo "deb-test: FAILED: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root: debootstrap, chroot and unshare need it"
cd "$(dirname "$0")/.."
repo=$PWD
# The fresh root's steps, shared with scripts/readme-on-fresh-debian.sh.
# shellcheck source=scripts/lib/debian-root.sh
. scripts/lib/debian-root.sh

includes=man-db,procps,systemd
cache_dir=${SAFEPRUNE_ROOT_CACHE_DIR:-/var/cache/safeprune-test}
# The key names what debootstrap was asked for: another list, another root.
cache="$cache_dir/$debian_root_suite-$debian_root_variant+${includes//,/+}.tar"
mirror=${SAFEPRUNE_MIRROR:-http://deb.debian.org/debian}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
deb="${CARGO_TARGET_DIR:-target}/debian/safeprune_${version}-1_${arch}.deb"

work=""
root=""
ns_pid=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$ns_pid" ]; then
    # An abort: unshare's --kill-child takes pid 1 of the namespace, and with
    # it every process inside and every mount.
    kill -KILL "$ns_pid" 2>/dev/null
    wait "$ns_pid" 2>/dev/null
  fi
  if [ -n "$work" ]; then
    if debian_root_mounts_under "$work"; then
      echo "deb-test: mounts remain under $work; not removing it" >&2
      rc=1
    else
      rm -rf --one-file-system "$work"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

times=()
step_start=0
step() {
  step_start=$(date +%s.%N)
  say "step $1"
}
step_done() {
  local took
  took=$(awk -v a="$step_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  times+=("$1: $took s")
  say "step $1: $took s"
}

# Everything this run makes goes here; the trap removes it.
work=$(mktemp -d /var/tmp/safeprune-deb-test.XXXXXX)
chmod 0711 "$work"

# ------------------------------------------------------------------ build
if [ "${SAFEPRUNE_DEB_NO_BUILD:-}" = 1 ]; then
  say "SAFEPRUNE_DEB_NO_BUILD=1: testing $deb as it is"
else
  step build
  cargo deb --locked
  step_done "build (cargo deb)"
fi
[ -s "$deb" ] || die "build: no package at $deb"
say "package: $deb, $(stat -c %s "$deb") bytes, Installed-Size $(dpkg-deb -f "$deb" Installed-Size) KiB, Depends: $(dpkg-deb -f "$deb" Depends)"

# ----------------------------------------------------------------- lintian
step lintian
# As nobody (lintian warns against root), on a copy nobody can read. Every
# tag is shown, info ones and overridden ones too (the override file says
# why in a comment); an error fails.
mkdir -m 0755 "$work/lint"
cp "$deb" "$work/lint/"
lint=$(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/nonexistent TMPDIR=/tmp \
  lintian --display-level '>=info' --show-overrides --fail-on none "$work/lint/${deb##*/}" 2>&1) ||
  die "lintian: did not run: $lint"
printf '%s\n' "$lint"
if grep -q '^E: ' <<<"$lint"; then die "lintian: errors in $deb (E: above)"; fi
step_done lintian

# ------------------------------------------------------------------- root
step root
root=$work/root
mkdir "$root"
how=""
# A cache that is missing, unreadable or does not unpack only costs a
# debootstrap.
if [ -r "$cache" ] && debian_root_unpack "$root" "$cache" 2>/dev/null; then
  how="unpacked $cache"
else
  find "$root" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
  command -v debootstrap >/dev/null || die "root: no debootstrap (scripts/deps.sh installs it)"
  say "debootstrap --variant=$debian_root_variant --include=$includes $debian_root_suite $mirror"
  debian_root_bootstrap "$root" "$mirror" "$includes" >"$work/debootstrap.log" 2>&1 ||
    {
      tail -n 20 "$work/debootstrap.log" >&2
      die "root: debootstrap failed (its log's end above)"
    }
  how="debootstrap"
  # A cache that cannot be written costs the next run a debootstrap, no more.
  if mkdir -p "$cache_dir" && debian_root_save "$root" "$cache" 2>/dev/null; then
    how="$how, cached in $cache"
  else
    say "could not cache the root in $cache_dir; going on"
  fi
fi
debian_root_ready "$root" || die "root: not Debian 12"
for absent in cargo rustc protoc; do
  if chroot "$root" sh -c "command -v $absent" >/dev/null 2>&1; then die "root: has $absent"; fi
done
step_done "root ($how)"

# ------------------------------------------------------------ inside the root
# Checks run in the root, as root; each failure names its check and exits 1.
inner_fail() {
  echo "deb-test: FAILED: $*" >&2
  exit 1
}

inner_ok() { echo "deb-test: ok: $*"; }

# dpkg ARGS..., named WHAT in a failure: it must succeed, and no maintainer
# script of safeprune may complain (a shell error names the script's path,
# and dpkg goes on where a script does not stop at it).
inner_dpkg() {
  local what=$1 out
  shift
  out=$(dpkg "$@" 2>&1) || {
    printf '%s\n' "$out" >&2
    inner_fail "$what: dpkg $* exits non-zero (its output above)"
  }
  if grep -q '/var/lib/dpkg/info/safeprune\.' <<<"$out"; then
    printf '%s\n' "$out" >&2
    inner_fail "$what: a maintainer script of safeprune complained during dpkg $* (above)"
  fi
}

# The root's files, but for what dpkg, apt and man-db keep for themselves
# (their package records, logs and the manual's index) and the kernel's
# and this test's own.
inner_files() {
  find / \( -path /proc -o -path /sys -o -path /dev -o -path /deb-test \
    -o -path /var/lib/dpkg -o -path /var/log/dpkg.log -o -path /var/log/apt \
    -o -path /var/cache/apt -o -path /var/lib/apt -o -path /var/cache/man \) -prune \
    -o -printf '%p %y %m %u:%g\n' | sort
}

inner_no_enablement() { # what: no unit is enabled, no link left
  local links
  links=$(find /etc/systemd/system -path '*.wants/safeprune*' -o -path '*.requires/safeprune*' 2>/dev/null)
  [ -z "$links" ] || inner_fail "$1: enabled, by these links: $links"
  local unit state
  for unit in safeprune.timer safeprune-daemon.service; do
    state=$(systemctl is-enabled "$unit" 2>&1) || true
    case "$state" in
      enabled*) inner_fail "$1: $unit is $state" ;;
    esac
  done
}

inner_install() { # the first install, and what it put where
  inner_dpkg install -i /deb-test/safeprune.deb
  inner_ok "install: dpkg -i"

  local out
  out=$(safeprune --version) || inner_fail "install: safeprune --version exits $?"
  [ "$out" = "safeprune $1" ] || inner_fail "install: safeprune --version says '$out', not 'safeprune $1'"
  inner_ok "install: safeprune --version: $out"
  [ "$(command -v safeprune)" = /usr/sbin/safeprune ] || inner_fail "install: safeprune is not /usr/sbin/safeprune"
  [ "$(stat -c '%U:%G %a' /usr/sbin/safeprune)" = "root:root 755" ] || inner_fail "install: /usr/sbin/safeprune is not root's 0755"

  # --offline: the policy alone; this root has no engine to check.
  out=$(safeprune check --offline 2>&1 >/dev/null) || inner_fail "install: safeprune check --offline exits $?: $out"
  [ "$out" = "safeprune: policy from /etc/safeprune/policy.yaml" ] ||
    inner_fail "install: safeprune check names not /etc/safeprune/policy.yaml but: $out"
  inner_ok "install: safeprune check: $out"

  out=$(man -w safeprune) || inner_fail "install: man -w safeprune exits $?"
  [ "$out" = /usr/share/man/man8/safeprune.8.gz ] || inner_fail "install: man -w safeprune says $out"
  out=$(MANWIDTH=80 man safeprune 2>&1) || inner_fail "install: man safeprune exits $?"
  local heading
  for heading in SYNOPSIS OPTIONS COMMANDS 'EXIT STATUS' FILES ENVIRONMENT; do
    grep -qx "$heading" <<<"$out" || inner_fail "install: man safeprune has no $heading section"
  done
  inner_ok "install: man -w safeprune: /usr/share/man/man8/safeprune.8.gz, which renders"

  out=$(bash -c '. /usr/share/bash-completion/completions/safeprune && complete -p safeprune' 2>&1) ||
    inner_fail "install: the bash completion does not load: $out"
  inner_ok "install: bash completion: $out"
  local file
  for file in /usr/share/zsh/vendor-completions/_safeprune /usr/share/fish/vendor_completions.d/safeprune.fish; do
    grep -q safeprune "$file" || inner_fail "install: no completion $file"
  done
  inner_ok "install: zsh and fish completions in their vendor directories"

  for file in /lib/systemd/system/safeprune.service /lib/systemd/system/safeprune-daemon.service; do
    grep -q '^ExecStart=/usr/sbin/safeprune ' "$file" || inner_fail "install: $file does not run /usr/sbin/safeprune"
  done
  local run_systemd=false
  [ -e /run/systemd ] && run_systemd=true
  out=$(systemd-analyze verify /lib/systemd/system/safeprune*.service /lib/systemd/system/safeprune*.timer 2>&1) ||
    inner_fail "install: systemd-analyze verify exits $?: $out"
  # verify leaves a time stamp, /run/systemd/systemd-units-load: the
  # check's own, not the package's, which the purge check would see.
  $run_systemd || rm -rf /run/systemd
  [ -z "$out" ] || inner_fail "install: systemd-analyze verify says: $out"
  inner_ok "install: systemd-analyze verify of the three units: nothing to say"

  inner_no_enablement install
  # Starting would need systemd running; what matters is that the package
  # never asks for it: its postinst has no start action, only a try-restart
  # on upgrade (which restarts what runs already).
  # shellcheck disable=SC2016 # $_dh_action is the script's own variable
  if grep -qE 'deb-systemd-invoke (start|restart|\$_dh_action)' /var/lib/dpkg/info/safeprune.postinst; then
    inner_fail "install: the postinst starts units"
  fi
  inner_ok "install: nothing enabled, nothing started"

  out=$(dpkg-query --showformat='${Conffiles}\n' --show safeprune)
  grep -qE '^ /etc/safeprune/policy.yaml [0-9a-f]{32}$' <<<"$out" ||
    inner_fail "install: /etc/safeprune/policy.yaml is not a conffile: Conffiles: $out"
  [ "$(stat -c '%U:%G %a' /etc/safeprune/policy.yaml)" = "root:root 644" ] ||
    inner_fail "install: /etc/safeprune/policy.yaml is $(stat -c '%U:%G %a' /etc/safeprune/policy.yaml), not root:root 644"
  cmp -s /etc/safeprune/policy.yaml /deb-test/policy.yaml ||
    inner_fail "install: /etc/safeprune/policy.yaml is not config/policy.yaml"
  inner_ok "install: /etc/safeprune/policy.yaml: a conffile, root:root 644, config/policy.yaml"

  local rules=/usr/share/safeprune/prometheus/rules.yaml
  [ "$(stat -c '%U:%G %a' "$rules" 2>&1)" = "root:root 644" ] ||
    inner_fail "install: $rules is $(stat -c '%U:%G %a' "$rules" 2>&1), not root:root 644"
  cmp -s "$rules" /deb-test/rules.yaml || inner_fail "install: $rules is not deploy/prometheus/rules.yaml"
  inner_ok "install: $rules: root:root 644, deploy/prometheus/rules.yaml"
}

inner_remove() { # enabled by hand, then removed: nothing stays enabled
  local unit
  for unit in safeprune.timer safeprune-daemon.service; do
    systemctl --quiet enable "$unit" || inner_fail "remove: systemctl enable $unit exits $?"
    [ "$(systemctl is-enabled "$unit" 2>&1)" = enabled ] || inner_fail "remove: systemctl enable $unit did not enable it"
  done
  [ -L /etc/systemd/system/timers.target.wants/safeprune.timer ] ||
    inner_fail "remove: systemctl enable made no timers.target.wants/safeprune.timer"
  inner_ok "remove: enabled the timer and the daemon offline, as an admin would (both only to test this)"

  inner_dpkg remove -r safeprune
  inner_no_enablement remove
  # Masked until a purge or a new install, as Debian's helpers leave them
  # (docs/contracts.md, "The Debian package").
  for unit in safeprune.timer safeprune-daemon.service; do
    [ "$(readlink "/etc/systemd/system/$unit")" = /dev/null ] || inner_fail "remove: $unit is not masked"
  done
  [ ! -e /usr/sbin/safeprune ] || inner_fail "remove: /usr/sbin/safeprune remains"
  [ -f /etc/safeprune/policy.yaml ] || inner_fail "remove: the conffile went with dpkg -r (only a purge removes it)"
  inner_ok "remove: dpkg -r left no enablement link, the two masked; the policy stays until a purge"

  inner_dpkg reinstall -i /deb-test/safeprune.deb
  inner_no_enablement reinstall
  local state
  for unit in safeprune.timer safeprune-daemon.service; do
    state=$(systemctl is-enabled "$unit" 2>&1) || true
    [ "$state" = disabled ] || inner_fail "reinstall: $unit is $state, not disabled"
  done
  inner_ok "reinstall: the timer and the daemon disabled, not masked"
}

inner_purge() { # safeprune's own files, then a purge
  mkdir -p /var/lib/safeprune /var/log/safeprune # as the units' StateDirectory= and LogsDirectory= do
  cat >/deb-test/run-policy.yaml <<'YAML'
report:
  metrics_textfile: /var/lib/safeprune/safeprune.prom
  audit_log: /var/log/safeprune/audit.jsonl
YAML
  local rc=0
  # No engine answers here (the root's own /run has no socket): the run
  # takes the lock, opens the audit log, fails with exit 1 and still writes
  # its metrics, as on a node whose engine is down.
  safeprune --config /deb-test/run-policy.yaml -q run >/deb-test/run.log 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || inner_fail "purge: safeprune run without an engine exits $rc, not 1: $(cat /deb-test/run.log)"
  local file
  for file in /run/safeprune.lock /var/lib/safeprune/safeprune.prom /var/log/safeprune/audit.jsonl; do
    [ -e "$file" ] || inner_fail "purge: safeprune run made no $file"
  done
  echo '{}' >/var/lib/safeprune/last-run.json
  inner_ok "purge: safeprune run (exit 1, no engine) made its lock, metrics and audit log"

  inner_dpkg purge --purge safeprune
  inner_files >/deb-test/after-purge.list
  if ! diff -u /deb-test/before-install.list /deb-test/after-purge.list >/deb-test/purge.diff; then
    cat /deb-test/purge.diff >&2
    inner_fail "purge: the root's files differ from before the install (above, - before, + after)"
  fi
  if dpkg-query --show safeprune >/dev/null 2>&1; then inner_fail "purge: dpkg still knows safeprune"; fi
  inner_ok "purge: nothing is left: the root's files are those from before the install"
}

inner_main() {
  set -euo pipefail
  export DEBIAN_FRONTEND=noninteractive
  inner_files >/deb-test/before-install.list
  inner_install "$1"
  inner_remove
  inner_purge
}

ns_main() { # pid 1 of the namespaces: the root's file systems, then the checks
  set -euo pipefail
  local r=$1 version=$2
  # The host's /dev, a read-only sysfs, and /run and /tmp of the root's own.
  debian_root_mount_kernel_fs "$r" ro,nosuid,nodev,noexec
  chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    /bin/bash /deb-test/inner.sh "$version"
}

mkdir "$root/deb-test"
cp "$deb" "$root/deb-test/safeprune.deb"
cp config/policy.yaml "$root/deb-test/policy.yaml"
cp deploy/prometheus/rules.yaml "$root/deb-test/rules.yaml"
{
  echo '#!/bin/bash'
  echo '# Written by scripts/deb-test.sh; runs inside the fresh root.'
  declare -f inner_fail inner_ok inner_dpkg inner_files inner_no_enablement inner_install inner_remove inner_purge inner_main
  echo 'inner_main "$@"'
} >"$root/deb-test/inner.sh"

step "install, remove, purge"
unshare --mount --pid --fork --kill-child --propagation private --mount-proc="$root/proc" \
  bash -c "$(declare -f debian_root_mount_kernel_fs ns_main); ns_main \"\$@\"" ns_main "$root" "$version" &
ns_pid=$!
rc=0
wait "$ns_pid" || rc=$?
ns_pid=""
[ "$rc" -eq 0 ] || die "in the fresh root (exit $rc; the check above names what failed)"
step_done "install, remove, purge"

say "all checks passed for $deb ($repo)"
printf 'deb-test: time: %s\n' "${times[@]}"
