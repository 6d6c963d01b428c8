#!/usr/bin/env bash
# Same-run figures of two revisions of Sluice, beside Apache Kafka and the null sink
# (issue 11): builds the broker of REV-BEFORE and of REV-AFTER (release with assertions,
# each from `git archive` of the revision in a temporary directory, so the repository and
# its worktrees are not touched), then runs perf/run-all.sh once with both brokers as
# peers "before" and "after", workloads 1 and 2, the 1 GB read-back and the allocation
# count, and writes the table for docs/benchmarks.md to OUT/compare.md (one column per
# peer: records/s, p99, broker CPU per record and Kafka's ratio to it, the null sink's
# share, read-back MB/s and page faults, allocations per Produce and Fetch request).
#
# The load generator, the null sink and the allocation counter come from this tree
# (build-release), for both revisions: only the broker differs. With the same commit
# twice, the broker is built once and run twice: the difference between the two columns
# is then the run-to-run noise.
#
# usage: perf/compare-revs.sh [--duration S] [--warmup S] [--readback-bytes B]
#          [--peers "kafka null"] [--out DIR] [--quiet-wait S] [--no-install]
#          [--keep-builds] REV-BEFORE REV-AFTER
# Defaults: 20 s measured after a 5 s warm-up per phase (run-all.sh's full scale), a 1 GB
# read-back, Kafka and the null sink as the other peers, OUT =
# build-release/perf/compare/BEFORE-AFTER. A short --duration proves the tooling; a figure
# worth quoting needs the default or longer on an otherwise idle machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
duration=20 warmup=5 readback=$((1000 * 1000 * 1000)) others="kafka null" out=""
quiet_wait=30 install=1 keep_builds=0

die() { echo "compare-revs: $*" >&2; exit 2; }
log() { echo "compare-revs: [$(date +%H:%M:%S)] $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --readback-bytes) readback=$2; shift 2 ;;
    --peers) others=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quiet-wait) quiet_wait=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    --keep-builds) keep_builds=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || die "usage: perf/compare-revs.sh [options] REV-BEFORE REV-AFTER (see --help)"

before=$(git -C "$root" rev-parse --verify "$1^{commit}") || die "no commit '$1'"
after=$(git -C "$root" rev-parse --verify "$2^{commit}") || die "no commit '$2'"
b_short=${before:0:9} a_short=${after:0:9}
out=${out:-$root/build-release/perf/compare/$b_short-$a_short}
mkdir -p "$out"
out=$(cd "$out" && pwd)

src=$(mktemp -d "${TMPDIR:-/tmp}/sluice-compare.XXXXXX")
cleanup() { [ "$keep_builds" = 1 ] && log "builds kept in $src" || rm -rf "$src"; }
trap cleanup EXIT

# build_rev COMMIT: the broker of COMMIT, built in $src/COMMIT; echoes its path.
build_rev() {
  local c=$1 dir="$src/$1"
  if [ ! -x "$dir/build/dataplane/sluice-broker" ]; then
    log "building the broker of ${c:0:9} in $dir"
    mkdir -p "$dir"
    git -C "$root" archive --format=tar "$c" | tar -x -C "$dir"
    meson setup "$dir/build" "$dir" --buildtype=release -Db_ndebug=false >"$dir/setup.log" 2>&1 ||
      { tail -20 "$dir/setup.log" >&2; die "meson setup failed for ${c:0:9}"; }
    ninja -C "$dir/build" dataplane/sluice-broker >"$dir/build.log" 2>&1 ||
      { tail -20 "$dir/build.log" >&2; die "build failed for ${c:0:9}"; }
  fi
  echo "$dir/build/dataplane/sluice-broker"
}

bin_before=$(build_rev "$before")
bin_after=$(build_rev "$after")

scale=full
[ "$duration" -le 10 ] && scale=quick # shorter allocation windows (2 s + 3 s) too
args=(--scale "$scale" --warmup "$warmup" --duration "$duration" --readback-bytes "$readback"
      --peers "before after $others" --workloads "1 2 readback alloc"
      --sluice "before=$bin_before" --sluice "after=$bin_after"
      --label "before=Sluice $b_short (before)" --label "after=Sluice $a_short (after)"
      --quiet-wait "$quiet_wait" --out "$out" --workdir "$root/build-release/perf/compare-run")
[ "$install" = 1 ] || args+=(--no-install)
log "running perf/run-all.sh ${args[*]}"
"$here/run-all.sh" "${args[@]}"

{
  echo "Before: \`$b_short\`, after: \`$a_short\`$([ "$before" = "$after" ] && echo " (the same commit: the columns differ by run-to-run noise only)")."
  echo "Run of $(date -u +%Y-%m-%dT%H:%M:%SZ): \`perf/compare-revs.sh --warmup $warmup --duration $duration --readback-bytes $readback $1 $2\`;"
  echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every phase's CPU idle share and load are in latest.md."
  echo
  cat "$out/summary.md"
} >"$out/compare.md"
log "done: $out/compare.md (details: $out/latest.md)"
cat "$out/compare.md"
