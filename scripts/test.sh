#!/usr/bin/env bash
# The test command of README.md: installs what the tests need when missing,
# then runs formatting, lints and every test. The integration tests start
# their own private engines; nothing here touches the node's Docker.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --no-fail-fast
else
  cargo test --locked --no-fail-fast
fi
