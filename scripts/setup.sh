#!/usr/bin/env bash
# Installs what Headway's build, tests, lab and demo need on a Debian machine (run as root).
# Idempotent: installs only what is missing. Used by scripts/test.sh, scripts/demo.sh and CI.
set -euo pipefail

# Debian packages: iproute2 (ip, netns, veth), ethtool (offloads off on lab links), iperf3 (bulk
# flows through emulated links), iputils-ping (reachability checks), procps (sysctl), util-linux
# (setpriv, for the unprivileged-path tests), wrk (HTTP load).
packages=(iproute2 nftables ethtool iperf3 iputils-ping procps util-linux wrk curl ca-certificates build-essential pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Rust: the machine image ships rustup's toolchain in ~/.cargo; fall back to Debian's packages.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no cargo found; installing Debian's rustc and cargo"
  apt-get install -y -qq rustc cargo >/dev/null
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi
