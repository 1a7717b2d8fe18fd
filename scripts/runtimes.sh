#!/usr/bin/env bash
# The newer runtimes the tests run beside Debian 12's own Docker 20.10 and
# containerd 1.6: whatever Debian unstable ("sid") packages now as
# `containerd` (2.x) and `docker.io` (28 and later), fetched as Debian
# packages and unpacked, never installed.
#
#   scripts/runtimes.sh [DIR]     DIR defaults to target/runtimes
#
# It never changes the machine's apt setup: the index and the downloads live
# in DIR/.apt (a sources.list of its own for `sid main`, signed by Debian's
# archive keyring, its own lists and cache). It installs nothing system-wide.
# It is idempotent and cached: the index is refreshed at most every 6 hours
# (SAFEPRUNE_RUNTIMES_REFRESH=1 forces it), a version already unpacked is
# kept, and when the archive cannot be reached the set already unpacked is
# used, said so. It prints the versions it took, one line each, to stdout.
#
# The layout the tests read through SAFEPRUNE_TEST_RUNTIMES=DIR
# (tests/integration/util/mod.rs, `test_runtime`):
#   DIR/containerd/{containerd,containerd-shim-runc-v2,ctr,VERSION}
#   DIR/docker/{dockerd,docker-proxy,VERSION}
# Binaries of one's own for the CRI-O and cri-dockerd tests go beside them
# (CONTRIBUTING.md, "Runtimes"); this script leaves those alone.
#
# Unstable's runc needs a newer C library than Debian 12's: the tests use
# Debian 12's runc (scripts/deps.sh installs it) with both.
set -euo pipefail

dir=${1:-target/runtimes}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt_dir="$dir/.apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ ! -s "$keyring" ]; then
  echo "runtimes: $keyring is missing: install Debian's debian-archive-keyring package" >&2
  exit 1
fi
echo "deb [signed-by=$keyring] http://deb.debian.org/debian sid main" >"$apt_dir/sources.list"

apt_opts=(
  -o "Dir::Etc::sourcelist=$apt_dir/sources.list"
  -o "Dir::Etc::sourceparts=/nonexistent"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::Cache=$apt_dir/cache"
  -o "Dir::State::status=/dev/null"
  -o "APT::Sandbox::User=root"
  -o "Acquire::Languages=none"
  -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
  -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
  -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
  -o "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false"
)

# The packages, and the files each gives the tests.
packages=(containerd docker.io)
files_of() {
  case "$1" in
    containerd) echo "containerd:usr/bin/containerd containerd-shim-runc-v2:usr/bin/containerd-shim-runc-v2 ctr:usr/bin/ctr" ;;
    docker.io) echo "dockerd:usr/sbin/dockerd docker-proxy:usr/sbin/docker-proxy" ;;
  esac
}
set_of() {
  case "$1" in
    containerd) echo containerd ;;
    docker.io) echo docker ;;
  esac
}

# The upstream version in a Debian version: 2.1.9+ds1-5 -> 2.1.9,
# 28.5.2+dfsg4-5 -> 28.5.2.
upstream() {
  local v=${1#*:}
  v=${v%%+*}
  v=${v%%~*}
  echo "${v%-*}"
}

stamp="$apt_dir/updated"
refresh=false
if [ "${SAFEPRUNE_RUNTIMES_REFRESH:-}" = 1 ] || [ ! -e "$stamp" ] ||
  [ -n "$(find "$stamp" -mmin +360 2>/dev/null)" ]; then
  refresh=true
fi
offline=false
if $refresh; then
  if apt-get "${apt_opts[@]}" -qq update >"$apt_dir/update.log" 2>&1; then
    touch "$stamp"
  else
    offline=true
    echo "runtimes: could not refresh Debian unstable's index (see $apt_dir/update.log)" >&2
  fi
fi

for package in "${packages[@]}"; do
  set=$(set_of "$package")
  target="$dir/$set"
  version=""
  if ! $offline; then
    version=$(apt-cache "${apt_opts[@]}" show --no-all-versions "$package" 2>/dev/null |
      sed -n 's/^Version: //p' | head -n 1)
  fi
  if [ -z "$version" ]; then
    if [ -s "$target/DEBIAN_VERSION" ]; then
      echo "runtimes: Debian unstable unreachable: keeping $package $(cat "$target/DEBIAN_VERSION") in $target" >&2
      echo "$set $(cat "$target/VERSION") (Debian unstable $package $(cat "$target/DEBIAN_VERSION"), cached)"
      continue
    fi
    echo "runtimes: cannot find $package in Debian unstable, and none is cached in $target" >&2
    exit 1
  fi
  if [ "$(cat "$target/DEBIAN_VERSION" 2>/dev/null)" != "$version" ]; then
    deb=$(find "$apt_dir/debs" -name "${package}_${version//:/%3a}_*.deb" -print -quit)
    if [ -z "$deb" ]; then
      (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" -qq download "$package=$version" >&2)
      deb=$(find "$apt_dir/debs" -name "${package}_*.deb" -newer "$apt_dir/sources.list" -print -quit)
      [ -n "$deb" ] || deb=$(ls -t "$apt_dir/debs/${package}_"*.deb | head -n 1)
    fi
    unpacked=$(mktemp -d "$dir/.unpack.XXXXXX")
    dpkg-deb -x "$deb" "$unpacked"
    fresh="$dir/.$set.new"
    rm -rf "$fresh"
    mkdir -p "$fresh"
    for entry in $(files_of "$package"); do
      install -m 0755 "$unpacked/${entry#*:}" "$fresh/${entry%%:*}"
    done
    rm -rf "$unpacked"
    echo "$version" >"$fresh/DEBIAN_VERSION"
    upstream "$version" >"$fresh/VERSION"
    rm -rf "$target"
    mv "$fresh" "$target"
    # Only the newest download of each package is kept.
    find "$apt_dir/debs" -name "${package}_*.deb" ! -name "${package}_${version//:/%3a}_*.deb" -delete
  fi
  # That it runs on this machine's C library, and says its version.
  case "$set" in
    containerd) says=$("$target/containerd" --version) ;;
    docker) says=$("$target/dockerd" --version) ;;
  esac
  case "$says" in
    *"$(cat "$target/VERSION")"*) ;;
    *)
      echo "runtimes: $target says \"$says\", not version $(cat "$target/VERSION")" >&2
      exit 1
      ;;
  esac
  echo "$set $(cat "$target/VERSION") (Debian unstable $package $version)"
done
