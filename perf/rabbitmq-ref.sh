#!/usr/bin/env bash
# Reference RabbitMQ for Sluice's benchmark harness: Debian's rabbitmq-server run by hand
# as a private node on loopback, with every file it writes (Mnesia and stream data, logs,
# generated config, Erlang cookie) under one data directory, its own node name, AMQP and
# distribution ports and its own epmd port, so it touches no system service and can run
# beside one.
#
#   rabbitmq-ref.sh install            apt-get install rabbitmq-server if it is missing
#   rabbitmq-ref.sh version            print the installed RabbitMQ version
#   rabbitmq-ref.sh start PORT DIR     start a node with AMQP on 127.0.0.1:PORT (and PORT+1
#                                      for Erlang distribution, PORT+2 for epmd), data in DIR
#   rabbitmq-ref.sh stop DIR           stop that node (rabbitmqctl stop, then signals) and
#                                      its epmd
#
# The node's memory high watermark is raised to 0.6 of RAM and its disk free limit lowered
# to 1 GB so that flow control reflects the broker, not a cautious default for a shared
# host; stream data stays on DIR's disk (the same disk as every other peer's data).
set -euo pipefail

die() { echo "rabbitmq-ref: $*" >&2; exit 1; }

RMQ_BIN=/usr/lib/rabbitmq/bin
START_TIMEOUT=${RABBITMQ_START_TIMEOUT:-90}

install_rabbitmq() {
    [[ -x $RMQ_BIN/rabbitmq-server ]] && return 0
    echo "rabbitmq-ref: installing rabbitmq-server from Debian" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server >&2 ||
        die "apt-get install rabbitmq-server failed"
    # Debian's package may start a system node through invoke-rc.d; this harness never
    # uses it, and policy-rc.d usually forbids it anyway.
}

rmq_version() {
    dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null | sed 's/-[^-]*$//'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The environment every rabbitmq command of this node needs (DIR PORT).
node_env() {
    local dir=$1 port=$2
    export RABBITMQ_HOME=/usr/lib/rabbitmq
    export HOME=$dir                      # the Erlang cookie goes to $HOME/.erlang.cookie
    export RABBITMQ_NODENAME=sluiceperf$port@localhost
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=$port
    export RABBITMQ_DIST_PORT=$((port + 1))
    export ERL_EPMD_PORT=$((port + 2))
    export RABBITMQ_MNESIA_BASE=$dir/mnesia
    export RABBITMQ_LOG_BASE=$dir/log
    export RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
    export RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
    export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
    export RABBITMQ_GENERATED_CONFIG_DIR=$dir/config
    export RABBITMQ_PLUGINS_EXPAND_DIR=$dir/plugins-expand
    export RABBITMQ_PID_FILE=$dir/rabbitmq.pid
}

start_node() {
    local port=$1 dir=$2
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    port_open "$port" && die "port $port already in use"
    cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$port
loopback_users = none
vm_memory_high_watermark.relative = 0.6
disk_free_limit.absolute = 1GB
EOF
    echo "[]." >"$dir/enabled_plugins"
    echo "$port" >"$dir/port"
    node_env "$dir" "$port"
    ("$RMQ_BIN/rabbitmq-server" >"$dir/rabbitmq.out" 2>&1 &)
    local deadline=$((SECONDS + START_TIMEOUT))
    # The node is ready when it has booted (rabbitmqctl await_startup), not merely when its
    # port answers.
    until "$RMQ_BIN/rabbitmqctl" -q await_startup --timeout 5 >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            tail -20 "$dir/rabbitmq.out" >&2
            die "RabbitMQ did not start within ${START_TIMEOUT}s"
        fi
        sleep 1
    done
    echo "rabbitmq-ref: RabbitMQ $(rmq_version) listening on 127.0.0.1:$port (data $dir)" >&2
}

stop_node() {
    local dir=$1 port pid=""
    [[ -f $dir/port ]] || { echo "rabbitmq-ref: nothing started in $dir" >&2; return 0; }
    dir=$(cd "$dir" && pwd)
    port=$(cat "$dir/port")
    node_env "$dir" "$port"
    [[ -f $dir/rabbitmq.pid ]] && pid=$(cat "$dir/rabbitmq.pid")
    "$RMQ_BIN/rabbitmqctl" -q stop >/dev/null 2>&1 || true
    if [[ -n $pid ]]; then
        local i
        for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "rabbitmq-ref: node pid $pid still running after 30 s; SIGKILL" >&2
            kill -9 "$pid" 2>/dev/null || true
        fi
    fi
    # The node started its own epmd on ERL_EPMD_PORT: stop it too.
    epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
    rm -f "$dir/port"
}

cmd=${1:-}
case "$cmd" in
    install) install_rabbitmq; echo "RabbitMQ $(rmq_version)" ;;
    version) echo "RabbitMQ $(rmq_version)" ;;
    start)
        [[ $# -eq 3 ]] || die "usage: $0 start PORT DIR"
        install_rabbitmq
        start_node "$2" "$3"
        ;;
    stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop_node "$2" ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
