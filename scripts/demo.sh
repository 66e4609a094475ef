#!/usr/bin/env bash
# Builds Headway and runs `headway demo` (the main job on an embedded default). Needs root: the
# demo builds network namespaces and emulated WAN links, and removes them when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --quiet -p headway
exec ./target/release/headway demo "$@"
