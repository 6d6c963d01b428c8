#!/usr/bin/env bash
# Installs the Debian packages Sluice needs to build and run, idempotently:
# apt-get runs only when something is missing. Used by the README's run
# command and by tests/install-deps.sh.
#   build:     gcc, meson, ninja, pkg-config
#   libraries: liburing, jemalloc, zlib, zstd, lz4, snappy (decompression)
#   controller quorum: libraft (with libuv)
#   probed for later work (optional): DPDK
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config liburing-dev libjemalloc-dev
      zlib1g-dev libzstd-dev liblz4-dev libsnappy-dev libraft-dev libuv1-dev)
pkgs+=("$@")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
    echo "install-deps: installing ${missing[*]}"
    SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
