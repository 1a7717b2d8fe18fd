# shellcheck shell=bash
# The fresh Debian 12 root of scripts/deb-test.sh and
# scripts/readme-on-fresh-debian.sh, the steps both take to make it and to
# enter it, kept here so that the two make and mount the same kind of root
# the same way. Each script still decides its own policy: where the root's
# tarball is cached, which packages debootstrap adds, where its output goes,
# and whether a failing step stops the run.
#
#   . scripts/lib/debian-root.sh
#
# Only defines functions and two settings; runs nothing. The functions do
# not rely on `set -e` (a caller may run them in an `if`): each returns
# non-zero when a step fails.

# Debian 12, as small as debootstrap makes it: what a node starts from.
debian_root_suite=bookworm
debian_root_variant=minbase

# debian_root_bootstrap ROOT MIRROR [INCLUDES]: debootstrap a root into the
# directory ROOT from MIRROR, with the comma-separated packages INCLUDES
# added. Its output goes where the caller's does.
debian_root_bootstrap() {
  local root=$1 mirror=$2 includes=${3:-} args
  args=(--variant="$debian_root_variant")
  if [ -n "$includes" ]; then args+=(--include="$includes"); fi
  debootstrap "${args[@]}" "$debian_root_suite" "$root" "$mirror"
}

# debian_root_unpack ROOT CACHE: the root saved in the tarball CACHE, unpacked
# into ROOT with its owners by number and its modes, as debootstrap left them.
debian_root_unpack() {
  tar --numeric-owner -xpf "$2" -C "$1"
}

# debian_root_save ROOT CACHE [EXCLUDE]: the root as the tarball CACHE, but
# for ROOT's top-level entry EXCLUDE (a caller's own marker). Written whole
# or not at all, through a temporary file beside it: a run killed halfway
# leaves no tarball that unpacks to half a root.
debian_root_save() {
  local root=$1 cache=$2 exclude=()
  if [ -n "${3:-}" ]; then exclude=(--exclude="./$3"); fi
  if tar --numeric-owner "${exclude[@]}" -cpf "$cache.tmp.$$" -C "$root" .; then
    mv "$cache.tmp.$$" "$cache"
  else
    rm -f "$cache.tmp.$$"
    return 1
  fi
}

# debian_root_ready ROOT: ROOT's / made 0755, as on a machine, and checked to
# be Debian 12 (returns 1 if it is not). mktemp -d makes a directory 0700,
# and a tarball saved from such a root keeps that, where no user but root
# reaches anything: man-db's mandb failed so, and so would lintian, which
# scripts/deb-test.sh runs as nobody.
debian_root_ready() {
  chmod 0755 "$1" && grep -q '^VERSION_ID="12"' "$1/etc/os-release"
}

# debian_root_mounts_under DIR: whether anything is mounted at DIR or under
# it (in this mount namespace). The root's mounts live in a namespace that
# dies with the run; deleting the root through one still there would delete
# what it shows of the host.
debian_root_mounts_under() {
  awk -v r="$1" '$5 == r || index($5, r "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# debian_root_mount_kernel_fs ROOT SYSFS_OPTIONS: what a Debian machine has
# mounted, in ROOT: the host's /dev (its devices and /dev/pts), a sysfs
# mounted with SYSFS_OPTIONS, and /run (with /run/lock) and /tmp as tmpfs of
# the root's own, so nothing written there reaches the host. Run it as pid 1
# of `unshare --mount --pid --fork --kill-child --propagation private
# --mount-proc=ROOT/proc` (which gives ROOT its /proc): the mounts are that
# namespace's and go with it. It runs in `bash -c`, so pass it in with
# `declare -f debian_root_mount_kernel_fs`.
debian_root_mount_kernel_fs() {
  local r=$1 sysfs_options=$2
  mount --rbind /dev "$r/dev" &&
    mount -t sysfs -o "$sysfs_options" sysfs "$r/sys" &&
    mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$r/run" &&
    mkdir -m 1777 "$r/run/lock" &&
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$r/tmp"
}
