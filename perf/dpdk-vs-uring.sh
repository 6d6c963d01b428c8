#!/usr/bin/env bash
# The dpdk transport against the io_uring transport on this machine (issue 14, the TAP
# half): the same broker binary, one network core and one storage core each, measured side
# by side in one run with the same client (sluice-perf, librdkafka):
#
#   dpdk        sluice.transport=dpdk on a net_tap device in a network namespace (EAL
#               --no-huge --no-pci -m 256, its own --file-prefix), broker 198.18.0.2; the
#               client in the same namespace reaches it through the kernel's side of the TAP
#   uring-veth  sluice.transport=uring in one namespace (198.18.1.2), the client in
#               another (198.18.1.1), joined by a veth pair: the comparable kernel path
#               (a veth passes TCP's segmentation-offload packets, up to 64 KiB, whole)
#   uring-veth-nogso  (only if asked for) the same veth with gso_max_segs 1 on both ends:
#               every frame at most one MSS, as on the TAP, whose DPDK side has no
#               offloads; on 2 cores its frames reorder (see dpdk_vs_uring.py)
#   uring-lo    the same over loopback inside one namespace: a second reference
#
# Phases (100 B values, no key, acks=1, each on a fresh broker and data directory; every
# set-up in turn within a phase):
#   throughput   1 producer, 6 partitions, linger.ms 5, as fast as possible
#   single-1     single-record Produce requests (linger.ms 0, batch.num.messages 1), 1
#                partition, 1 producer with 1 request in flight
#   single-4     the same with 4 producers, 1 request in flight each
#   single-32    the same with 1 producer and up to 32 records (requests) outstanding
#   latency      1 producer, 6 partitions, linger.ms 0, a fixed --rate (20,000 records/s):
#                produce latency p50/p99 from each record's intended send time
# Per phase the broker's CPU time (utime + stime, /proc/PID/stat, and per thread from
# /proc/PID/task/*/stat: sluice-net0, sluice-store0, the rest) over the client's run,
# divided by the records acknowledged and the Produce requests sent (librdkafka's
# statistics). Flush mode: the default, acknowledged when the O_DIRECT write completes,
# no fsync.
#
# usage: perf/dpdk-vs-uring.sh [--duration S] [--warmup S] [--rate R] [--out DIR]
#          [--quiet-wait S] [--build-dir DIR] [--no-build] [--phases "throughput single-1 ..."]
#          [--transports "dpdk uring-veth uring-lo uring-veth-nogso"]
#   --duration S   measured seconds per phase (default 20; about 8 s more per phase and
#                  set-up go to the warm-up, starting and stopping: 15 runs ~ 7 min)
#   --warmup S     unmeasured seconds first (default 3)
#   --rate R       the latency phase's records/s (default 20000)
#   --quiet-wait S before each run wait up to S s (180 s in all) for the CPUs to be 70%
#                  idle over a second, as perf/run-all.sh does (default 30)
#   --out DIR      results (default perf/results/dpdk/<UTC date>-<commit>)
#   --build-dir    default build-release if present, else build; created as a release
#                  build with assertions (-Db_ndebug=false) if missing
#   --no-build     use the binaries as they are
# Writes DIR/results.md (also printed), DIR/results.json and per phase and set-up
# DIR/<phase>/<set-up>/{perf.json,perf.log,broker.log,broker.properties,command.txt,
# result.json}. Needs root (namespaces, a TAP device), a broker built with libdpdk-dev and
# librdkafka-dev. It creates namespaces sluice-bench-<PID>-{dpdk,srv,cli} and deletes them
# on exit, with the EAL's runtime directories it created; it signals only the processes
# it started, by PID. See docs/benchmarks.md, "DPDK vs io_uring through a TAP".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
duration=20
warmup=3
rate=20000
quiet=30
out=""
build=""
do_build=1
phases="throughput single-1 single-4 single-32 latency"
transports="dpdk uring-veth uring-lo"

usage() { sed -n '/^# usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "dpdk-vs-uring: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --quiet-wait) quiet=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --phases) phases=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || die "needs root: network namespaces and a TAP device"
if [ -z "$build" ]; then
  if [ -d "$root/build-release" ]; then build="$root/build-release"; else build="$root/build"; fi
  [ -d "$build" ] || build="$root/build-release"
fi
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac

if [ "$do_build" = 1 ]; then
  if [ ! -d "$build" ]; then
    meson setup "$build" "$root" --buildtype=release -Db_ndebug=false -Dtests=disabled >&2
  fi
  nice ninja -C "$build" dataplane/sluice-broker perf/sluice-perf >&2
fi
broker="$build/dataplane/sluice-broker"
perf="$build/perf/sluice-perf"
[ -x "$broker" ] || die "no broker at $broker"
[ -x "$perf" ] || die "no sluice-perf at $perf (librdkafka-dev missing when $build was configured?)"

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
# Uncommitted changes to the broker's sources mark the commit dirty; results are not sources.
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no -- . ':!perf/results' 2>/dev/null)" ]; then
  commit="$commit-dirty"
fi
run="$(date -u +%Y%m%d-%H%M%S)-$commit"
[ -n "$out" ] || out="$root/perf/results/dpdk/$run"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
tag=$$
work="$build/perf/dpdk-vs-uring/$tag"
mkdir -p "$out" "$work"
pidfile="$work/pids"
: >"$pidfile"

py=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # The helper cleans up after itself; this is for when it could not (killed, crashed).
  if [ -n "$py" ] && kill -0 "$py" 2>/dev/null; then
    kill -TERM "$py" 2>/dev/null || true
    wait "$py" 2>/dev/null || true
  fi
  # A broker the helper started and could not stop; the command line guards against a
  # PID reused since.
  while read -r pid; do
    if [ -n "$pid" ] && { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "$broker"; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done <"$pidfile"
  for ns in dpdk srv cli; do ip netns del "sluice-bench-$tag-$ns" 2>/dev/null || true; done
  rm -rf /var/run/dpdk/sluice-bench-"$tag"-* "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "dpdk-vs-uring: commit $commit, $duration s per phase (+ $warmup s warm-up), results in $out" >&2
python3 "$here/dpdk_vs_uring.py" --broker "$broker" --perf "$perf" --out "$out" --workdir "$work" \
  --tag "$tag" --pidfile "$pidfile" --duration "$duration" --warmup "$warmup" --rate "$rate" \
  --quiet-wait "$quiet" --phases "$phases" --transports "$transports" --commit "$commit" --run "$run" &
py=$!
wait "$py"
