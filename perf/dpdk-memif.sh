#!/bin/bash
# The kernel-free DPDK benchmark (issue 14): the broker's dpdk transport over net_memif
# against its io_uring transport over loopback, the same load generator (perf/memif-load)
# driving both with single-record Produce requests. Builds build-release if needed, runs
# perf/dpdk_memif.py, writes perf/results/dpdk-memif/<time>-<commit>/results.{md,json}.
# A manual run (not CI); about 2 minutes with the defaults. docs/benchmarks.md,
# "Kernel-free: DPDK over net_memif", explains the figures.
#
# usage: perf/dpdk-memif.sh [--phases 1x1,4x32,16x32] [--duration S] [--warmup S]
#                           [--record-size B] [--out DIR] [--build-dir DIR] [--no-build] [--keep]
#                           [--fetch BYTES [--transports dpdk,dpdk-copy,uring]]
#   --phases     connections x requests outstanding per connection, comma-separated
#   --fetch      consumers instead: Fetch requests of up to BYTES (zero copy vs copies vs io_uring)
#   --keep       keep the brokers' logs and data under the build directory
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=""
do_build=1
out=""
pass=()
usage() { sed -n '/^# usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "dpdk-memif: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --phases|--duration|--warmup|--record-size|--fetch|--transports) pass+=("$1" "$2"); shift 2 ;;
    --keep) pass+=("$1"); shift ;;
    --out) out=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ -n "$build" ] || build="$root/build-release"
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
if [ "$do_build" = 1 ]; then
  pkg-config --exists libdpdk || die "libdpdk-dev is not installed (tests/install-deps.sh installs it)"
  if [ ! -d "$build" ]; then
    meson setup "$build" "$root" --buildtype=release -Db_ndebug=false -Dtests=disabled >&2
  fi
  nice ninja -C "$build" dataplane/sluice-broker perf/memif-load >&2
fi
[ -x "$build/dataplane/sluice-broker" ] || die "no broker in $build"
[ -x "$build/perf/memif-load" ] || die "no perf/memif-load in $build"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no -- . ':!perf/results' 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
[ -n "$out" ] || out="$root/perf/results/dpdk-memif/$(date -u +%Y%m%d-%H%M%S)-$commit"
exec python3 "$here/dpdk_memif.py" --broker "$build/dataplane/sluice-broker" --load "$build/perf/memif-load" \
  --workdir "$build/perf" --out "$out" "${pass[@]}"
