#!/usr/bin/env bash
# The test command of README.md: installs what the tests need when missing,
# then runs formatting, lints and every test, the Debian package's last. The
# integration tests start their own private engines, and the package is
# installed only in a root of its own; nothing here touches the node's
# Docker or its packages.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

# The newer runtimes nodes run, from Debian's own packages: unstable's
# containerd 2.x and Docker Engine 28+ (docker.io), fetched and unpacked
# into target/runtimes without touching the machine's apt setup (cached;
# the versions it took are printed). The tests find them through
# SAFEPRUNE_TEST_RUNTIMES (a directory set beforehand is fetched into and
# kept); CRI-O and cri-dockerd binaries of one's own may be put beside them
# (CONTRIBUTING.md, "Runtimes"), else their tests are left out of the run
# and counted as skipped (below).
runtimes_dir="${SAFEPRUNE_TEST_RUNTIMES:-$(pwd)/target/runtimes}"
scripts/runtimes.sh "$runtimes_dir" | sed 's/^/test: runtime /' >&2
export SAFEPRUNE_TEST_RUNTIMES="$runtimes_dir"

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings

# The systemd units, offline (no systemd needs to run here).
# verify checks every setting and that each command exists; ExecStart's
# /usr/local/bin/safeprune is this build, bound over /usr/local/bin in a
# mount namespace of the check's own, so nothing is installed on the host.
# verify only warns of an unknown key and still exits 0: any output fails.
cargo build --locked --bin safeprune
bin_dir="$(cd "${CARGO_TARGET_DIR:-target}/debug" && pwd)"
as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(--map-root-user); fi
if ! verify=$(unshare --mount "${as_root[@]}" sh -c \
  'mount --bind "$1" /usr/local/bin && systemd-analyze verify systemd/*.service systemd/*.timer' \
  sh "$bin_dir" 2>&1) || [ -n "$verify" ]; then
  printf '%s\n' "$verify" >&2
  echo "test: systemd-analyze verify found problems in systemd/" >&2
  exit 1
fi
# The sandbox's exposure (docs/operations.md, "The sandbox"): 0.7 now, on
# systemd's 0-10 scale; loosening it fails here until the figure is raised
# on purpose, here and in docs/operations.md.
if ! security=$(systemd-analyze security --offline=yes --threshold=7 --no-pager systemd/*.service 2>&1); then
  printf '%s\n' "$security" >&2
  echo "test: a systemd unit's exposure rose above 0.7 (systemd-analyze security)" >&2
  exit 1
fi
printf '%s\n' "$security" | grep -F 'Overall exposure level'

# The Kubernetes manifests: rendered, validated against Kubernetes' schemas,
# and held to their security settings (deploy/kubernetes).
scripts/k8s-validate.sh

# Every test, with cargo-nextest (scripts/deps.sh installs it).
# The optional sets (.config/nextest.toml leaves their tests out): each
# one found is run; each one absent is said once, with how many tests it
# leaves out, which the summary counts as skipped.
absent=()
while IFS='|' read -r set holds filter; do
  if [ -d "$runtimes_dir/$set" ]; then
    echo "test: running the $set tests ($runtimes_dir/$set)" >&2
  else
    count=$(cargo nextest list --locked --ignore-default-filter -E "$filter" \
      --message-format oneline 2>/dev/null | grep -c . || true)
    echo "test: skipping $count tests: no $runtimes_dir/$set ($holds); CONTRIBUTING.md, \"Runtimes\"" >&2
    absent+=("($filter)")
  fi
done <<'SETS'
crio|crio, pinns, copyimg|test(/^crio_(node|harness)::/) | test(/^daemonset_pod::on_crio_/)
cri-dockerd|cri-dockerd 0.4+|test(/^cri_dockerd_node::.*::on_0_4_/)
cri-dockerd-0.3|cri-dockerd 0.3.x|test(/^cri_dockerd_node::.*::on_0_3_/)
SETS
if [ ${#absent[@]} -eq 0 ]; then
  cargo nextest run --locked --no-fail-fast --ignore-default-filter
else
  leave_out=$(IFS='|'; echo "${absent[*]}")
  cargo nextest run --locked --no-fail-fast --ignore-default-filter -E "not ($leave_out)"
fi

# The Debian package: built with cargo deb, linted, installed in a fresh
# Debian 12 root, removed and purged there (scripts/deb-test.sh says what it
# checks). Nothing is installed on this machine.
scripts/deb-test.sh
