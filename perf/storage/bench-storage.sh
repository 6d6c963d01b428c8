#!/usr/bin/env bash
# Storage-core append throughput against fio's sequential O_DIRECT write on the
# same directory, in the same run: fio and the storage core take turns
# (SLUICE_BENCH_ROUNDS rounds, default 3, the order swapped every round, so
# the disk's drift hits both alike); prints every round, the medians and the
# ratio of the medians (goal >= 0.8).
# usage: bench-storage.sh [BENCH_BINARY] [DIR]   (DIR defaults to a fresh
# directory under ./build-bench-storage, on the disk the project lives on)
# Sizes: SLUICE_BENCH_BYTES (default 2 GiB). Needs fio (apt-get install fio).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build-release/perf/storage/bench-storage}
dir=${2:-$here/../../build-bench-storage}
bytes=${SLUICE_BENCH_BYTES:-$((2 << 30))}
rounds=${SLUICE_BENCH_ROUNDS:-3}
[ -x "$bin" ] || { echo "bench-storage not built: $bin" >&2; exit 77; }
command -v fio >/dev/null || { echo "fio not installed (apt-get install fio)" >&2; exit 77; }
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, kernel $(uname -r); dir $dir ($(df -h "$dir" | awk 'NR==2{print $1}'))"
mb() { python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print("%.1f" % (j["jobs"][0]["write"]["bw_bytes"]/1e6 if "jobs" in j else j["mb_per_s"]))'; }
run_fio() {
  fio --name=seq --directory="$dir" --rw=write --bs=1M --direct=1 --ioengine=io_uring \
    --iodepth=4 --size="$bytes" --end_fsync=0 --output-format=json 2>/dev/null | mb
  rm -f "$dir"/seq*
}
run_sluice() {
  "$bin" "$dir/sluice" --bytes "$bytes" "$@" | mb
  rm -rf "$dir/sluice"
}
fios=() sls=()
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then f=$(run_fio); s=$(run_sluice); else s=$(run_sluice); f=$(run_fio); fi
  fios+=("$f"); sls+=("$s")
  echo "round $((r + 1)): fio ${f} MB/s, sluice ${s} MB/s"
done
slf=$("$bin" "$dir/sluice-fsync" --bytes $((bytes / 4)) --fsync | mb)
rm -rf "$dir/sluice-fsync"
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
fm=$(median "${fios[@]}"); sm=$(median "${sls[@]}")
echo "fio sequential O_DIRECT write, 1 MiB blocks, iodepth 4 (median of $rounds): ${fm} MB/s"
echo "sluice storage core append (60 KiB batches of 100-byte records, group commit every 16 appends, at most 64 batches unacknowledged, no fsync; median of $rounds): ${sm} MB/s"
echo "sluice storage core append with fdatasync per group commit: ${slf} MB/s"
python3 -c "print('ratio sluice/fio: %.2f (goal >= 0.80)' % ($sm / $fm))"
