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
# `cargo clippy --all-targets -- -D warnings`, folded into the test build: cargo clippy runs
# clippy-driver (rustc with clippy's lints) over the workspace's crates in a `cargo check`, which
# compiles every dependency a second time in check mode (5m31s of a 28-minute CI run on a 2-core
# VM). Run as the workspace's compiler in the test build itself, clippy-driver lints the same
# targets (lib, lib tests, bins, examples, tests, benches) with the same lints, `clippy.toml` and
# `-D warnings`, and the dependencies are compiled once. The tests then run on those binaries.
echo "== cargo clippy --all-targets -- -D warnings, and the test build"
# (Not exported: the fuzz workspace below is built without clippy.)
lint=(env RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
"${lint[@]}" cargo test --workspace --all-targets --no-run
echo "== cargo test"
"${lint[@]}" cargo test --workspace --all-targets
"${lint[@]}" cargo test --workspace --doc --quiet
echo "== fuzz smoke (every target, ${FUZZ_SECONDS:-10} s each)"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" bash scripts/fuzz-smoke.sh
