#!/usr/bin/env bash
# Installs sluice-broker-dpdk.service and what it runs: the broker binary, the hugepage
# and NIC-binding scripts, and (only when there is none yet) /etc/sluice/server.properties
# from deploy/dpdk-nic.properties, to be edited before the first start. Starts nothing:
# it prints the commands that do. DESTDIR=dir installs under dir instead of / (no
# systemctl then).
#
#   sudo deploy/install-dpdk-service.sh [BROKER]    # BROKER: default build-release/dataplane/sluice-broker
#
# The broker must be built with DPDK (Debian's libdpdk-dev installed before `meson setup`).
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BROKER=${1:-$ROOT/build-release/dataplane/sluice-broker}
D=${DESTDIR:-}
die() { echo "install-dpdk-service: $*" >&2; exit 1; }
[[ -n $D || $(id -u) -eq 0 ]] || die "needs root (or DESTDIR=dir)"
[[ -x $BROKER ]] || die "no broker at $BROKER (meson setup build-release --buildtype=release && ninja -C build-release)"
install -D -m 0755 "$BROKER" "$D/usr/local/bin/sluice-broker"
install -D -m 0755 "$ROOT/deploy/dpdk-hugepages.sh" "$D/usr/local/lib/sluice/dpdk-hugepages.sh"
install -D -m 0755 "$ROOT/deploy/dpdk-bind.sh" "$D/usr/local/lib/sluice/dpdk-bind.sh"
install -D -m 0644 "$ROOT/deploy/sluice-broker-dpdk.service" "$D/etc/systemd/system/sluice-broker-dpdk.service"
if [[ -e $D/etc/sluice/server.properties ]]; then
    echo "install-dpdk-service: $D/etc/sluice/server.properties is there already: left as it is"
else
    install -D -m 0644 "$ROOT/deploy/dpdk-nic.properties" "$D/etc/sluice/server.properties"
    echo "install-dpdk-service: wrote $D/etc/sluice/server.properties from deploy/dpdk-nic.properties: edit it"
fi
[[ -n $D ]] || systemctl daemon-reload
cat <<EOF
install-dpdk-service: installed under ${D:-/}. Next:
  /usr/local/lib/sluice/dpdk-bind.sh --status      # the NIC's PCI address and NUMA node
  \$EDITOR /etc/sluice/server.properties            # sluice.dpdk.eal.args -a, addresses, cores
  \$EDITOR /etc/sluice/dpdk.env                     # optional: SLUICE_HUGEPAGES=, SLUICE_NUMA_NODE=
  systemctl enable --now sluice-broker-dpdk
  journalctl -u sluice-broker-dpdk -f
EOF
