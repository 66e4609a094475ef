#!/usr/bin/env bash
# Runs every Headway test: formatting, lints, unit/property/integration tests (including the
# network-namespace end-to-end tests, which need root), and a fuzz-target smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace --all-targets
cargo test --workspace --doc --quiet
echo "== fuzz smoke (every target, ${FUZZ_SECONDS:-15} s each)"
FUZZ_SECONDS="${FUZZ_SECONDS:-15}" bash scripts/fuzz-smoke.sh
