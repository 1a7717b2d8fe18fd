#!/usr/bin/env bash
# Builds safeprune's container image offline: no registry, no base image.
#
#   scripts/image.sh [--binary PATH] [--out DIR]
#
#   --binary PATH  the safeprune binary (default target/release/safeprune,
#                  built with `cargo build --release --locked` if missing);
#                  read only, never changed
#   --out DIR      where to write (default target/image)
#
# It assembles DIR/rootfs/ with exactly what the binary needs to run:
#
#   /usr/sbin/safeprune      a copy of the binary, stripped as cargo deb
#                            strips the Debian package's (strip
#                            --strip-unneeded --remove-section=.comment
#                            --remove-section=.note): the release build
#                            keeps its symbol table, a quarter of its size,
#                            which only a debugger or a backtrace would read
#                            (a panic still names its file and line)
#   the shared libraries     each one ldd names, and the dynamic loader, at
#                            their real paths, with every symlink the loader
#                            meets on the way to them (/lib -> usr/lib on a
#                            merged-/usr system)
#   /etc/passwd, /etc/group  root alone: uid and gid 0 have a name for the
#                            tools that look one up
#
# and nothing else: no shell, no CA certificates (safeprune talks to unix
# sockets only, never TLS), no time zone data (the policy's default
# timezone is UTC; `timezone: local` reads /etc/localtime, absent here, and
# so is UTC too). The runtime creates the mount points (/proc, the socket,
# the policy and state directories) itself.
#
# Then, reproducibly (entries sorted, owners 0:0 by number, every mtime
# SOURCE_DATE_EPOCH, default 0; GNU tar format, so no pax headers with
# access times; gzip -n: no name or time in the gzip header):
#
#   DIR/safeprune-rootfs.tar   the root file system, for
#     docker import --change 'ENTRYPOINT ["/usr/sbin/safeprune"]' \
#       --change 'CMD ["daemon"]' --change 'USER 0:0' \
#       DIR/safeprune-rootfs.tar localhost/safeprune:VERSION
#   DIR/safeprune-oci.tar      an OCI image archive of the same root, as
#                              one gzipped layer, named
#                              localhost/safeprune:VERSION, for
#     ctr -n k8s.io images import DIR/safeprune-oci.tar
#
# VERSION is the package version in Cargo.toml. The same inputs give the
# same bytes. The Dockerfile's build stage runs this script too, so an image
# built from it holds the same files. Needs bash, coreutils, findutils, sed,
# awk, tar, gzip and ldd (libc-bin), all in a minimal Debian, and strip
# (binutils, which the C linker that building needs, gcc, depends on).
set -euo pipefail
umask 022

die() {
  echo "image: $*" >&2
  exit 2
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary)
      [ $# -ge 2 ] || die "--binary needs a path"
      binary=$2
      shift 2
      ;;
    --out)
      [ $# -ge 2 ] || die "--out needs a directory"
      out=$2
      shift 2
      ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *) die "unknown argument $1 (use --binary PATH and --out DIR)" ;;
  esac
done

if [ -z "$binary" ]; then
  binary=$repo/target/release/safeprune
  if [ ! -e "$binary" ]; then
    echo "image: no $binary: cargo build --release --locked" >&2
    (cd "$repo" && cargo build --release --locked)
  fi
fi
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then die "$binary is not an executable file"; fi
command -v strip >/dev/null 2>&1 || die "no strip: install binutils"
out=${out:-$repo/target/image}

version=$(awk -F'"' '/^\[/ { pkg = ($0 == "[package]") } pkg && /^version *=/ { print $2; exit }' "$repo/Cargo.toml")
[ -n "$version" ] || die "no package version in $repo/Cargo.toml"
name=localhost/safeprune:$version
epoch=${SOURCE_DATE_EPOCH:-0}
[[ "$epoch" =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH is not a number of seconds: $epoch"
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) die "no OCI architecture name known for $(uname -m)" ;;
esac

mkdir -p "$out"
out=$(cd "$out" && pwd)
rootfs=$out/rootfs
rm -rf "$rootfs" "$out/safeprune-rootfs.tar" "$out/safeprune-oci.tar"
mkdir -p "$rootfs"

# Copies the host's file at $1 into the root at the same path, reproducing
# every symlink met on the way (a directory such as /lib -> usr/lib, or the
# file itself) as the same link: the loader inside looks the same paths up.
add_path() {
  local rest=${1#/} dir="" part target hops=0
  while [ -n "$rest" ]; do
    part=${rest%%/*}
    if [[ "$rest" == */* ]]; then rest=${rest#*/}; else rest=""; fi
    case "$part" in
      "" | .) continue ;;
      ..)
        dir=${dir%/*}
        continue
        ;;
    esac
    if [ -L "$dir/$part" ]; then
      hops=$((hops + 1))
      [ "$hops" -le 40 ] || die "too many symlinks resolving $1"
      target=$(readlink "$dir/$part")
      mkdir -p "$rootfs$dir"
      if [ -L "$rootfs$dir/$part" ]; then
        [ "$(readlink "$rootfs$dir/$part")" = "$target" ] || die "$dir/$part: conflicting links"
      else
        ln -s "$target" "$rootfs$dir/$part"
      fi
      if [[ "$target" == /* ]]; then
        dir=""
        target=${target#/}
      fi
      rest=$target${rest:+/$rest}
    elif [ -z "$rest" ]; then
      [ -f "$dir/$part" ] || die "$dir/$part is not a regular file"
      mkdir -p "$rootfs$dir"
      [ -e "$rootfs$dir/$part" ] ||
        install -m "$(stat -c %a "$dir/$part")" "$dir/$part" "$rootfs$dir/$part"
    else
      [ -d "$dir/$part" ] || die "$dir/$part is not a directory"
      dir=$dir/$part
    fi
  done
}

# The libraries and the loader, as the loader itself resolves them for this
# binary (`ldd` runs it in trace mode). A static binary needs none.
libs=()
if ldd_out=$(ldd "$binary" 2>&1); then
  while read -r line; do
    case "$line" in
      *"=> not found"*) die "ldd: a library of $binary is missing: $line" ;;
      *"=> /"*) libs+=("$(sed -E 's/.*=> ([^ ]+) .*/\1/' <<<"$line")") ;;
      /*) libs+=("${line%% *}") ;; # the loader, named by the binary's PT_INTERP
      *) ;;                        # linux-vdso.so.1: in the kernel
    esac
  done <<<"$ldd_out"
elif ! grep -qE 'not a dynamic executable|statically linked' <<<"$ldd_out"; then
  die "ldd $binary failed: $ldd_out"
fi
for lib in "${libs[@]}"; do add_path "$lib"; done

# strip -o writes a new file and leaves $binary as it is: cargo deb and
# anything else reading the build output get it unchanged.
install -d -m 0755 "$rootfs/usr/sbin"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  -o "$rootfs/usr/sbin/safeprune" "$binary"
chmod 0755 "$rootfs/usr/sbin/safeprune"
install -d -m 0755 "$rootfs/etc"
printf 'root:x:0:0:root:/:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
find "$rootfs" -type d -exec chmod 0755 {} +
find "$rootfs" -exec touch -h -d "@$epoch" {} +

# A reproducible tar of the directory $2 into $1, entries as relative paths
# without a leading ./ (the directory itself is not an entry).
repro_tar() {
  local archive=$1 dir=$2 entries
  mapfile -t entries < <(find "$dir" -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort)
  LC_ALL=C tar --create --file="$archive" --directory="$dir" --format=gnu \
    --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -- "${entries[@]}"
}

rootfs_tar=$out/safeprune-rootfs.tar
repro_tar "$rootfs_tar" "$rootfs"

# The OCI image layout, then its archive.
oci=$out/oci
rm -rf "$oci"
mkdir -p "$oci/blobs/sha256"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# A blob from the file $1: moved to its digest's name; prints the digest.
blob() {
  local digest
  digest=$(sha "$1")
  mv "$1" "$oci/blobs/sha256/$digest"
  echo "$digest"
}

diff_id=$(sha "$rootfs_tar")
gzip -n -c "$rootfs_tar" >"$oci/layer.tmp"
layer_size=$(size "$oci/layer.tmp")
layer=$(blob "$oci/layer.tmp")

created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
printf '{"architecture":"%s","config":{"Entrypoint":["/usr/sbin/safeprune"],"Cmd":["daemon"],"User":"0:0"},"created":"%s","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$created" "$diff_id" >"$oci/config.tmp"
config_size=$(size "$oci/config.tmp")
config=$(blob "$oci/config.tmp")

printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" >"$oci/manifest.tmp"
manifest_size=$(size "$oci/manifest.tmp")
manifest=$(blob "$oci/manifest.tmp")

# containerd's importer names the image by io.containerd.image.name; other
# OCI tools read the tag from org.opencontainers.image.ref.name.
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$arch" "$name" "$version" >"$oci/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$oci/oci-layout"
find "$oci" -type d -exec chmod 0755 {} +
find "$oci" -type f -exec chmod 0644 {} +
repro_tar "$out/safeprune-oci.tar" "$oci"
rm -rf "$oci"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
files=$(find "$rootfs" -type f | wc -l)
links=$(find "$rootfs" -type l | wc -l)
echo "image: $name ($arch), $files files and $links symlinks in $rootfs"
echo "image: binary            $(size "$binary") bytes ($(mib "$(size "$binary")")): $binary"
echo "image: stripped binary   $(size "$rootfs/usr/sbin/safeprune") bytes ($(mib "$(size "$rootfs/usr/sbin/safeprune")")): /usr/sbin/safeprune"
echo "image: rootfs (tar)      $(size "$rootfs_tar") bytes ($(mib "$(size "$rootfs_tar")")): $rootfs_tar"
echo "image: compressed layer  $layer_size bytes ($(mib "$layer_size")), diff_id sha256:$diff_id"
echo "image: OCI archive       $(size "$out/safeprune-oci.tar") bytes: $out/safeprune-oci.tar"
echo "image: docker import --change 'ENTRYPOINT [\"/usr/sbin/safeprune\"]' --change 'CMD [\"daemon\"]' --change 'USER 0:0' $rootfs_tar $name"
echo "image: ctr -n k8s.io images import $out/safeprune-oci.tar"
