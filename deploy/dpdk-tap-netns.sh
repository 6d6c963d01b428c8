#!/usr/bin/env bash
# Try the dpdk transport on any Linux box (root; no hugepages, no NIC): creates a network
# namespace, starts sluice-broker in it with sluice.transport=dpdk on a net_tap device,
# gives the kernel's side of the TAP 198.18.0.1/24 and the broker 198.18.0.2, prints how
# to reach it, and on Ctrl-C (or the broker's exit) stops the broker and deletes the
# namespace. Data under a temporary directory, removed at the end.
#
#   sudo deploy/dpdk-tap-netns.sh [BROKER]     # BROKER: default build/dataplane/sluice-broker
#
# The broker must be built with DPDK (Debian's libdpdk-dev installed before `meson setup`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BROKER=${1:-$ROOT/build/dataplane/sluice-broker}
NS=sluice-dpdk-try-$$
TAP=sltry$(( $$ % 10000 ))
WORK=$(mktemp -d /tmp/sluice-dpdk-try.XXXXXX)
die() { echo "dpdk-tap-netns: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (a network namespace and a TAP device)"
[[ -x $BROKER ]] || die "no broker at $BROKER (meson setup build && ninja -C build)"
PID=
cleanup() {
    [[ -n $PID ]] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up
cat >"$WORK/broker.properties" <<PROPS
listeners=PLAINTEXT://198.18.0.2:9092
advertised.listeners=PLAINTEXT://198.18.0.2:9092
log.dirs=$WORK/data
sluice.transport=dpdk
sluice.dpdk.eal.args=--no-huge -m 256 --no-pci --file-prefix=$NS --vdev=net_tap0,iface=$TAP -l 0 --log-level=lib.eal:warning
sluice.dpdk.ipv4.address=198.18.0.2/24
num.network.threads=1
sluice.cpu.affinity=false
PROPS
ip netns exec "$NS" "$BROKER" "$WORK/broker.properties" >"$WORK/out.log" 2>&1 &
PID=$!
for _ in $(seq 200); do
    ip -n "$NS" link show "$TAP" >/dev/null 2>&1 && break
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/out.log"; die "the broker exited"; }
    sleep 0.1
done
ip -n "$NS" link show "$TAP" >/dev/null 2>&1 || { cat "$WORK/out.log"; die "no TAP $TAP after 20 s"; }
ip -n "$NS" addr add 198.18.0.1/24 dev "$TAP"
ip -n "$NS" link set "$TAP" up
echo "dpdk-tap-netns: broker (pid $PID) on DPDK at 198.18.0.2:9092 in namespace $NS; its log: $WORK/out.log"
echo "  ip netns exec $NS ping -c 3 198.18.0.2"
echo "  echo hello | ip netns exec $NS kcat -b 198.18.0.2:9092 -P -t demo"
echo "  ip netns exec $NS kcat -b 198.18.0.2:9092 -C -t demo -e"
echo "Ctrl-C stops it."
wait "$PID" || true
