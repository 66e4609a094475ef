#!/usr/bin/env bash
# Installs what Headway's build, tests, lab and demo need on a Debian machine (run as root).
# Idempotent: installs only what is missing. Used by scripts/test.sh, scripts/demo.sh and CI.
set -euo pipefail

# Debian packages: iproute2 (ip, netns, veth), ethtool (offloads off on lab links), iperf3 (bulk
# flows through emulated links), iputils-ping (reachability checks), procps (sysctl), util-linux
# (setpriv, for the unprivileged-path tests), wrk (HTTP load); for `headway bench adc`, the peers
# it is measured against: haproxy, nginx with libnginx-mod-stream (NGINX's L4 `stream {}` module)
# and nghttp2-client (h2load, the HTTP/2 load tool); varnish, the cache `headway bench adc --cache`
# is measured against. openssl: the TLS tests' `openssl s_client`
# (SNI, resumption, refused versions and suites) and RSA test keys; curl and h2load also drive
# HTTPS and HTTP/2 over TLS there. The proxy's TLS provider (aws-lc-rs) builds its C code with
# build-essential's compiler alone on x86_64 Linux: no cmake, clang or nasm is needed.
# python3-grpcio: real gRPC peers (client and server) for the tests of gRPC through the ADC.
# logrotate: the packaged rotation file (packaging/logrotate) run against a live access log.
packages=(iproute2 nftables ethtool iperf3 iputils-ping procps util-linux wrk curl ca-certificates build-essential pkg-config
  haproxy nginx libnginx-mod-stream nghttp2-client varnish openssl python3-grpcio logrotate)
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

# Debian starts the stock nginx, haproxy and varnish services on install (nginx then holds port
# 80, varnish 6081). The
# benchmark runs its own instances with its own config files, so stop and disable the services:
# through systemd where it is the init system, else through the SysV scripts.
for svc in nginx haproxy varnish; do
  [ -e "/etc/init.d/$svc" ] || [ -e "/lib/systemd/system/$svc.service" ] || continue
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    if systemctl is-active --quiet "$svc" || systemctl is-enabled --quiet "$svc" 2>/dev/null; then
      echo "setup: stopping and disabling the stock $svc service"
      systemctl disable --now "$svc" >/dev/null 2>&1 || true
    fi
  elif [ -x "/etc/init.d/$svc" ]; then
    if "/etc/init.d/$svc" status >/dev/null 2>&1; then
      echo "setup: stopping the stock $svc service"
      "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
    fi
    if command -v update-rc.d >/dev/null 2>&1 && ls /etc/rc[2-5].d/S*"$svc" >/dev/null 2>&1; then
      update-rc.d "$svc" disable >/dev/null 2>&1 || true
    fi
  fi
done

# Rust: the machine image ships rustup's toolchain in ~/.cargo; fall back to Debian's packages.
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no cargo found; installing Debian's rustc and cargo"
  apt-get install -y -qq rustc cargo >/dev/null
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt >/dev/null 2>&1 || true
fi
