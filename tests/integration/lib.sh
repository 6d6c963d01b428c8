# shellcheck shell=bash
# Shared helpers for bash integration tests and the perf harness: source this file.
# Same contract as lib.py: a broker per test on a free loopback port with a fresh
# data directory, Sluice by default, the reference Apache Kafka when
# SLUICE_TEST_TARGET=kafka (started through tests/reference/kafka-ref.sh).
#
#   start_broker [key=value ...]   sets BROKER_PORT, BROKER_BOOTSTRAP, BROKER_PID,
#                                  BROKER_DATA, BROKER_TMP; extra Kafka properties
#   stop_broker                    SIGTERM, wait (returns the exit status for Sluice)
#   kill9_broker                   SIGKILL
#   restart_broker                 start again on the same port and data dir
#   wait_port PORT [SECONDS]       until 127.0.0.1:PORT accepts connections
#   free_port                      prints a free loopback port
#   skip "why"                     exit 77 (meson: skipped)
#   cleanup_broker                 stop and remove BROKER_TMP (installed as EXIT trap)
#
# Environment: SLUICE_TEST_TARGET, SLUICE_BROKER, SLUICE_RDK_CLIENT, SLUICE_KAFKA_REF,
# SLUICE_TEST_KEEP=1 (keep the temp dir).

SLUICE_ROOT=${SLUICE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SLUICE_TEST_TARGET=${SLUICE_TEST_TARGET:-sluice}
SLUICE_BROKER=${SLUICE_BROKER:-$SLUICE_ROOT/build/dataplane/sluice-broker}
SLUICE_RDK_CLIENT=${SLUICE_RDK_CLIENT:-$SLUICE_ROOT/build/tests/clients/sluice-rdk-client}
SLUICE_KAFKA_REF=${SLUICE_KAFKA_REF:-$SLUICE_ROOT/tests/reference/kafka-ref.sh}

BROKER_PORT=; BROKER_BOOTSTRAP=; BROKER_PID=; BROKER_DATA=; BROKER_TMP=; BROKER_PROPS=()
_BROKER_STARTS=0

tlog() { echo "[$(date +%H:%M:%S)] $*"; }
skip() { tlog "SKIP: $*"; exit 77; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {  # PORT [SECONDS]
    local port=$1 deadline=$(( SECONDS + ${2:-30} ))
    until port_open "$port"; do
        (( SECONDS < deadline )) || return 1
        if [[ -n "$BROKER_PID" ]] && ! kill -0 "$BROKER_PID" 2>/dev/null; then return 1; fi
        sleep 0.05
    done
}

_launch_broker() {
    if [[ "$SLUICE_TEST_TARGET" == kafka ]]; then
        local verb=start
        (( _BROKER_STARTS > 0 )) && verb=restart
        KAFKA_CONTROLLER_PORT=$BROKER_CPORT "$SLUICE_KAFKA_REF" "$verb" "$BROKER_PORT" "$BROKER_DATA" \
            "${BROKER_PROPS[@]}" >>"$BROKER_TMP/broker.log" 2>&1 || {
                tail -30 "$BROKER_TMP/broker.log" >&2; return 1; }
        BROKER_PID=$(cat "$BROKER_DATA/kafka.pid")
    else
        local args=("$SLUICE_BROKER" "$BROKER_TMP/server.properties") kv
        for kv in "${BROKER_PROPS[@]}"; do args+=(--override "$kv"); done
        setsid "${args[@]}" >>"$BROKER_TMP/broker.log" 2>&1 </dev/null &
        BROKER_PID=$!
        wait_port "$BROKER_PORT" 30 || { tail -30 "$BROKER_TMP/broker.log" >&2; return 1; }
    fi
    _BROKER_STARTS=$(( _BROKER_STARTS + 1 ))
    tlog "$SLUICE_TEST_TARGET broker up on $BROKER_BOOTSTRAP pid $BROKER_PID"
}

start_broker() {  # [key=value ...]
    if [[ "$SLUICE_TEST_TARGET" == kafka ]]; then
        command -v java >/dev/null || skip "java not installed"
    else
        [[ -x "$SLUICE_BROKER" ]] || skip "sluice-broker not built ($SLUICE_BROKER)"
    fi
    BROKER_TMP=$(mktemp -d /tmp/sluice-it-XXXXXX)
    BROKER_DATA=$BROKER_TMP/data
    mkdir -p "$BROKER_DATA"
    BROKER_PORT=$(free_port)
    BROKER_CPORT=$(free_port)
    BROKER_BOOTSTRAP=127.0.0.1:$BROKER_PORT
    BROKER_PROPS=(num.partitions=1 auto.create.topics.enable=true "$@")
    cat >"$BROKER_TMP/server.properties" <<EOF
node.id=1
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
log.dirs=$BROKER_DATA
EOF
    trap cleanup_broker EXIT
    _launch_broker
}

restart_broker() {
    if [[ -n "$BROKER_PID" ]] && kill -0 "$BROKER_PID" 2>/dev/null; then stop_broker; fi
    _launch_broker
}

stop_broker() {
    [[ -n "$BROKER_PID" ]] || return 0
    if [[ "$SLUICE_TEST_TARGET" == kafka ]]; then
        "$SLUICE_KAFKA_REF" stop "$BROKER_DATA" >/dev/null 2>&1
        BROKER_PID=; return 0
    fi
    local rc=0 i
    kill -TERM "$BROKER_PID" 2>/dev/null
    for i in $(seq 1 300); do
        [[ "$(ps -o stat= -p "$BROKER_PID" 2>/dev/null)" == Z* ]] && break
        kill -0 "$BROKER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if [[ "$(ps -o stat= -p "$BROKER_PID" 2>/dev/null)" != Z* ]] && kill -0 "$BROKER_PID" 2>/dev/null; then
        tlog "broker ignored SIGTERM for 30 s: SIGKILL"
        kill -9 "$BROKER_PID" 2>/dev/null
        wait "$BROKER_PID" 2>/dev/null
        rc=137
    else
        wait "$BROKER_PID" 2>/dev/null
        rc=$?
    fi
    BROKER_PID=
    return "$rc"
}

kill9_broker() {
    [[ -n "$BROKER_PID" ]] || return 0
    tlog "kill -9 broker pid $BROKER_PID"
    if [[ "$SLUICE_TEST_TARGET" == kafka ]]; then
        "$SLUICE_KAFKA_REF" kill9 "$BROKER_DATA" >/dev/null 2>&1
    else
        kill -9 "$BROKER_PID" 2>/dev/null
        wait "$BROKER_PID" 2>/dev/null
    fi
    BROKER_PID=
}

cleanup_broker() {
    local rc=$?
    stop_broker >/dev/null 2>&1 || true
    if [[ -n "$BROKER_TMP" ]]; then
        if [[ -n "${SLUICE_TEST_KEEP:-}" || $rc -ne 0 ]]; then
            tlog "kept $BROKER_TMP"
        else
            rm -rf "$BROKER_TMP"
        fi
    fi
    return $rc
}
