#!/usr/bin/env bash
# Cluster failover benchmark (issue 12): 3 controllers + 3 brokers on this machine,
# Sluice (deploy/local-cluster.sh, release build) and Apache Kafka 4.x in KRaft mode
# (the jars tests/reference/kafka-ref.sh fetches from Maven Central), one after the
# other in one run, with the same measurements (perf/cluster_failover.py):
#   1. metadata propagation: create topic -> visible on every broker, p50/p99 over
#      --topics topics created one by one;
#   2. a broker's death: --partitions RF=1 partitions all on broker 3, kill -9 of it,
#      time until it is fenced and all of its partitions are offline (leader -1) in
#      every other broker's Metadata; then its restart until they lead again;
#   3. controller failover, --rounds times: kill -9 of the active controller, time until
#      another answers DescribeQuorum as the leader and until CreateTopics works again;
#   4. leader failover (replication): a topic of --leader-partitions partitions, RF=3;
#      --kills times kill -9 of the broker leading the most of them, the time until each
#      of its partitions accepts an acks=all write again (p50/p99 over the kills), then
#      --stops times SIGTERM (controlled shutdown), each partition's write unavailability,
#      the time from the new leader showing in Metadata to its first accepted write, and
#      an acks=all write's round trip before the signal. The prober makes a pass (Metadata,
#      then one Produce per leader) every --probe-ms (10): the unavailability it sees
#      includes up to one pass.
# Both clusters run with the same, default, timeouts: broker.session.timeout.ms=9000,
# broker.heartbeat.interval.ms=2000, controller.quorum.election.timeout.ms=1000 (Kafka's
# followers also wait controller.quorum.fetch.timeout.ms=2000 before an election),
# replica.lag.time.max.ms=30000. One difference, between rounds only: Kafka's controller
# gives leadership back to preferred replicas every leader.imbalance.check.interval.seconds,
# set to 5 here (default 300), as Sluice does when a broker returns.
#
#   perf/cluster-failover.sh [--targets sluice,kafka] [--partitions 1000] [--topics 50]
#                            [--rounds 3] [--kills 10] [--stops 5] [--leader-partitions 100] [--probe-ms 10]
#                            [--tests propagation,broker,controller,leader]
#                            [--base-port P] [--kafka-base-port K] [--out DIR] [--keep]
#
# Ports: Sluice 35000-35002 (brokers), 35100-35105 (controllers and their Raft ports);
# Kafka 35500-35502 and 35600-35604; --base-port P moves Sluice's to P.. and P+100..,
# --kafka-base-port K (default P+500) Kafka's to K.. and K+100... Data under --out (default
# build-release/perf/cluster-failover), removed at the end unless --keep. Prints one
# line per figure and a table; writes DIR/results.json. Needs python3, java (Kafka).
# Environment: KAFKA_VERSION (kafka-ref.sh's default), KAFKA_NODE_HEAP (default -Xmx512m),
# SLUICE_BROKER/SLUICE_CONTROLLER/SLUICE_BUILD_DIR as deploy/local-cluster.sh takes them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SELF=$ROOT/perf/cluster-failover.sh
LOCAL_CLUSTER=$ROOT/deploy/local-cluster.sh
SLUICE_BASE=35000
KAFKA_BASE=
HOST=127.0.0.1
NODE_HEAP=${KAFKA_NODE_HEAP:--Xmx512m}
BROKER_HEAP=${KAFKA_BROKER_HEAP:-$NODE_HEAP}

die() { echo "cluster-failover: $*" >&2; exit 1; }
say() { echo "cluster-failover: $*"; }
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# --------------------------------------------------------------- Apache Kafka 3+3
# Same layout and cluster.env as deploy/local-cluster.sh: brokers 1..3, controllers
# 1001..1003, PORT_<id>, PID_<id>.

kafka_lib() {
    local out
    out=$("$ROOT/tests/reference/kafka-ref.sh" install) || die "cannot install Apache Kafka's jars"
    KAFKA_LIB=$(sed -n 's/^Apache Kafka \([^ ]*\) (\(.*\))$/\2/p' <<<"$out")
    KAFKA_VER=$(sed -n 's/^Apache Kafka \([^ ]*\) (.*$/\1/p' <<<"$out")
    [[ -d $KAFKA_LIB ]] || die "kafka-ref.sh install printed no library directory: $out"
}

kafka_java() {  # NODE_DIR class args...   (replaces the calling subshell)
    local dir=$1 heap=$NODE_HEAP
    shift
    [[ $dir == */node-[1-9] || $dir == */node-[1-9][0-9] ]] && heap=$BROKER_HEAP
    # shellcheck disable=SC2086
    exec java $heap -XX:+UseG1GC -XX:ActiveProcessorCount=2 -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$KAFKA_LIB/*" "$@"
}

kafka_env_write() {  # DIR
    local dir=$1 id tmp=$1/cluster.env.tmp
    {
        echo "# Apache Kafka 3+3 of perf/cluster-failover.sh"
        echo "BOOTSTRAP=$HOST:$KAFKA_BASE,$HOST:$((KAFKA_BASE + 1)),$HOST:$((KAFKA_BASE + 2))"
        echo "CONTROLLER_BOOTSTRAP=$HOST:$((KAFKA_BASE + 100)),$HOST:$((KAFKA_BASE + 102)),$HOST:$((KAFKA_BASE + 104))"
        echo 'BROKERS="1 2 3"'
        echo 'CONTROLLERS="1001 1002 1003"'
        for id in 1 2 3 1001 1002 1003; do
            echo "PORT_$id=$(kafka_port "$id")"
            echo "PID_$id=$(cat "$dir/node-$id/pid" 2>/dev/null || true)"
        done
    } >"$tmp"
    mv "$tmp" "$dir/cluster.env"
}

kafka_port() {
    if (($1 > 1000)); then echo $((KAFKA_BASE + 100 + 2 * ($1 - 1001))); else echo $((KAFKA_BASE + $1 - 1)); fi
}

kafka_write() {  # DIR CLUSTER_ID
    local dir=$1 cid=$2 id nd voters=
    for id in 1001 1002 1003; do voters+="${voters:+,}$id@$HOST:$(kafka_port "$id")"; done
    for id in 1001 1002 1003 1 2 3; do
        nd=$dir/node-$id
        mkdir -p "$nd"
        {
            echo "node.id=$id"
            echo "controller.quorum.voters=$voters"
            echo "controller.listener.names=CONTROLLER"
            echo "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
            echo "log.dirs=$nd/data"
            echo "num.network.threads=2"
            echo "num.io.threads=2"
            echo "num.recovery.threads.per.data.dir=1"
            echo "leader.imbalance.check.interval.seconds=5"
            if ((id > 1000)); then
                echo "process.roles=controller"
                echo "listeners=CONTROLLER://$HOST:$(kafka_port "$id")"
            else
                echo "process.roles=broker"
                echo "listeners=PLAINTEXT://$HOST:$(kafka_port "$id")"
                echo "advertised.listeners=PLAINTEXT://$HOST:$(kafka_port "$id")"
                echo "inter.broker.listener.name=PLAINTEXT"
                echo "offsets.topic.replication.factor=1"
                echo "transaction.state.log.replication.factor=1"
                echo "transaction.state.log.min.isr=1"
                echo "share.coordinator.state.topic.replication.factor=1"
                echo "share.coordinator.state.topic.min.isr=1"
                echo "auto.create.topics.enable=false"
                if [[ -n ${KAFKA_BROKER_SET:-} ]]; then
                    echo "# KAFKA_BROKER_SET (a later line wins)"
                    tr ' ' '\n' <<<"$KAFKA_BROKER_SET" | sed '/^$/d'
                fi
            fi
        } >"$nd/server.properties"
        cat >"$nd/log4j2.properties" <<'L4J'
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
# the controllers' decisions (fencing, elections) with their times, as Sluice logs them
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
L4J
        (kafka_java "$nd" kafka.tools.StorageTool format -t "$cid" -c "$nd/server.properties" \
            >"$nd/format.out" 2>&1) || { cat "$nd/format.out" >&2; die "formatting Kafka node $id failed"; }
    done
}

# wait_bindable PORT: these ports are in Linux's ephemeral range, where any process's
# closed connection can hold one in TIME_WAIT for 60 s (deploy/local-cluster.sh waits too).
wait_bindable() {
    local deadline=$((SECONDS + 65))
    port_open "$1" && die "port $1 is in use: another server listens on it"
    until python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || die "port $1 still held by other connections after 65s"
        sleep 1
    done
}

kafka_start() {  # DIR NODE_ID
    local dir=$1 id=$2 nd=$1/node-$2 pid deadline attempt lines
    for attempt in 1 2 3; do
        wait_bindable "$(kafka_port "$id")"
        lines=0
        [[ -f $nd/kafka.out ]] && lines=$(wc -l <"$nd/kafka.out")
        (kafka_java "$nd" kafka.Kafka "$nd/server.properties" </dev/null >>"$nd/kafka.out" 2>&1) &
        pid=$!
        disown "$pid" 2>/dev/null || true  # the benchmark kills it: no job notice from this shell
        echo "$pid" >"$nd/pid"
        kafka_env_write "$dir"
        deadline=$((SECONDS + 120))
        until port_open "$(kafka_port "$id")"; do
            if ! kill -0 "$pid" 2>/dev/null; then
                # Its port is in Linux's ephemeral range: between the check and the JVM's
                # bind, some other connection may have taken it as its local port.
                if ((attempt < 3)) && tail -n +"$((lines + 1))" "$nd/kafka.out" | grep -q "BindException"; then
                    say "Kafka node $id: port $(kafka_port "$id") taken by another connection meanwhile; starting it again"
                    continue 2
                fi
                tail -20 "$nd/kafka.out" >&2
                die "Kafka node $id exited during its start"
            fi
            ((SECONDS < deadline)) || die "Kafka node $id did not listen within 120s"
            sleep 0.2
        done
        return 0
    done
}

kafka_running_pid() {  # DIR NODE_ID: the recorded pid if it is still that node's java
    local f=$1/node-$2/pid pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f")
    [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' </proc/"$pid"/cmdline | grep -q -- "$1/node-$2/server.properties" && echo "$pid"
    return 0
}

kafka_down() {  # DIR
    local dir=$1 group id pid deadline left
    for group in "1 2 3" "1001 1002 1003"; do
        for id in $group; do
            pid=$(kafka_running_pid "$dir" "$id")
            [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
        done
        deadline=$((SECONDS + 60))
        while :; do
            left=
            for id in $group; do [[ -n $(kafka_running_pid "$dir" "$id") ]] && left+=" $id"; done
            [[ -z $left ]] && break
            if ((SECONDS >= deadline)); then
                for id in $left; do
                    pid=$(kafka_running_pid "$dir" "$id")
                    [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null || true
                done
                break
            fi
            sleep 0.3
        done
    done
}

kafka_wait_brokers() {  # DIR: every broker's Metadata lists all three
    local id deadline=$((SECONDS + 180)) ok
    while :; do
        ok=1
        for id in 1 2 3; do
            python3 - "$(kafka_port "$id")" <<'PY' || ok=
import socket, struct, sys
port = int(sys.argv[1])
msg = struct.pack(">hhih", 3, 1, 1, 5) + b"probe" + struct.pack(">i", 0)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(struct.pack(">i", len(msg)) + msg)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            c = s.recv(65536)
            if not c:
                sys.exit(1)
            buf += c
except OSError:
    sys.exit(1)
n = struct.unpack(">i", buf[8:12])[0]
sys.exit(0 if n == 3 else 1)
PY
        done
        [[ -n $ok ]] && return 0
        ((SECONDS < deadline)) || die "the Kafka brokers did not all register within 180s"
        sleep 0.5
    done
}

kafka_up() {  # DIR
    local dir=$1 cid id
    kafka_lib
    mkdir -p "$dir"
    cid=$( (kafka_java "$dir" kafka.tools.StorageTool random-uuid) 2>/dev/null | tail -n 1)
    [[ -n $cid ]] || die "StorageTool random-uuid failed"
    say "formatting Apache Kafka $KAFKA_VER: 3 controllers, 3 brokers (cluster $cid)"
    kafka_write "$dir" "$cid"
    for id in 1001 1002 1003 1 2 3; do kafka_start "$dir" "$id"; done
    kafka_wait_brokers "$dir"
    say "Apache Kafka $KAFKA_VER cluster up in $dir"
}

# --------------------------------------------------------------- the run

run_target() {  # TARGET
    local t=$1 dir=$OUT/$1 start
    rm -rf "$dir"
    if [[ $t == sluice ]]; then
        "$LOCAL_CLUSTER" up "$dir" --base-port "$SLUICE_BASE"
        start="$LOCAL_CLUSTER start $dir"
        LABEL="Sluice $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
    else
        kafka_up "$dir"
        start="$SELF kafka-start $dir"
        LABEL="Apache Kafka $KAFKA_VER"
    fi
    CURRENT=$t
    python3 "$ROOT/perf/cluster_failover.py" --env "$dir/cluster.env" --start-cmd "$start" --label "$LABEL" \
        --partitions "$PARTITIONS" --topics "$TOPICS" --rounds "$ROUNDS" --kills "$KILLS" --stops "$STOPS" \
        --leader-partitions "$LEADER_PARTITIONS" --probe-ms "$PROBE_MS" --tests "$TESTS" --json "$OUT/$t.json"
    stop_target "$t"
    CURRENT=
}

stop_target() {
    local t=$1 dir=$OUT/$1
    [[ -d $dir ]] || return 0
    if [[ $t == sluice ]]; then
        [[ -f $dir/cluster.env ]] && "$LOCAL_CLUSTER" down "$dir" || true
    else
        kafka_down "$dir"
    fi
}

on_exit() {
    [[ -n ${CURRENT:-} ]] && stop_target "$CURRENT"
    if [[ -z $KEEP && -n ${OUT:-} ]]; then
        rm -rf "$OUT/sluice" "$OUT/kafka"
    fi
}

report() {
    python3 - "$OUT" "$TARGETS" <<'PY'
import json, os, sys
out, targets = sys.argv[1], sys.argv[2].split(",")
res = {t: json.load(open(os.path.join(out, f"{t}.json"))) for t in targets if os.path.exists(os.path.join(out, f"{t}.json"))}
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1)
f = lambda v, d=2: "–" if v is None else f"{v:,.{d}f}"
if any(k in r for r in res.values() for k in ("propagation", "broker_death", "controller_failover")):
    print("| peer | propagation p50 ms | p99 ms | broker kill -9 -> fenced s | -> all its partitions offline s | restart -> leading again s | controller kill -9 -> new leader s (median / max) | -> CreateTopics works s (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for t, r in res.items():
        p, b, c = r.get("propagation", {}), r.get("broker_death", {}), r.get("controller_failover", {})
        print(f"| {r['label']} | {f(p.get('p50_ms'), 1)} | {f(p.get('p99_ms'), 1)} | {f(b.get('fenced_s'))} | "
              f"{f(b.get('offline_s'))} | {f(b.get('back_s'))} | {f(c.get('elected_median_s'))} / "
              f"{f(c.get('elected_max_s'))} | {f(c.get('create_ok_median_s'))} |")
if any("leader_failover" in r for r in res.values()):
    print()
    print("| peer | leader kill -9 -> every partition writes again s: p50 / p99 / max (kills) | per partition s: p50 / p99 | SIGTERM: write unavailability per partition ms: p50 / p99 / max (stops) | Metadata round trip ms (median) | SIGTERM: new leader in Metadata -> its first write ms: p50 / max | acks=all write before the signal ms (median) |")
    print("|---|---|---|---|---|---|---|")
    for t, r in res.items():
        lf = r.get("leader_failover")
        if not lf:
            continue
        k, s = lf.get("kill", {}), lf.get("stop", {})
        print(f"| {r['label']} | {f(k.get('all_resumed_p50_s'))} / {f(k.get('all_resumed_p99_s'))} / "
              f"{f(k.get('all_resumed_max_s'))} ({k.get('kills', 0)}{', %d failed' % k['failed'] if k.get('failed') else ''}) | "
              f"{f(k.get('partition_p50_s'))} / {f(k.get('partition_p99_s'))} | {f(s.get('gap_p50_ms'), 1)} / "
              f"{f(s.get('gap_p99_ms'), 1)} / {f(s.get('gap_max_ms'), 1)} ({s.get('stops', 0)}"
              f"{', %d failed' % s['failed'] if s.get('failed') else ''}) | {f(s.get('metadata_rtt_ms_median'), 1)} | "
              f"{f(s.get('seen_to_write_p50_ms'), 1)} / {f(s.get('seen_to_write_max_ms'), 1)} | "
              f"{f(s.get('write_rtt_ms_median_before'), 1)} |")
PY
}

main() {
    TARGETS=sluice,kafka PARTITIONS=1000 TOPICS=50 ROUNDS=3 OUT=$ROOT/build-release/perf/cluster-failover KEEP=
    KILLS=10 STOPS=5 LEADER_PARTITIONS=100 PROBE_MS=10 TESTS=propagation,broker,controller,leader
    while (($#)); do
        case $1 in
        --base-port) SLUICE_BASE=$2; shift 2 ;;
        --kafka-base-port) KAFKA_BASE=$2; shift 2 ;;
        --targets) TARGETS=$2; shift 2 ;;
        --partitions) PARTITIONS=$2; shift 2 ;;
        --topics) TOPICS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --kills) KILLS=$2; shift 2 ;;
        --stops) STOPS=$2; shift 2 ;;
        --leader-partitions) LEADER_PARTITIONS=$2; shift 2 ;;
        --probe-ms) PROBE_MS=$2; shift 2 ;;
        --tests) TESTS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option '$1' (--help)" ;;
        esac
    done
    [[ $SLUICE_BASE =~ ^[0-9]+$ ]] || die "--base-port: '$SLUICE_BASE' is not a port"
    KAFKA_BASE=${KAFKA_BASE:-$((SLUICE_BASE + 500))}
    [[ $KAFKA_BASE =~ ^[0-9]+$ ]] || die "--kafka-base-port: '$KAFKA_BASE' is not a port"
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    CURRENT=
    trap on_exit EXIT
    trap 'exit 130' INT TERM
    say "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); results in $OUT"
    local t
    for t in ${TARGETS//,/ }; do
        case $t in sluice | kafka) run_target "$t" ;; *) die "--targets: '$t' is not sluice or kafka" ;; esac
    done
    report
}

# kafka_base_of DIR: KAFKA_BASE from a cluster's cluster.env (broker 1's port).
kafka_base_of() {
    local p
    p=$(sed -n 's/^PORT_1=//p' "$1/cluster.env" 2>/dev/null)
    [[ $p =~ ^[0-9]+$ ]] || die "$1/cluster.env: no PORT_1 (not a Kafka cluster of this script)"
    KAFKA_BASE=$p
}

case ${1:-} in
kafka-start)  # internal: perf/cluster_failover.py restarts a killed Kafka node with it
    [[ $# -eq 3 ]] || die "usage: $0 kafka-start DIR NODE_ID"
    kafka_base_of "$2"
    kafka_lib
    kafka_start "$2" "$3"
    ;;
kafka-up)  # perf/run-all.sh's rf3 workload: a fresh Kafka 3+3 in DIR, brokers from PORT
    [[ $# -eq 3 && $3 =~ ^[0-9]+$ ]] || die "usage: $0 kafka-up DIR PORT"
    [[ ! -e $2 || -z $(ls -A "$2" 2>/dev/null) ]] || die "kafka-up: $2 is not empty"
    KAFKA_BASE=$3
    kafka_up "$2"
    ;;
kafka-down)
    [[ $# -eq 2 ]] || die "usage: $0 kafka-down DIR"
    kafka_down "$2"
    ;;
*) main "$@" ;;
esac
