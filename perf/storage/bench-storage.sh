#!/usr/bin/env bash
# Storage-core append throughput against fio's sequential O_DIRECT write on the
# same directory, in the same run: prints both and the ratio (goal >= 0.8).
# usage: bench-storage.sh [BENCH_BINARY] [DIR]   (DIR defaults to a fresh
# directory under ./build-bench-storage, on the disk the project lives on)
# Sizes: SLUICE_BENCH_BYTES (default 2 GiB). Needs fio (apt-get install fio).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build-release/perf/storage/bench-storage}
dir=${2:-$here/../../build-bench-storage}
bytes=${SLUICE_BENCH_BYTES:-$((2 << 30))}
[ -x "$bin" ] || { echo "bench-storage not built: $bin" >&2; exit 77; }
command -v fio >/dev/null || { echo "fio not installed (apt-get install fio)" >&2; exit 77; }
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, kernel $(uname -r); dir $dir ($(df -h "$dir" | awk 'NR==2{print $1}'))"
fio_json=$(fio --name=seq --directory="$dir" --rw=write --bs=1M --direct=1 --ioengine=io_uring \
  --iodepth=4 --size="$bytes" --end_fsync=0 --output-format=json 2>/dev/null)
fio_mb=$(python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print("%.1f" % (j["jobs"][0]["write"]["bw_bytes"]/1e6))' <<<"$fio_json")
rm -f "$dir"/seq*
sl=$("$bin" "$dir/sluice" --bytes "$bytes")
sl_mb=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["mb_per_s"])' <<<"$sl")
rm -rf "$dir/sluice"
slf=$("$bin" "$dir/sluice-fsync" --bytes $((bytes / 4)) --fsync)
slf_mb=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["mb_per_s"])' <<<"$slf")
echo "fio sequential O_DIRECT write, 1 MiB blocks, iodepth 4: ${fio_mb} MB/s"
echo "sluice storage core append (64 KiB batches of 100-byte records, 16 per group commit, no fsync): ${sl_mb} MB/s"
echo "sluice storage core append with fdatasync per group commit: ${slf_mb} MB/s"
python3 -c "print('ratio sluice/fio: %.2f (goal >= 0.80)' % ($sl_mb / $fio_mb))"
