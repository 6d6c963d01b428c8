#!/usr/bin/env bash
# Reference Apache Kafka for Sluice's integration tests and perf harness.
#
# Installs Apache Kafka (jars only, from Maven Central through mvn) into
# ~/.cache/sluice/kafka-<ver>/lib on first use, and runs a single-node KRaft
# server (combined broker+controller) on loopback.
#
#   kafka-ref.sh install                 fetch the jars if missing, print the version
#   kafka-ref.sh version                 print the Kafka version (installs if missing)
#   kafka-ref.sh start PORT DATADIR [key=value ...]
#                                        format DATADIR and start a server whose
#                                        PLAINTEXT listener is 127.0.0.1:PORT; extra
#                                        key=value pairs override server.properties
#   kafka-ref.sh stop DATADIR            SIGTERM the server started on DATADIR, wait
#   kafka-ref.sh kill9 DATADIR           SIGKILL it (crash test)
#   kafka-ref.sh restart PORT DATADIR    start again on an already formatted DATADIR
#   kafka-ref.sh run PORT DATADIR [key=value ...]
#                                        like start, but in the foreground (exec java;
#                                        formats DATADIR only if it is not formatted yet)
#
# Environment: KAFKA_VERSION (default 4.4.0, the newest 4.x on Maven Central in 2026-11), SLUICE_CACHE (default ~/.cache/sluice),
# KAFKA_HEAP (default -Xmx1g -Xms256m), KAFKA_START_TIMEOUT seconds (default 90).
# The server's pid is in DATADIR/kafka.pid, its console output in DATADIR/kafka.out.
set -euo pipefail

KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
HOME_DIR="$CACHE/kafka-$KAFKA_VERSION"
LIB="$HOME_DIR/lib"
HEAP=${KAFKA_HEAP:-"-Xmx1g -Xms256m"}
START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}

die() { echo "kafka-ref: $*" >&2; exit 1; }

install_kafka() {
    if [[ -f "$LIB/.complete" ]]; then return 0; fi
    command -v mvn >/dev/null || die "mvn not found (run tests/install-deps.sh)"
    command -v java >/dev/null || die "java not found (run tests/install-deps.sh)"
    local work; work=$(mktemp -d)
    mkdir -p "$LIB"
    cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sluice.reference</groupId>
  <artifactId>kafka-ref</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-server</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
    echo "kafka-ref: fetching Apache Kafka $KAFKA_VERSION jars into $LIB" >&2
    if ! (cd "$work" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$LIB" >&2); then
        rm -rf "$work"; die "mvn failed to fetch Kafka $KAFKA_VERSION"
    fi
    rm -rf "$work"
    ls "$LIB"/kafka_2.13-*.jar >/dev/null 2>&1 || die "kafka_2.13 jar missing after mvn"
    touch "$LIB/.complete"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_config() {  # PORT DATADIR [overrides...]
    local port=$1 dir=$2; shift 2
    local cport=$(( port + 1 ))
    [[ -n "${KAFKA_CONTROLLER_PORT:-}" ]] && cport=$KAFKA_CONTROLLER_PORT
    cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
log.retention.hours=-1
PROPS
    local kv key
    for kv in "$@"; do
        key=${kv%%=*}
        sed -i "/^${key//./\\.}=/d" "$dir/server.properties"
        echo "$kv" >> "$dir/server.properties"
    done
    cat > "$dir/log4j2.properties" <<'L4J'
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRefs = stdout
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka.server.KafkaServer
logger.kafka.level = INFO
L4J
}

java_cmd() {  # DATADIR class args...   (replaces the calling (sub)shell)
    local dir=$1; shift
    # shellcheck disable=SC2086
    exec java $HEAP -XX:+UseG1GC -XX:ActiveProcessorCount=2 -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" \
        -cp "$LIB/*" "$@"
}

format_storage() {  # DATADIR
    local dir=$1
    # Kafka 4.x: kafka.tools.StorageTool; --standalone makes a single-voter quorum
    # when controller.quorum.bootstrap.servers is used, --cluster-id is always needed.
    local cid; cid=$( (java_cmd "$dir" kafka.tools.StorageTool random-uuid) 2>/dev/null | tail -1)
    [[ -n "$cid" ]] || die "StorageTool random-uuid failed"
    (java_cmd "$dir" kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" \
        --ignore-formatted) >"$dir/format.out" 2>&1 || { cat "$dir/format.out" >&2; die "format failed"; }
}

launch() {  # PORT DATADIR
    local port=$1 dir=$2
    if port_open "$port"; then die "port $port already in use"; fi
    (java_cmd "$dir" kafka.Kafka "$dir/server.properties") >>"$dir/kafka.out" 2>&1 &
    local pid=$!
    echo "$pid" > "$dir/kafka.pid"
    local deadline=$(( SECONDS + START_TIMEOUT ))
    until port_open "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -30 "$dir/kafka.out" >&2; die "Kafka exited during startup"
        fi
        (( SECONDS < deadline )) || { kill -9 "$pid" 2>/dev/null || true; die "Kafka did not listen on $port within ${START_TIMEOUT}s"; }
        sleep 0.2
    done
    # The port answers before the broker is fully registered with its controller:
    # wait until it reports itself in Metadata (kcat -L), when kcat exists.
    if command -v kcat >/dev/null; then
        until kcat -b "127.0.0.1:$port" -L -m 2 2>/dev/null | grep -q 'broker 1 at'; do
            (( SECONDS < deadline )) || die "Kafka on $port not ready within ${START_TIMEOUT}s"
            sleep 0.3
        done
    fi
    echo "kafka-ref: Apache Kafka $KAFKA_VERSION pid $pid listening on 127.0.0.1:$port (data $dir)" >&2
}

stop_server() {  # DATADIR SIGNAL
    local dir=$1 sig=$2 pid
    [[ -f "$dir/kafka.pid" ]] || { echo "kafka-ref: no pid file in $dir" >&2; return 0; }
    pid=$(cat "$dir/kafka.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill "-$sig" "$pid" 2>/dev/null || true
        local i
        for i in $(seq 1 300); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "kafka-ref: pid $pid ignored SIG$sig for 30 s, sending SIGKILL" >&2
            kill -9 "$pid" 2>/dev/null || true
            sleep 0.5
        fi
    fi
    rm -f "$dir/kafka.pid"
}

cmd=${1:-}
case "$cmd" in
    install|version)
        install_kafka
        echo "Apache Kafka $KAFKA_VERSION ($LIB)"
        ;;
    start)
        [[ $# -ge 3 ]] || die "usage: $0 start PORT DATADIR [key=value ...]"
        port=$2; dir=$3; shift 3
        install_kafka
        echo "Apache Kafka $KAFKA_VERSION" >&2
        mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
        write_config "$port" "$dir" "$@"
        format_storage "$dir"
        launch "$port" "$dir"
        ;;
    restart)
        [[ $# -ge 3 ]] || die "usage: $0 restart PORT DATADIR"
        port=$2; dir=$(cd "$3" && pwd)
        [[ -f "$dir/server.properties" ]] || die "$dir was never started"
        launch "$port" "$dir"
        ;;
    run)
        [[ $# -ge 3 ]] || die "usage: $0 run PORT DATADIR [key=value ...]"
        port=$2; dir=$3; shift 3
        install_kafka
        mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
        write_config "$port" "$dir" "$@"
        [[ -f "$dir/logs/meta.properties" ]] || format_storage "$dir"
        echo "$$" > "$dir/kafka.pid"
        java_cmd "$dir" kafka.Kafka "$dir/server.properties"
        ;;
    stop)  [[ $# -ge 2 ]] || die "usage: $0 stop DATADIR"; stop_server "$2" TERM ;;
    kill9) [[ $# -ge 2 ]] || die "usage: $0 kill9 DATADIR"; stop_server "$2" KILL ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
