#!/usr/bin/env bash
# Installs from Debian what safeprune needs, when it is missing. Idempotent:
# safe on every CI run and on a node that has it all.
#
#   scripts/deps.sh                what building and the tests need
#                                  (scripts/test.sh runs this), with
#                                  cargo-deb 3.8.0 from crates.io for the
#                                  Debian package's test
#   scripts/deps.sh --build        only what building needs: a C linker,
#                                  protoc and the CA certificates cargo
#                                  downloads crates with; nothing else
#   ... --start-docker             also start Docker Engine if none answers
#                                  (Debian's docker.io is installed only where
#                                  no dockerd exists: a node's own Docker is
#                                  left as it is)
set -euo pipefail

build_only=false
start_docker=false
for arg in "$@"; do
  case "$arg" in
    --build) build_only=true ;;
    --start-docker) start_docker=true ;;
    *)
      echo "deps: unknown option $arg (use --build and/or --start-docker)" >&2
      exit 2
      ;;
  esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "deps: cargo not found: install Rust 1.89 or later with rustup (https://rustup.rs), then run this again" >&2
  exit 1
fi

need=()
need_promtool=false
need_registry=false

# Building: rustc links through cc (gcc and the C library's headers), and
# containerd-client and k8s-cri compile their protobuf files with protoc.
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
# cargo downloads the crates over HTTPS and trusts the system's CA bundle,
# which minimal roots (debootstrap --variant=minbase, slim images) lack.
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)

if $start_docker || ! $build_only; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
fi

if ! $build_only; then
  # The tests' private engines, and busybox for their images.
  command -v containerd >/dev/null 2>&1 || need+=(containerd)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  # CRI-O from $SAFEPRUNE_TEST_RUNTIMES watches each container with
  # Debian's conmon (the set has none) and links Debian's SQLite (its
  # libseccomp comes with runc).
  command -v conmon >/dev/null 2>&1 || need+=(conmon)
  dpkg -s libsqlite3-0 >/dev/null 2>&1 || need+=(libsqlite3-0)
  dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
  # The test harness runs each private engine under unshare(1), with mount(8).
  command -v unshare >/dev/null 2>&1 || need+=(util-linux)
  command -v mount >/dev/null 2>&1 || need+=(mount)
  # The private containerd's network namespace needs its loopback up: ip(8).
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  # The DaemonSet's pod runs on a pod network: a CNI bridge in the private
  # containerd's network namespace, with Debian's plugins.
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  # scripts/test.sh checks the systemd units offline with systemd-analyze.
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
  # ... which checks that the units' commands exist: ExecReload's /bin/kill
  # (a shell builtin too, hence the path) is procps', absent from minimal images.
  [ -x /bin/kill ] || need+=(procps)
  # scripts/k8s-validate.sh installs the manifest validator from PyPI into
  # a virtual environment: python3 and its venv module (ensurepip), which
  # Debian packages apart.
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  # The command-line tests load `safeprune completions` in each shell it
  # writes for (bash is Debian's own), and render `safeprune man` with groff.
  command -v zsh >/dev/null 2>&1 || need+=(zsh)
  command -v fish >/dev/null 2>&1 || need+=(fish)
  command -v groff >/dev/null 2>&1 || need+=(groff-base)
  # ... and give safeprune a terminal with script(1) (bsdutils): whether it
  # colours its logs.
  command -v script >/dev/null 2>&1 || need+=(bsdutils)
  # The metrics test lints the textfile with promtool, from Debian's
  # prometheus package.
  command -v promtool >/dev/null 2>&1 || need_promtool=true
  # The image tests pull and push through a registry of their own:
  # Debian's docker-registry (the CNCF distribution registry), the binary
  # alone, as promtool.
  command -v docker-registry >/dev/null 2>&1 || need_registry=true
  # scripts/deb-test.sh lints the Debian package, and installs it in a fresh
  # Debian 12 root that debootstrap makes.
  command -v lintian >/dev/null 2>&1 || need+=(lintian)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi

if [ ${#need[@]} -gt 0 ] || $need_promtool || $need_registry; then
  $sudo apt-get update -qq
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
if $need_promtool; then
  # The tool alone, out of the package: installing prometheus would add a
  # user, eleven JavaScript and font packages and a server enabled at boot (started at
  # once where no policy-rc.d forbids it), listening on :9090. Measured on 2
  # cores: 2.5 s this way, 15.5 s for the package.
  echo "deps: installing promtool (from Debian's prometheus package, the tool only) in /usr/local/bin" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # apt's download sandbox user cannot write to a private temporary directory.
  (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root prometheus)
  dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -xO ./usr/bin/promtool >"$tmp/promtool"
  $sudo install -m 0755 "$tmp/promtool" /usr/local/bin/promtool
  promtool --version >/dev/null
fi

if $need_registry; then
  # The binary alone, out of the package: the package adds a user and a
  # registry enabled at boot (started at once where no policy-rc.d forbids
  # it) on :5000; the tests start their own, each on a port of its own.
  echo "deps: installing docker-registry (from Debian's docker-registry package, the binary only) in /usr/local/bin" >&2
  tmp_registry=$(mktemp -d)
  (cd "$tmp_registry" && apt-get download -qq -o APT::Sandbox::User=root docker-registry)
  dpkg-deb --fsys-tarfile "$tmp_registry"/docker-registry_*.deb |
    tar -xO ./usr/bin/docker-registry >"$tmp_registry/docker-registry"
  $sudo install -m 0755 "$tmp_registry/docker-registry" /usr/local/bin/docker-registry
  rm -rf "$tmp_registry"
  docker-registry --version >/dev/null
fi

# cargo-deb builds the Debian package (Cargo.toml, [package.metadata.deb],
# is written for this version). It compiles with the C compiler above.
if ! $build_only && [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb 3.8.0" ]; then
  echo "deps: installing cargo-deb 3.8.0 from crates.io (cargo install)" >&2
  cargo install cargo-deb --version 3.8.0 --locked
fi

# cargo-nextest runs the tests: its summary counts the tests of the runtimes
# absent here as skipped (.config/nextest.toml's default filter, 0.9.84 or
# later).
if ! $build_only && ! cargo nextest --version >/dev/null 2>&1; then
  echo "deps: installing cargo-nextest 0.9.143 from crates.io (cargo install)" >&2
  cargo install cargo-nextest --version 0.9.143 --locked
fi

if $start_docker && ! docker info >/dev/null 2>&1; then
  echo "deps: starting dockerd (log: /var/log/safeprune-dockerd.log)" >&2
  $sudo sh -c 'nohup dockerd >/var/log/safeprune-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || {
    echo "deps: dockerd did not start; see /var/log/safeprune-dockerd.log" >&2
    exit 1
  }
fi
