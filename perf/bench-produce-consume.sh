#!/usr/bin/env bash
# The produce-consume benchmark: starts a fresh broker (Sluice, or Apache Kafka through
# tests/reference/kafka-ref.sh, or both one after the other) on a free loopback port with
# a fresh data directory, produces N records (default 10,000,000 of 100 bytes, acks=1,
# linger.ms=5) to an 8-partition topic with sluice-perf, consumes them all back from the
# beginning, and prints records/s, MB/s, the p50/p99/p99.9 produce latency and the
# broker's flush mode. With --target both it also prints Sluice/Kafka ratios measured in
# the same run. It stops every process it started and deletes the data it wrote (unless
# --keep). Exit 77 (skipped) when the broker or the Kafka reference script is missing.
#
# usage: bench-produce-consume.sh [--target sluice|kafka|both] [--broker PATH]
#          [--perf PATH] [--kafka-ref PATH] [--workdir DIR] [--records N]
#          [--record-size B] [--partitions P] [--acks 0|1|all] [--linger-ms MS]
#          [--compression C] [--keep] [-- extra sluice-perf produce options]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

target=sluice
broker="$root/build/dataplane/sluice-broker"
perf="$root/build/perf/sluice-perf"
kafka_ref="$root/tests/reference/kafka-ref.sh"
workdir="$root/build/perf/bench-data"
records=10000000
record_size=100
partitions=8
acks=1
linger_ms=5
compression=none
keep=0
topic=bench-produce-consume
extra=()

die() { echo "bench: $*" >&2; exit 2; }
skip() { echo "bench: SKIP: $*" >&2; exit 77; }

while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --broker) broker=$2; shift 2 ;;
    --perf) perf=$2; shift 2 ;;
    --kafka-ref) kafka_ref=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --record-size) record_size=$2; shift 2 ;;
    --partitions) partitions=$2; shift 2 ;;
    --acks) acks=$2; shift 2 ;;
    --linger-ms) linger_ms=$2; shift 2 ;;
    --compression) compression=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

case "$target" in sluice|kafka|both) ;; *) die "--target must be sluice, kafka or both" ;; esac
[ -x "$perf" ] || die "sluice-perf not found at $perf (build it: ninja -C build)"
[ -n "$workdir" ] && [ "$workdir" != / ] || die "bad --workdir"
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)

# A free loopback port whose successor is free too (kafka-ref.sh puts Kafka's controller
# listener on PORT+1): probe from a random start in a range outside the ephemeral ports.
free_port() {
  local p=$((20000 + RANDOM % 10000))
  while port_open "$p" || port_open $((p + 1)); do p=$((p + 2)); done
  echo "$p"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

broker_pid=""
kafka_dir=""
current_dir=""

stop_broker() {
  if [ -n "$broker_pid" ]; then
    kill -TERM "$broker_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$broker_pid" 2>/dev/null; then
      echo "bench: broker ignored SIGTERM for 30 s; killing it" >&2
      kill -KILL "$broker_pid" 2>/dev/null || true
    fi
    wait "$broker_pid" 2>/dev/null || true
    broker_pid=""
  fi
  if [ -n "$kafka_dir" ]; then
    "$kafka_ref" stop "$kafka_dir" >/dev/null 2>&1 || true
    kafka_dir=""
  fi
  if [ -n "$current_dir" ] && [ "$keep" = 0 ]; then
    rm -rf "$current_dir/data"
  fi
  current_dir=""
}
trap stop_broker EXIT
trap 'exit 130' INT TERM

wait_port() { # port pid-or-empty log
  local port=$1 pid=$2 log=$3
  for _ in $(seq 1 600); do
    port_open "$port" && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "bench: broker exited during start-up; last lines of $log:" >&2
      tail -n 20 "$log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  echo "bench: broker not listening on port $port after 60 s; last lines of $log:" >&2
  tail -n 20 "$log" >&2 || true
  return 1
}

start_sluice() { # dir port
  local dir=$1 port=$2
  [ -x "$broker" ] || skip "sluice-broker not built yet ($broker)"
  cat >"$dir/server.properties" <<EOF
listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$dir/data
num.partitions=$partitions
auto.create.topics.enable=true
EOF
  "$broker" "$dir/server.properties" >"$dir/broker.log" 2>&1 &
  broker_pid=$!
  wait_port "$port" "$broker_pid" "$dir/broker.log"
  flush_mode=${SLUICE_FLUSH_MODE:-"broker default: no fsync per write, O_DIRECT writes acknowledged after write completion"}
}

start_kafka() { # dir port
  local dir=$1 port=$2
  [ -x "$kafka_ref" ] || skip "Kafka reference script not found ($kafka_ref)"
  kafka_dir="$dir/data"
  "$kafka_ref" start "$port" "$kafka_dir" "num.partitions=$partitions" \
    auto.create.topics.enable=true >"$dir/broker.log" 2>&1 ||
    { tail -n 20 "$dir/broker.log" >&2; die "kafka-ref.sh start failed"; }
  wait_port "$port" "" "$dir/broker.log"
  flush_mode="Kafka default: no fsync per write (log.flush.interval.* unset), acknowledged after the page-cache append"
}

# Runs the workload against one target and leaves produce.json / consume.json in its dir.
run_target() {
  local t=$1 dir="$workdir/$1" port
  mkdir -p "$dir"
  rm -rf "$dir/data" "$dir/produce.json" "$dir/consume.json"
  mkdir -p "$dir/data"
  current_dir=$dir
  port=$(free_port)
  echo "== $t: broker on 127.0.0.1:$port, data in $dir/data"
  if [ "$t" = sluice ]; then start_sluice "$dir" "$port"; else start_kafka "$dir" "$port"; fi
  echo "flush mode: $flush_mode"
  echo "$flush_mode" >"$dir/flush-mode.txt"
  local common=(-b "127.0.0.1:$port" -t "$topic" -p "$partitions")
  "$perf" produce "${common[@]}" -n "$records" -s "$record_size" \
    --acks "$acks" --linger-ms "$linger_ms" --compression "$compression" --interval 5 \
    --json "$dir/produce.json" "${extra[@]}"
  "$perf" consume "${common[@]}" -n "$records" --interval 5 --json "$dir/consume.json"
  stop_broker
}

# One summary line per target, and ratios when both ran; read from the JSON files.
summarize() {
  command -v python3 >/dev/null 2>&1 || { echo "bench: python3 missing, no summary table"; return 0; }
  python3 - "$workdir" "$@" <<'EOF'
import json, os, sys
workdir, targets = sys.argv[1], sys.argv[2:]
rows = {}
for t in targets:
    d = os.path.join(workdir, t)
    p = json.load(open(os.path.join(d, "produce.json")))
    c = json.load(open(os.path.join(d, "consume.json")))
    flush = open(os.path.join(d, "flush-mode.txt")).read().strip()
    rows[t] = (p, c, flush)
cfg = rows[targets[0]][0]["config"]
print("\n== produce-consume: %d records x %d B, %d partitions, acks=%s, linger.ms=%d, compression=%s"
      % (cfg["records"], cfg["record_size"], cfg["partitions"], cfg["acks"], cfg["linger_ms"],
         cfg["compression"]))
print("%-7s %14s %10s %14s %10s %10s %10s %10s" % ("target", "produce rec/s", "MB/s",
      "consume rec/s", "MB/s", "p50 ms", "p99 ms", "p99.9 ms"))
for t, (p, c, flush) in rows.items():
    pp, cc, lat = p["produce"], c["consume"], p["produce"].get("latency_us", {})
    print("%-7s %14.0f %10.2f %14.0f %10.2f %10.3f %10.3f %10.3f" % (t, pp["records_per_s"],
          pp["mb_per_s"], cc["records_per_s"], cc["mb_per_s"], lat.get("p50", 0) / 1e3,
          lat.get("p99", 0) / 1e3, lat.get("p99_9", 0) / 1e3))
for t, (p, c, flush) in rows.items():
    print("%-7s flush mode: %s; produce errors %d, consume errors %d"
          % (t, flush, p["produce"]["errors"], c["consume"]["errors"]))
if "sluice" in rows and "kafka" in rows:
    s, k = rows["sluice"], rows["kafka"]
    def ratio(a, b):
        return a / b if b else float("nan")
    print("ratio sluice/kafka: produce rec/s %.2fx, consume rec/s %.2fx, p99 latency %.2fx"
          % (ratio(s[0]["produce"]["records_per_s"], k[0]["produce"]["records_per_s"]),
             ratio(s[1]["consume"]["records_per_s"], k[1]["consume"]["records_per_s"]),
             ratio(s[0]["produce"]["latency_us"]["p99"], k[0]["produce"]["latency_us"]["p99"])))
EOF
}

echo "bench: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, kernel $(uname -r)"
case "$target" in
  both) run_target sluice; run_target kafka; summarize sluice kafka ;;
  *) run_target "$target"; summarize "$target" ;;
esac
