#!/usr/bin/env bash
# The side-by-side benchmark (issue 3): on this machine, installs and starts each peer on
# loopback with a fresh data directory on one disk, runs the same workloads against each
# in one run, and writes perf/results/latest.md, latest.json and PNG charts.
#
# Peers: Sluice (single node, default flush: ack after the O_DIRECT write, no fsync);
# sluice-fsync (the same with log.flush.interval.messages=1: fdatasync per group commit,
# workload 2 only); Apache Kafka 4.4.0 (kafka-ref.sh's default) in KRaft mode from Maven Central jars
# (tests/reference/kafka-ref.sh) with the production heap and GC settings of Kafka's
# documentation and its default flush (page cache, no fsync); RabbitMQ from Debian
# (perf/rabbitmq-ref.sh) with durable streams and publisher confirms, driven by
# perf/amqp-perf (librabbitmq); and perf/null-sink, which acks produce requests without
# storing anything (the ceiling of client + loopback). Kafka-protocol peers are driven by
# perf/sluice-perf (librdkafka), the same client for all of them.
#
# Workloads (sizes at --scale full; the issue's sizes and why they were scaled are in
# perf/README.md and printed into latest.md):
#   1 kafka-2014   1 producer, 100 B, 6 partitions, acks=1, max rate; then 1 consumer
#   2 omb          1 KiB, 1 topic x 100 partitions, 4 producers, 4 consumers, acks=all,
#                  e2e at max rate, then at 50% of each peer's own max
#   3 web          367 topics x 2 partitions, random keys, 100 B, 172,000 records/s,
#                  5.5 consumer groups per topic on average, e2e; does each peer hold it?
#                  Then a tenth of the rate, for latency where it can be held
#   4 backlog      GB of 1 KiB records written (8 partitions), page cache dropped, then
#                  read from the start by one bulk consumer
#   readback       1 GB of 1 KiB records (8 partitions, acks=1) written, then read back at
#                  once by one consumer (page cache warm): MB/s and the broker's page faults
#   alloc          Sluice peers only, broker started with perf/alloc-count preloaded:
#                  100 B records (6 partitions, acks=1) produced, then read back; the
#                  allocations per Produce and per Fetch request between two dumps taken
#                  after a warm-up (requests counted by the client's librdkafka statistics)
#   rf3            replication: peers sluice and kafka only, each a cluster on this
#                  machine, 3 brokers + 3 controllers (Sluice: deploy/local-cluster.sh;
#                  Kafka 4.x KRaft: perf/cluster-failover.sh kafka-up), 1 topic x 100
#                  partitions, replication factor 3, 1 KiB records, acks=all, 4 producers:
#                  maximum producer rate (no consumers), then end-to-end latency at 50% of
#                  each peer's own maximum with 4 consumers, and at one fixed rate for all
#                  (--rf3-rate, default 10,000 records/s); --rf3-rounds rounds (default
#                  2), each running every peer in turn (interleaved), fresh clusters each
#
# Every phase also records the broker process's CPU time (utime + stime of all its
# threads, from /proc/PID/stat; Kafka: the JVM; RabbitMQ: the Erlang VM) and its minor and
# major page faults over the phase; report.py divides the CPU time by the records.
#
# usage: perf/run-all.sh [--scale quick|full] [--peers "sluice kafka rabbitmq null
#          sluice-fsync"] [--workloads "1 2 3 4 readback alloc"] [--out DIR] [--workdir DIR]
#          [--membership group|assign] [--quiet-wait S] [--no-install] [--no-build]
#          [--keep] [--warmup S] [--duration S] [--readback-bytes B]
#          [--sluice NAME=BROKER-BINARY]... [--label NAME=TEXT]...
#          [--ports BASE] [--rf3-rounds N] [--rf3-rate R]
# --sluice NAME=PATH adds a peer NAME that runs Sluice from another binary, configured as
# the sluice peer (perf/compare-revs.sh uses it to run two revisions side by side);
# --label NAME=TEXT is the version string reported for peer NAME;
# --warmup, --duration, --readback-bytes override the scale's sizes.
# --ports BASE: every port the run listens on from BASE up (rf3: Sluice's cluster BASE..
# and BASE+100.., Kafka's BASE+200.. and BASE+300..; single-node peers from BASE+400);
# default: rf3 clusters at 36000 and 36200, single-node peers on random free ports
# between 20000 and 30000.
# --membership group (default): Kafka-protocol consumers are real consumer-group members
# (subscribe, the group's assignor, auto-commit); assign: direct partition assignment, for
# a broker without consumer groups. RabbitMQ's stream consumers are always assigned their
# streams directly (AMQP 0-9-1 has no consumer groups over streams).
# --quiet-wait S (default 30): before each peer's turn at a workload, wait up to S seconds
# (and 180 s over the whole run) for the machine's CPUs to be at least 70% idle over one
# second, so that other work on a shared machine disturbs the figures less; the idle share
# seen before every phase is kept with the results and printed in latest.md.
# Every process it starts is stopped on exit (also on ^C); data directories are deleted
# unless --keep. Needs root for apt-get and for dropping the page cache (without root the
# backlog drain runs warm and says so). Sluice is restarted before the drain, so its own
# extent cache is cold too.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build-release"
scale=full
peers="sluice kafka rabbitmq null sluice-fsync"
workloads="1 2 3 4 readback alloc rf3"
ports_base=""
rf3_rounds=""
RF3_RATE=10000
declare -A sluice_bin=() sluice_label=() sluice_conf=()
sluice_extra=()
opt_warmup="" opt_duration="" opt_readback=""
out="$here/results"
workdir="$build/perf/run-all"
install=1
do_build=1
keep=0
quiet_wait=30
membership=group
quiet_budget=180

die() { echo "run-all: $*" >&2; exit 2; }
log() { echo "run-all: [$(date +%H:%M:%S)] $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --scale) scale=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    --no-build) do_build=0; shift ;;
    --keep) keep=1; shift ;;
    --quiet-wait) quiet_wait=$2; shift 2 ;;
    --membership) membership=$2; shift 2 ;;
    --warmup) opt_warmup=$2; shift 2 ;;
    --duration) opt_duration=$2; shift 2 ;;
    --readback-bytes) opt_readback=$2; shift 2 ;;
    --ports) ports_base=$2; shift 2 ;;
    --rf3-rounds) rf3_rounds=$2; shift 2 ;;
    --rf3-rate) RF3_RATE=$2; shift 2 ;;
    --sluice)
      [[ $2 == *=* ]] || die "--sluice needs NAME=BROKER-BINARY"
      sluice_extra+=("$2"); shift 2 ;;
    --label)
      [[ $2 == *=* ]] || die "--label needs NAME=TEXT"
      sluice_label[${2%%=*}]=${2#*=}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# ------------------------------------------------------------------ sizes
# full: what fits in about 20 minutes on the 2-core machine; quick: a smoke run.
case "$membership" in group|assign) ;; *) die "--membership must be group or assign" ;; esac
case "$scale" in
  full)
    WARMUP=5; DURATION=20; TAIL=10
    W3_RATE=172000; W3_LOW_RATE=17200
    W4_BYTES=$((2 * 1000 * 1000 * 1000))
    ALLOC_WARM=3; ALLOC_MEASURE=10
    RF3_ROUNDS=2 RF3_WARMUP=15 ;;
  quick)
    WARMUP=2; DURATION=5; TAIL=5
    W3_RATE=172000; W3_LOW_RATE=0
    W4_BYTES=$((200 * 1000 * 1000))
    ALLOC_WARM=2; ALLOC_MEASURE=3
    RF3_ROUNDS=1 RF3_WARMUP=5 ;;
  *) die "--scale must be quick or full" ;;
esac
RB_BYTES=$((1000 * 1000 * 1000))
[ -n "$opt_warmup" ] && WARMUP=$opt_warmup
[ -n "$opt_duration" ] && DURATION=$opt_duration
[ -n "$opt_readback" ] && RB_BYTES=$opt_readback
[ -n "$rf3_rounds" ] && RF3_ROUNDS=$rf3_rounds
[[ $RF3_ROUNDS =~ ^[1-9][0-9]?$ ]] || die "--rf3-rounds must be 1..99"
[[ $RF3_RATE =~ ^[0-9]+$ ]] || die "--rf3-rate must be records/s (0: no fixed-rate phase)"
if [ -n "$ports_base" ]; then
  [[ $ports_base =~ ^[0-9]+$ ]] && [ "$ports_base" -ge 1024 ] && [ "$ports_base" -le 64000 ] ||
    die "--ports must be a port from 1024 to 64000"
  RF3_SLUICE_PORT=$ports_base RF3_KAFKA_PORT=$((ports_base + 200))
else
  RF3_SLUICE_PORT=36000 RF3_KAFKA_PORT=36200
fi
# Each producer's queue in librdkafka (queue.buffering.max.messages; its default, 100,000
# records = 100 MB of 1 KiB records, would hold seconds of a slow cluster's traffic, and
# the maximum rate would count warm-up records acknowledged late). 10,000 records = 10 MB
# per producer, 40 MB over the four.
RF3_QUEUE=10000
W4_RECORDS=$((W4_BYTES / 1024))
RB_RECORDS=$((RB_BYTES / 1024))

# ------------------------------------------------------------------ set-up
install_deps() {
  log "installing what the harness needs (Debian packages, Kafka jars, matplotlib)"
  "$root/deploy/install-deps.sh" librdkafka-dev librabbitmq-dev rabbitmq-server maven kcat \
    python3 python3-venv >&2
  command -v java >/dev/null || "$root/deploy/install-deps.sh" default-jre-headless >&2
  "$root/tests/reference/kafka-ref.sh" install >&2
  "$here/rabbitmq-ref.sh" install >&2
}

venv="${SLUICE_CACHE:-$HOME/.cache/sluice}/perf-venv"
setup_venv() {
  if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    log "creating $venv with matplotlib from PyPI"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q matplotlib >&2
  fi
}

build_tools() {
  log "building sluice-broker and the perf tools (release, assertions on)"
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$root" --buildtype=release -Db_ndebug=false >&2
  fi
  # Only the targets the benchmark runs: an unrelated test that does not build does not
  # stop a benchmark of the broker.
  local targets=(dataplane/sluice-broker perf/sluice-perf perf/null-sink perf/liballoc-count.so)
  [[ " $workloads " == *" rf3 "* ]] && targets+=(control/sluice-controller)
  [[ " $peers " == *" rabbitmq "* ]] && targets+=(perf/amqp-perf)
  ninja -C "$build" "${targets[@]}" >&2
}

[ "$install" = 1 ] && install_deps
setup_venv
[ "$do_build" = 1 ] && build_tools
broker="$build/dataplane/sluice-broker"
sperf="$build/perf/sluice-perf"
aperf="$build/perf/amqp-perf"
nsink="$build/perf/null-sink"
alloc_lib="$build/perf/liballoc-count.so"
for f in "$broker" "$sperf" "$nsink"; do [ -x "$f" ] || die "missing $f"; done
[[ " $peers " != *" rabbitmq "* ]] || [ -x "$aperf" ] || die "missing $aperf"
[[ " $workloads " != *" alloc "* ]] || [ -f "$alloc_lib" ] || die "missing $alloc_lib"

# The Sluice family: peers that run a Sluice broker binary with Sluice's configuration.
sluice_bin[sluice]=$broker sluice_bin[sluice-fsync]=$broker
for kv in "${sluice_extra[@]}"; do
  name=${kv%%=*}
  bin=$(cd "$(dirname "${kv#*=}")" && pwd)/$(basename "${kv#*=}")
  [ -x "$bin" ] || die "--sluice $name: $bin is not an executable"
  sluice_bin[$name]=$bin
  # A binary built from another revision's tree runs with that tree's configuration.
  conf="$(dirname "$bin")/../../deploy/single-node.properties"
  [ -f "$conf" ] && sluice_conf[$name]=$(cd "$(dirname "$conf")" && pwd)/single-node.properties
done
is_sluice() { [ -n "${sluice_bin[$1]:-}" ]; }

mkdir -p "$workdir" "$out"
workdir=$(cd "$workdir" && pwd)
out=$(cd "$out" && pwd)
raw="$out/raw"
rm -rf "$raw"
mkdir -p "$raw"

# ------------------------------------------------------------------ peers
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A free loopback port with its next two free as well (Kafka's controller, RabbitMQ's
# distribution port and epmd use PORT+1 and PORT+2), outside the ephemeral range.
free_port() {
  local p=$((20000 + RANDOM % 10000))
  [ -n "$ports_base" ] && p=$((ports_base + 400))
  while port_open "$p" || port_open $((p + 1)) || port_open $((p + 2)); do p=$((p + 3)); done
  echo "$p"
}

cur_peer="" cur_dir="" cur_pid="" cur_bpid="" preload=""

wait_port() { # port pid log
  local i
  for i in $(seq 1 600); do
    port_open "$1" && return 0
    if [ -n "$2" ] && ! kill -0 "$2" 2>/dev/null; then
      tail -n 20 "$3" >&2; return 1
    fi
    sleep 0.1
  done
  tail -n 20 "$3" >&2
  return 1
}

# peer_start PEER DIR PORT PARTITIONS: a fresh server; sets cur_*.
peer_start() {
  local peer=$1 dir=$2 port=$3 parts=$4
  rm -rf "$dir"
  mkdir -p "$dir"
  cur_peer=$peer cur_dir=$dir cur_pid="" cur_bpid=""
  if is_sluice "$peer"; then
    local extra=()
    [ "$peer" = sluice-fsync ] && extra=(--override log.flush.interval.messages=1)
    sluice_cmd=("${sluice_bin[$peer]}" "${sluice_conf[$peer]:-$root/deploy/single-node.properties}"
      --override "log.dirs=$dir/data"
      --override "listeners=PLAINTEXT://127.0.0.1:$port"
      --override "advertised.listeners=PLAINTEXT://127.0.0.1:$port"
      --override "num.partitions=$parts" --override group.initial.rebalance.delay.ms=0
      "${extra[@]}")
    if [ -n "$preload" ]; then
      # The alloc workload: every allocation call of the broker counted by thread class.
      LD_PRELOAD=$alloc_lib SLUICE_ALLOC_COUNT_FILE=$dir/alloc-count.txt \
        "${sluice_cmd[@]}" >>"$dir/server.log" 2>&1 &
    else
      "${sluice_cmd[@]}" >>"$dir/server.log" 2>&1 &
    fi
    cur_pid=$! cur_bpid=$!
    cur_port=$port
    wait_port "$port" "$cur_pid" "$dir/server.log"
    return
  fi
  case "$peer" in
    kafka)
      # Kafka's documented production JVM settings (heap 6 GB, G1 tuned for short pauses);
      # the broker's own defaults for threads and flushing (no fsync per write).
      KAFKA_HEAP="-Xmx6g -Xms6g -XX:MetaspaceSize=96m -XX:MaxGCPauseMillis=20 \
-XX:InitiatingHeapOccupancyPercent=35 -XX:G1HeapRegionSize=16M \
-XX:MinMetaspaceFreeRatio=50 -XX:MaxMetaspaceFreeRatio=80" \
        "$root/tests/reference/kafka-ref.sh" start "$port" "$dir/data" "num.partitions=$parts" \
        num.network.threads=3 num.io.threads=8 >"$dir/server.log" 2>&1 || return 1
      cur_bpid=$(cat "$dir/data/kafka.pid") ;;
    rabbitmq)
      "$here/rabbitmq-ref.sh" start "$port" "$dir/data" >"$dir/server.log" 2>&1 || return 1
      cur_bpid=$(cat "$dir/data/rabbitmq.pid" 2>/dev/null || true) ;;
    null)
      "$nsink" --port "$port" --partitions "$parts" >"$dir/server.log" 2>&1 &
      cur_pid=$! cur_bpid=$!
      wait_port "$port" "$cur_pid" "$dir/server.log" ;;
  esac
}

peer_stop() {
  [ -n "$cur_peer" ] || return 0
  case "$cur_peer" in
    rf3-sluice) "$root/deploy/local-cluster.sh" down "$cur_dir/cluster" >/dev/null 2>&1 || true ;;
    rf3-kafka) "$here/cluster-failover.sh" kafka-down "$cur_dir/cluster" >/dev/null 2>&1 || true ;;
    kafka) "$root/tests/reference/kafka-ref.sh" stop "$cur_dir/data" >/dev/null 2>&1 || true ;;
    rabbitmq) "$here/rabbitmq-ref.sh" stop "$cur_dir/data" >/dev/null 2>&1 || true ;;
    *)
      if [ -n "$cur_pid" ]; then
        kill -TERM "$cur_pid" 2>/dev/null || true
        local i
        for i in $(seq 1 300); do kill -0 "$cur_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$cur_pid" 2>/dev/null || true
        wait "$cur_pid" 2>/dev/null || true
      fi ;;
  esac
  [ "$keep" = 1 ] || rm -rf "$cur_dir/data" "$cur_dir/cluster"
  cur_peer="" cur_dir="" cur_pid="" cur_bpid=""
}
# Sluice keeps its own cache of segment extents (O_DIRECT bypasses the page cache), which
# dropping the page cache does not touch: for a cold read it is stopped cleanly and
# started again on the same data.
sluice_restart() {
  kill -TERM "$cur_pid" 2>/dev/null || true
  local i
  for i in $(seq 1 300); do kill -0 "$cur_pid" 2>/dev/null || break; sleep 0.1; done
  wait "$cur_pid" 2>/dev/null || true
  "${sluice_cmd[@]}" >>"$cur_dir/server.log" 2>&1 &
  cur_pid=$! cur_bpid=$!
  wait_port "$cur_port" "$cur_pid" "$cur_dir/server.log"
}
trap peer_stop EXIT
trap 'exit 130' INT TERM

# Taken once, when the broker was built: the tree may move on during the run.
sluice_v=$(sed -n "s/^ *version: '\([^']*\)'.*/\1/p" "$root/meson.build" | head -1)
sluice_rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
sluice_commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
sluice_dirty=$( { git -C "$root" status --porcelain --untracked-files=no 2>/dev/null |
    awk '{print $2}'
  git -C "$root" status --porcelain --untracked-files=all -- perf 2>/dev/null |
    awk '$1 == "??" && $2 !~ /^perf\/results\// {print $2}'; } | sort -u | tr '\n' ' ')
sluice_version() { echo "Sluice $sluice_v ($sluice_rev)"; }

peer_version() {
  if [ -n "${sluice_label[$1]:-}" ]; then echo "${sluice_label[$1]}"; return; fi
  case "$1" in
    sluice|sluice-fsync) sluice_version ;;
    kafka) "$root/tests/reference/kafka-ref.sh" version 2>/dev/null | sed 's/ (.*//' ;;
    rabbitmq) "$here/rabbitmq-ref.sh" version ;;
    null) echo "null-sink ($sluice_rev)" ;;
    *) is_sluice "$1" && echo "Sluice from ${sluice_bin[$1]}" ;;
  esac
}

peer_flush() {
  case "$1" in
    sluice) echo "ack after O_DIRECT write completes, no fsync" ;;
    sluice-fsync) echo "fdatasync per group commit (log.flush.interval.messages=1)" ;;
    kafka) echo "page cache, no fsync (log.flush.interval.* unset)" ;;
    rabbitmq) echo "durable stream, confirm after the write, no fsync per message" ;;
    null) echo "stores nothing" ;;
    *) is_sluice "$1" && echo "ack after O_DIRECT write completes, no fsync" ;;
  esac
}

peer_config() {
  case "$1" in
    sluice|sluice-fsync) echo "deploy/single-node.properties: 1 network core, 1 storage core; group.initial.rebalance.delay.ms=0 (as kafka-ref.sh sets for Kafka); consumers: $membership" ;;
    kafka) echo "KRaft combined node, -Xmx6g -Xms6g G1 (MaxGCPauseMillis=20), 3 network + 8 I/O threads; consumers: $membership" ;;
    rabbitmq) echo "one node, one durable stream per partition over AMQP 0-9-1, publisher confirms (window 8192), prefetch 2000 per stream within 20000 per connection; consumers: streams assigned directly" ;;
    null) echo "thread per connection" ;;
    *) is_sluice "$1" && echo "${sluice_bin[$1]} with ${sluice_conf[$1]:-deploy/single-node.properties}: 1 network core, 1 storage core; consumers: $membership" ;;
  esac
}

# The share of CPU time the machine spent idle over the last second, in percent.
cpu_idle_pct() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( total > 0 ? 100 * (b[4] - a[4] + b[5] - a[5]) / total : 0 ))
}

# Waits (up to --quiet-wait seconds) for a mostly idle machine; echoes the idle share.
wait_quiet() {
  local wait=$quiet_wait idle t0=$SECONDS
  [ "$wait" -le "$quiet_budget" ] || wait=$quiet_budget
  local deadline=$((SECONDS + wait))
  idle=$(cpu_idle_pct)
  while [ "$idle" -lt 70 ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 4
    idle=$(cpu_idle_pct)
  done
  echo "$idle $((SECONDS - t0))"
}

# ------------------------------------------------------------------ running one phase
# The broker process's CPU time (clock ticks, utime + stime: every thread, live or gone)
# and its minor and major page faults, from /proc/PID/stat; "0 0 0" without a broker.
# A cluster (rf3) has several broker PIDs in cur_bpid: their sum (controllers not counted).
broker_sample() {
  local st pid cpu=0 minflt=0 majflt=0
  for pid in $cur_bpid; do
    st=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    # Fields after the ')' closing the command name: 3 state ... 10 minflt, 12 majflt,
    # 14 utime, 15 stime (proc(5)); the name itself may hold spaces.
    set -- ${st##*) }
    cpu=$((cpu + ${12} + ${13})) minflt=$((minflt + ${8})) majflt=$((majflt + ${10}))
  done
  echo "$cpu $minflt $majflt"
}
clk_tck=$(getconf CLK_TCK)

# phase WL PEER NAME TOOL-ARGS...: runs the peer's client with --json, keeps its output,
# and records the exit status and the machine's load in the phase's meta file.
phase() {
  local wl=$1 peer=$2 name=$3; shift 3
  local dir="$raw/$wl/$peer" tool
  mkdir -p "$dir"
  local members=()
  if [ "$peer" = rabbitmq ]; then
    tool=$aperf
  else
    tool=$sperf
    members=(--membership "$membership")
  fi
  local load idle
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  idle=$(cpu_idle_pct)
  log "workload $wl, $peer: $name (load $load, CPU idle ${idle}% just before)"
  local t0=$SECONDS rc=0 b0 b1 dumps0=0 dumps1=0 sampler=""
  local dumpf="$cur_dir/alloc-count.txt"
  b0=($(broker_sample))
  if [ -n "$preload" ]; then
    # Two dumps of the allocation counters: after the warm-up and after the window.
    dumps0=$(grep -c '^dump' "$dumpf" 2>/dev/null || true)
    (sleep "${alloc_warm_now:-$ALLOC_WARM}"; kill -USR2 "$cur_bpid"; sleep "$ALLOC_MEASURE"; kill -USR2 "$cur_bpid") &
    sampler=$!
  fi
  "$tool" "$@" "${members[@]}" -b "$addr" --interval 1 --json "$dir/$name.json" \
    >"$dir/$name.log" 2>&1 || rc=$?
  b1=($(broker_sample))
  if [ -n "$sampler" ]; then
    if kill -0 "$sampler" 2>/dev/null; then
      # The client finished inside the window: it ends here (the dump marks the end).
      kill "$sampler" 2>/dev/null || true
      wait "$sampler" 2>/dev/null || true
      kill -USR2 "$cur_bpid" 2>/dev/null || true
    fi
    wait "$sampler" 2>/dev/null || true
    sleep 0.2
    dumps1=$(grep -c '^dump' "$dumpf" 2>/dev/null || true)
    cp "$dumpf" "$dir/alloc-count.txt"
  fi
  grep -E '^(produce|consume|e2e)[: ]' "$dir/$name.log" | sed 's/^/    /' >&2 || true
  [ "$rc" = 0 ] || { log "  exit status $rc; last lines:"; tail -n 5 "$dir/$name.log" >&2; }
  printf '{"phase": "%s", "rc": %d, "wall_s": %d, "loadavg_before": "%s", "cpu_idle_before_pct": %d, "broker_pid": "%s", "broker_cpu_s": %.2f, "broker_minflt": %d, "broker_majflt": %d, "alloc_dumps": [%d, %d]}\n' \
    "$name" "$rc" $((SECONDS - t0)) "$load" "$idle" "$cur_bpid" \
    "$(echo "${b1[0]} ${b0[0]} $clk_tck" | awk '{printf "%.2f", ($1 - $2) / $3}')" \
    $((b1[1] - b0[1])) $((b1[2] - b0[2])) "$dumps0" "$dumps1" >"$dir/$name.meta.json"
}

json_get() { # file python-expression-on-d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}

drop_caches() {
  sync
  if [ "$(id -u)" = 0 ] && echo 1 >/proc/sys/vm/drop_caches 2>/dev/null; then
    echo cold
  else
    echo warm
  fi
}

# ------------------------------------------------------------------ the workloads
wl_1() { # kafka-2014
  local peer=$1
  phase 1 "$peer" produce produce -t w1 -p 6 --create -s 100 --acks 1 \
    --warmup "$WARMUP" -d "$DURATION"
  [ "$peer" = null ] && return 0
  local n; n=$(json_get "$raw/1/$peer/produce.json" 'd["delivered"]') || n=0
  if [ "$peer" = rabbitmq ]; then
    phase 1 "$peer" consume consume -t w1 -p 6 -n "$n" --timeout 20
  else
    phase 1 "$peer" consume consume -t w1 -p 6 --timeout 20
  fi
}

wl_2() { # omb
  local peer=$1 mode=e2e
  [ "$peer" = null ] && mode=produce
  local common=(-t w2 -p 100 --create -s 1024 --acks all --producers 4 --consumers 4
                --warmup "$WARMUP" -d "$DURATION" --tail "$TAIL")
  phase 2 "$peer" max "$mode" "${common[@]}"
  local r; r=$(json_get "$raw/2/$peer/max.json" 'int(d["produce"]["records_per_s"] / 2)') || r=0
  [ "${r:-0}" -gt 0 ] || { log "workload 2, $peer: no max rate measured; skipping 50%"; return 0; }
  phase 2 "$peer" half "$mode" "${common[@]}" --rate "$r"
}

wl_3() { # web activity tracking: the full rate, then (full scale) a tenth of it
  local peer=$1 mode=e2e
  [ "$peer" = null ] && mode=produce
  local common=(-t web --topics 367 -p 2 --create -s 100 --key random --acks 1
                --producers 2 --consumers 1 --groups 5.5 --warmup "$WARMUP" -d "$DURATION"
                --tail "$TAIL")
  phase 3 "$peer" rate "$mode" "${common[@]}" --rate "$W3_RATE"
  [ "$W3_LOW_RATE" -gt 0 ] || return 0
  phase 3 "$peer" low "$mode" "${common[@]}" --rate "$W3_LOW_RATE"
}

wl_4() { # backlog drain
  local peer=$1
  phase 4 "$peer" write produce -t backlog -p 8 --create -s 1024 --acks 1 -n "$W4_RECORDS"
  [ "$peer" = null ] && return 0
  case "$peer" in sluice|sluice-fsync) sluice_restart ;; esac
  local cache; cache=$(drop_caches)
  echo "$cache" >"$raw/4/$peer/cache.txt"
  local n; n=$(json_get "$raw/4/$peer/write.json" 'd["delivered"]') || n=0
  if [ "$peer" = rabbitmq ]; then
    phase 4 "$peer" drain consume -t backlog -p 8 -n "$n" --timeout 20
  else
    phase 4 "$peer" drain consume -t backlog -p 8 --timeout 20
  fi
}

wl_readback() { # 1 GB written, then read back at once (warm): MB/s and page faults
  local peer=$1
  phase readback "$peer" write produce -t readback -p 8 --create -s 1024 --acks 1 \
    -n "$RB_RECORDS"
  [ "$peer" = null ] && return 0
  local n; n=$(json_get "$raw/readback/$peer/write.json" 'd["delivered"]') || n=0
  if [ "$peer" = rabbitmq ]; then
    phase readback "$peer" read consume -t readback -p 8 -n "$n" --timeout 20
  else
    phase readback "$peer" read consume -t readback -p 8 --timeout 20
  fi
}

wl_alloc() { # Sluice only, alloc-count preloaded: allocations per Produce / Fetch request
  local peer=$1 d="$raw/alloc/$1"
  phase alloc "$peer" produce produce -t alloc -p 6 --create -s 100 --acks 1 \
    -d $((ALLOC_WARM + ALLOC_MEASURE + 1)) --stats "$d/produce.stats.jsonl"
  # The consumer reads faster than the producer wrote: its warm-up is 1 s (the group join).
  alloc_warm_now=1
  phase alloc "$peer" fetch consume -t alloc -p 6 --timeout 5 --stats "$d/fetch.stats.jsonl"
  alloc_warm_now=""
}

# ------------------------------------------------------------------ rf3: replication
# Both clusters keep their defaults for failure detection and replication (the same in
# both: broker.session.timeout.ms 9000, broker.heartbeat.interval.ms 2000,
# replica.lag.time.max.ms 30000, replica.fetch.wait.max.ms 500, min.insync.replicas 1),
# and their default flush (no fsync per write). Kafka's brokers: Kafka's documented G1
# settings with a 2 GB heap each (three share the machine), default 3 network and 8 I/O
# threads, 1 replica fetcher; its controllers -Xmx512m. Sluice's brokers: 1 network and 1
# storage core each (the defaults), no CPU pinning.
RF3_KAFKA_BROKER_HEAP="-Xmx2g -Xms2g -XX:MetaspaceSize=96m -XX:MaxGCPauseMillis=20 \
-XX:InitiatingHeapOccupancyPercent=35 -XX:G1HeapRegionSize=16M \
-XX:MinMetaspaceFreeRatio=50 -XX:MaxMetaspaceFreeRatio=80"

# rf3_start PEER DIR: a fresh 3+3 cluster of PEER under DIR/cluster; sets cur_* and addr.
rf3_start() {
  local peer=$1 dir=$2 cdir=$2/cluster
  rm -rf "$dir"
  mkdir -p "$dir"
  cur_peer=rf3-$peer cur_dir=$dir cur_pid="" cur_bpid=""
  case "$peer" in
    sluice)
      SLUICE_BROKER=$broker SLUICE_CONTROLLER=$build/control/sluice-controller \
        "$root/deploy/local-cluster.sh" up "$cdir" --base-port "$RF3_SLUICE_PORT" \
        --set-broker group.initial.rebalance.delay.ms=0 >"$dir/server.log" 2>&1 || return 1 ;;
    kafka)
      KAFKA_BROKER_HEAP=$RF3_KAFKA_BROKER_HEAP \
        KAFKA_BROKER_SET="num.network.threads=3 num.io.threads=8 group.initial.rebalance.delay.ms=0" \
        "$here/cluster-failover.sh" kafka-up "$cdir" "$RF3_KAFKA_PORT" >"$dir/server.log" 2>&1 || return 1 ;;
    *) return 1 ;;
  esac
  # shellcheck disable=SC1091
  addr=$(. "$cdir/cluster.env" && echo "$BOOTSTRAP")
  cur_bpid=$(. "$cdir/cluster.env" && echo "$PID_1 $PID_2 $PID_3")
}

rf3_config() {
  case "$1" in
    sluice) echo "3 brokers (sluice-broker: 1 network + 1 storage core each) + 3 sluice-controller, deploy/local-cluster.sh defaults: broker.session.timeout.ms 9000, replica.lag.time.max.ms 30000, replica.fetch.wait.max.ms 500, min.insync.replicas 1; consumers: $membership" ;;
    kafka) echo "3 brokers (-Xmx2g G1, 3 network + 8 I/O threads, 1 replica fetcher) + 3 controllers (-Xmx512m), KRaft, Kafka's defaults: broker.session.timeout.ms 9000, replica.lag.time.max.ms 30000, replica.fetch.wait.max.ms 500, min.insync.replicas 1; consumers: $membership" ;;
  esac
}

# wl_rf3 PEER ROUND: the maximum producer rate, then end-to-end latency at half of it.
wl_rf3() {
  local peer=$1 rnd=$2
  local common=(-t rf3 -p 100 --create --replication-factor 3 -s 1024 --acks all
                --producers 4 -d "$DURATION" --tail "$TAIL"
                -P "queue.buffering.max.messages=$RF3_QUEUE")
  # A fresh cluster's first seconds (Kafka's JIT above all) are not its maximum: the
  # first phase warms up longer.
  phase rf3 "$peer" "r$rnd-max" produce "${common[@]}" --warmup "$RF3_WARMUP"
  local r; r=$(json_get "$raw/rf3/$peer/r$rnd-max.json" 'int(d["produce"]["records_per_s"] / 2)') || r=0
  [ "${r:-0}" -gt 0 ] || { log "rf3 round $rnd, $peer: no max rate measured; skipping 50%"; return 0; }
  phase rf3 "$peer" "r$rnd-half" e2e "${common[@]}" --warmup "$WARMUP" --consumers 4 --rate "$r"
  # The same rate for every peer, one each can hold: latency not of an overloaded machine.
  [ "$RF3_RATE" -gt 0 ] || return 0
  phase rf3 "$peer" "r$rnd-fixed" e2e "${common[@]}" --warmup "$WARMUP" --consumers 4 --rate "$RF3_RATE"
}

# The rf3 workload: RF3_ROUNDS rounds, each starting a fresh cluster of every peer in
# turn, so that the machine's drift touches both alike.
run_rf3() {
  local rnd peer t0 idle waited
  preload=""
  for rnd in $(seq 1 "$RF3_ROUNDS"); do
    for peer in $peers; do
      case "$peer" in sluice|kafka) ;; *) continue ;; esac
      mkdir -p "$raw/rf3/$peer"
      if [ "$quiet_wait" -gt 0 ] && [ "$quiet_budget" -gt 0 ]; then
        read -r idle waited < <(wait_quiet)
        quiet_budget=$((quiet_budget - waited))
        [ "$idle" -ge 70 ] || log "rf3 round $rnd, $peer: CPUs only ${idle}% idle after ${waited} s of waiting; running anyway"
      fi
      t0=$SECONDS
      log "rf3 round $rnd: starting the $peer cluster (3 brokers + 3 controllers)"
      if ! rf3_start "$peer" "$workdir/rf3-$peer"; then
        log "rf3 round $rnd: the $peer cluster did not start; see $workdir/rf3-$peer/server.log"
        tail -n 20 "$workdir/rf3-$peer/server.log" >&2 || true
        cp "$workdir/rf3-$peer/server.log" "$raw/rf3/$peer/r$rnd-start.log" 2>/dev/null || true
        [ -f "$raw/rf3/$peer/peer.json" ] || echo '{"start_failed": true}' >"$raw/rf3/$peer/peer.json"
        peer_stop
        continue
      fi
      log "rf3 round $rnd: $peer cluster up in $((SECONDS - t0)) s, bootstrap $addr"
      wl_rf3 "$peer" "$rnd"
      python3 - "$raw/rf3/$peer/peer.json" "$peer" "$(peer_version "$peer")" \
        "$(peer_flush "$peer")" "$(rf3_config "$peer")" $((SECONDS - t0)) <<'EOF'
import json, sys
path, peer, version, flush, config, wall = sys.argv[1:]
json.dump({"peer": peer, "version": version, "flush": flush, "config": config,
           "wall_s": int(wall)}, open(path, "w"))
EOF
      peer_stop
    done
  done
}

partitions_of() {
  case "$1" in 1) echo 6 ;; 2) echo 100 ;; 3) echo 2 ;; 4|readback) echo 8 ;; alloc) echo 6 ;; esac
}

# ------------------------------------------------------------------ the run
df_line=$(df -h "$workdir" | tail -1)
log "scale $scale; peers: $peers; workloads: $workloads; data under $workdir ($df_line)"
avail_kb=$(df -Pk "$workdir" | tail -1 | awk '{print $4}')
need_kb=$(( (W4_BYTES / 1024) * 3 + 8 * 1024 * 1024 ))
# rf3 (one cluster's data at a time, deleted after it): three replicas of up to 400 MB/s
# through the maximum phase, of half that through the 50% phase (the fixed rate is less)
rf3_kb=$((3 * 400 * 1000 * (RF3_WARMUP + DURATION) + 3 * 200 * 1000 * (WARMUP + DURATION)))
[[ " $workloads " == *" rf3 "* ]] && [ "$rf3_kb" -gt "$need_kb" ] && need_kb=$rf3_kb
[ "$avail_kb" -gt "$need_kb" ] || die "only $((avail_kb / 1024)) MB free under $workdir; need about $((need_kb / 1024)) MB"

started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
run_t0=$SECONDS
for wl in $workloads; do
  [ "$wl" = rf3 ] && { run_rf3; continue; }
  for peer in $peers; do
    [ "$peer" = sluice-fsync ] && [ "$wl" != 2 ] && continue
    # Allocation counting needs Sluice's thread names and the preloaded counter.
    [ "$wl" = alloc ] && { is_sluice "$peer" && [ "$peer" != sluice-fsync ] || continue; }
    preload=""
    [ "$wl" = alloc ] && preload=1
    port=$(free_port)
    addr="127.0.0.1:$port"
    mkdir -p "$raw/$wl/$peer"
    if [ "$quiet_wait" -gt 0 ] && [ "$quiet_budget" -gt 0 ]; then
      read -r idle waited < <(wait_quiet)
      quiet_budget=$((quiet_budget - waited))
      [ "$idle" -ge 70 ] || log "workload $wl, $peer: CPUs only ${idle}% idle after ${waited} s of waiting; running anyway"
    fi
    t0=$SECONDS
    if ! peer_start "$peer" "$workdir/$wl-$peer" "$port" "$(partitions_of "$wl")"; then
      log "workload $wl: $peer did not start; see $workdir/$wl-$peer/server.log"
      echo '{"start_failed": true}' >"$raw/$wl/$peer/peer.json"
      peer_stop
      continue
    fi
    "wl_$wl" "$peer"
    python3 - "$raw/$wl/$peer/peer.json" "$peer" "$(peer_version "$peer")" \
      "$(peer_flush "$peer")" "$(peer_config "$peer")" $((SECONDS - t0)) <<'EOF'
import json, sys
path, peer, version, flush, config, wall = sys.argv[1:]
json.dump({"peer": peer, "version": version, "flush": flush, "config": config,
           "wall_s": int(wall)}, open(path, "w"))
EOF
    peer_stop
  done
done

# ------------------------------------------------------------------ the report
machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, \
$(free -g | awk '/^Mem:/{print $2}') GiB, kernel $(uname -r), $(df -PT "$workdir" | tail -1 | awk '{print $2}') on $(df -P "$workdir" | tail -1 | awk '{print $1}')"
"$venv/bin/python" "$here/report.py" --raw "$raw" --out "$out" --scale "$scale" \
  --started "$started" --wall-s $((SECONDS - run_t0)) --machine "$machine" \
  --commit "$sluice_commit" --dirty "$sluice_dirty" \
  --librdkafka "$(pkg-config --modversion rdkafka 2>/dev/null || echo '?')" \
  --librabbitmq "$(pkg-config --modversion librabbitmq 2>/dev/null || echo '?')" \
  --warmup "$WARMUP" --duration "$DURATION" --tail "$TAIL" --w3-rate "$W3_RATE" --w3-low-rate "$W3_LOW_RATE" \
  --w4-bytes "$W4_BYTES" --readback-bytes "$RB_BYTES" \
  --alloc-warm "$ALLOC_WARM" --alloc-measure "$ALLOC_MEASURE" \
  --rf3-rounds "$RF3_ROUNDS" --rf3-queue "$RF3_QUEUE" --rf3-warmup "$RF3_WARMUP" --rf3-rate "$RF3_RATE" \
  $([ "$out" = "$here/results" ] && echo "--readme $here/README.md")
log "done in $((SECONDS - run_t0)) s: $out/latest.md"
