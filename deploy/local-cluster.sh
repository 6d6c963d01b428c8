#!/usr/bin/env bash
# A Sluice cluster on one machine: N brokers (sluice-broker) and M controllers
# (sluice-controller), each its own process on 127.0.0.1, for users trying a
# cluster and for the integration tests (tests/integration/cluster.py drives it).
#
#   deploy/local-cluster.sh up DIR [--brokers N] [--controllers M] [--base-port P]
#                                  [--set KEY=VALUE]... [--set-broker [ID:]KEY=VALUE]...
#                                  [--set-controller [ID:]KEY=VALUE]...
#                                  [--host-of ID=ADDR]... [--netns-of ID=NAME]...
#                                  [--stopped BROKER_ID]...
#       Builds if needed, writes every node's properties under DIR, starts the
#       controllers then the brokers in the background (output in DIR/<node>/out.log),
#       waits until every broker is registered and unfenced (each broker's Metadata
#       lists all N brokers) and every node's GET /ready answers 200, and writes
#       DIR/cluster.env. On a DIR that holds a
#       stopped cluster, `up DIR` (no options) starts it again as it was.
#       --stopped BROKER_ID: that broker is set up (properties, cluster.env) but not
#       started, and `up` waits for the others only; `start DIR BROKER_ID` starts it
#       later (a cluster's first start with fewer brokers than it will have).
#   deploy/local-cluster.sh kill DIR NODE_ID [SIGNAL]   signal one node (default KILL)
#   deploy/local-cluster.sh start DIR NODE_ID [--no-wait]
#       starts a stopped node with its properties and data; waits until it listens
#       (a broker listens once it is registered, caught up and unfenced) and its
#       GET /ready answers 200
#   deploy/local-cluster.sh down DIR     brokers first (SIGTERM: controlled shutdown
#       needs the controllers), then controllers; SIGKILL after a bounded wait
#   deploy/local-cluster.sh status DIR   every node, running or not; quorum leader;
#       the brokers the cluster lists as unfenced
#
# Node ids and ports (base port P, default 9092; at most 100 brokers, 9 controllers):
#   brokers      node.id 1..N,            PLAINTEXT://127.0.0.1:P+i-1
#   controllers  node.id 1001..1000+M,    CONTROLLER://127.0.0.1:P+100+2(i-1); the
#                controller's Raft port is that + sluice.controller.raft.port.offset
#                (1), hence the gaps of two.
#   admin        every node's HTTP admin listener (sluice.admin.listener: GET /metrics,
#                GET /ready) on its own port, the node's port + 150: brokers
#                P+150..P+249, controllers P+250+2(i-1).
# Brokers and controllers never share an id (Kafka requires distinct node ids).
#
# --host-of ID=ADDR makes node ID listen on (and advertise, and be a voter at) ADDR
# instead of 127.0.0.1; --netns-of ID=NAME runs it inside the network namespace NAME
# (`ip netns exec`, root; the namespace must exist and reach the other nodes' ADDRs),
# and every probe of that node runs there too. tests/fault/ uses both to give each
# node its own namespace and address on a bridge, where it can cut links.
#
# DIR/cluster.env is shell-sourceable:
#   CLUSTER_DIR, CLUSTER_ID, BOOTSTRAP=127.0.0.1:P,..., CONTROLLER_BOOTSTRAP=...,
#   CONTROLLER_QUORUM_VOTERS=1001@127.0.0.1:...,  BROKERS="1 2 3",
#   CONTROLLERS="1001 1002 1003", PORT_<id>=..., ADMIN_<id>=HOST:PORT (the node's admin
#   listener), HOST_<id>=..., NETNS_<id>=... (empty unless given) and PID_<id>=... for
#   every node
#   (`start` rewrites PID_<id>; `kill` and `down` change nothing in it).
#
# Properties are Kafka's defaults except what a local cluster needs: ids, listeners,
# quorum, data dirs, cluster.id, sluice.cpu.affinity=false (the nodes share the
# machine's cores), offsets.topic.replication.factor=N with fewer than 3 brokers (else
# groups never work) and sluice.listener.bind.timeout.ms=70000. The last because a port
# in Linux's ephemeral range (32768-60999) can be held for 60 s by any process's closed
# connection (TIME_WAIT), and a broker binds its port only once it is registered; `up`
# and `start` also wait (up to 65 s) for such ports before starting a node. Below
# 32768, as the default 9092.. are, this never happens.
#
# --set KEY=VALUE adds a property to every node's file (a key the other binary does not
# know is warned about in its log and ignored); --set-broker / --set-controller to one
# kind only, and with an ID: prefix to that node only (a broker's rack:
# --set-broker 2:broker.rack=b). The tests use them for short timeouts, e.g. --set
# broker.session.timeout.ms=4000 --set broker.heartbeat.interval.ms=500
# --set-controller controller.quorum.election.timeout.ms=1000.
#
# Environment:
#   SLUICE_BROKER, SLUICE_CONTROLLER  binaries to run; both set: nothing is built
#   SLUICE_BUILD_DIR     else the build to use (default build-release, the one
#                        deploy/run-single-node.sh builds; set up if missing, then
#                        `ninja` for the two binaries)
#   SLUICE_CLUSTER_WAIT_S   bound on `up`/`start` waiting (default 120)
#   SLUICE_CLUSTER_STOP_S   bound on each SIGTERM wait of `down` (default 45) before SIGKILL
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HOST=127.0.0.1
BROKERS_MAX=100
CONTROLLERS_MAX=9
CONTROLLER_ID_BASE=1000
CONTROLLER_PORT_GAP=100
ADMIN_PORT_GAP=150 # a node's admin port: its port + this (past every node's port and Raft port)
WAIT_S=${SLUICE_CLUSTER_WAIT_S:-120}
STOP_S=${SLUICE_CLUSTER_STOP_S:-45}

die() {
    echo "local-cluster: $*" >&2
    exit 1
}
say() { echo "local-cluster: $*"; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
    exit "${1:-2}"
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

# --------------------------------------------------------------- binaries

BROKER_BIN=
CONTROLLER_BIN=
find_binaries() {
    if [[ -n ${SLUICE_BROKER:-} && -n ${SLUICE_CONTROLLER:-} ]]; then
        BROKER_BIN=$SLUICE_BROKER
        CONTROLLER_BIN=$SLUICE_CONTROLLER
    else
        local build=${SLUICE_BUILD_DIR:-build-release}
        [[ $build = /* ]] || build=$ROOT/$build
        "$ROOT/deploy/install-deps.sh"
        if [[ ! -f $build/build.ninja ]]; then
            say "setting up $build (release build)"
            meson setup "$build" "$ROOT" --buildtype=release -Db_ndebug=false -Dtests=disabled >/dev/null
        fi
        ninja -C "$build" dataplane/sluice-broker control/sluice-controller tools/sluice >/dev/null ||
            die "the build in $build failed (run: ninja -C $build)"
        BROKER_BIN=${SLUICE_BROKER:-$build/dataplane/sluice-broker}
        CONTROLLER_BIN=${SLUICE_CONTROLLER:-$build/control/sluice-controller}
    fi
    [[ -x $BROKER_BIN ]] || die "no broker binary at $BROKER_BIN"
    [[ -x $CONTROLLER_BIN ]] || die "no controller binary at $CONTROLLER_BIN"
}

# --------------------------------------------------------------- layout

# node_dir ID: DIR/broker-<id> or DIR/controller-<id>
node_dir() {
    if (($1 > CONTROLLER_ID_BASE)); then echo "$DIR/controller-$1"; else echo "$DIR/broker-$1"; fi
}
node_props() {
    if (($1 > CONTROLLER_ID_BASE)); then echo "$(node_dir "$1")/controller.properties"
    else echo "$(node_dir "$1")/broker.properties"; fi
}
node_role() { if (($1 > CONTROLLER_ID_BASE)); then echo controller; else echo broker; fi; }
is_controller() { (($1 > CONTROLLER_ID_BASE)); }

load_env() {
    [[ -f $DIR/cluster.env ]] || die "$DIR/cluster.env not found: no cluster was set up in $DIR (run: $0 up $DIR)"
    # shellcheck disable=SC1091
    source "$DIR/cluster.env"
}

is_node() {
    local id
    for id in $BROKERS $CONTROLLERS; do [[ $id == "$1" ]] && return 0; done
    return 1
}

# pid_of ID: the recorded PID if that process is still this node (its command line
# names this node's properties file; a recycled PID is not ours), else nothing.
pid_of() {
    local var="PID_$1" pid cmd
    pid=${!var:-}
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 0
    cmd=$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null) || return 0
    [[ $cmd == *"$(node_props "$1")"* ]] && echo "$pid"
    return 0
}

host_of() {
    local var="HOST_$1"
    echo "${!var:-$HOST}"
}
netns_of() {
    local var="NETNS_$1"
    echo "${!var:-}"
}
addr_of() { echo "$(host_of "$1"):$(port_of "$1")"; }

# in_netns ID CMD...: CMD in node ID's network namespace (--netns-of), else as it is.
in_netns() {
    local ns
    ns=$(netns_of "$1")
    shift
    if [[ -n $ns ]]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

# port_open ID [PORT]: something listens on node ID's address at PORT (default its port).
port_open() {
    local port=${2:-$(port_of "$1")} host
    host=$(host_of "$1")
    if [[ -n $(netns_of "$1") ]]; then
        in_netns "$1" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null
    else
        (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
    fi
}

write_env() {
    local tmp=$DIR/cluster.env.tmp id var
    {
        echo "# Written by deploy/local-cluster.sh; \`start\` rewrites PID_<id>. Shell-sourceable."
        echo "# Brokers are node ids 1..N, controllers 1001..1000+M."
        echo "CLUSTER_DIR=$DIR"
        echo "CLUSTER_ID=$CLUSTER_ID"
        echo "BASE_PORT=$BASE_PORT"
        echo "BOOTSTRAP=$BOOTSTRAP"
        echo "CONTROLLER_BOOTSTRAP=$CONTROLLER_BOOTSTRAP"
        echo "CONTROLLER_QUORUM_VOTERS=$CONTROLLER_QUORUM_VOTERS"
        echo "BROKERS=\"$BROKERS\""
        echo "CONTROLLERS=\"$CONTROLLERS\""
        for id in $BROKERS $CONTROLLERS; do
            var="PORT_$id"
            echo "PORT_$id=${!var}"
        done
        for id in $BROKERS $CONTROLLERS; do
            var="ADMIN_$id"
            echo "ADMIN_$id=${!var:-}"
        done
        for id in $BROKERS $CONTROLLERS; do
            var="HOST_$id"
            echo "HOST_$id=${!var:-}"
            var="NETNS_$id"
            echo "NETNS_$id=${!var:-}"
        done
        for id in $BROKERS $CONTROLLERS; do
            var="PID_$id"
            echo "PID_$id=${!var:-}"
        done
    } >"$tmp"
    mv "$tmp" "$DIR/cluster.env"
}

# --------------------------------------------------------------- probes

# A Kafka-protocol probe (python3, standard library), run in node ID's namespace:
#   probe ID brokers HOST:PORT       the node ids in that broker's Metadata (unfenced brokers)
#   probe ID leader HOST:PORT...     "LEADER EPOCH HW" from the first controller answering DescribeQuorum
#   probe ID bindable HOST:PORT...   exit 0 if every port can be listened on, else prints the others
probe() {
    local id=$1
    shift
    in_netns "$id" python3 - "$@" <<'PY'
import socket, struct, sys

def split(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)

def request(addr, api_key, version, body, flexible):
    hdr = struct.pack(">hhi", api_key, version, 1) + struct.pack(">h", 5) + b"probe"
    if flexible:
        hdr += b"\x00"
    msg = hdr + body
    with socket.create_connection(split(addr), timeout=3) as s:
        s.sendall(struct.pack(">i", len(msg)) + msg)
        def take(n):
            buf = b""
            while len(buf) < n:
                c = s.recv(n - len(buf))
                if not c:
                    raise OSError("connection closed")
                buf += c
            return buf
        n = struct.unpack(">i", take(4))[0]
        data = take(n)
    return data[4 + (1 if flexible else 0):]

class Dec:
    def __init__(self, b): self.b, self.o = b, 0
    def take(self, n):
        v = self.b[self.o:self.o + n]
        if len(v) != n:
            raise ValueError("short response")
        self.o += n
        return v
    def i16(self): return struct.unpack(">h", self.take(2))[0]
    def i32(self): return struct.unpack(">i", self.take(4))[0]
    def i64(self): return struct.unpack(">q", self.take(8))[0]
    def uv(self):
        v = s = 0
        while True:
            c = self.take(1)[0]
            v |= (c & 0x7F) << s
            s += 7
            if not c & 0x80:
                return v
    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()
    def cstring(self):
        n = self.uv() - 1
        return None if n < 0 else self.take(n).decode()
    def tags(self):
        for _ in range(self.uv()):
            self.uv()
            self.take(self.uv())

def brokers(addr):
    d = Dec(request(addr, 3, 1, struct.pack(">i", 0), False))  # Metadata v1, no topics
    ids = []
    for _ in range(d.i32()):
        ids.append(d.i32())
        d.string(); d.i32(); d.string()
    print(" ".join(map(str, sorted(ids))))

def leader(addrs):
    body = b"\x02" + b"\x13__cluster_metadata" + b"\x02" + struct.pack(">i", 0) + b"\x00\x00\x00"
    for a in addrs:
        try:
            d = Dec(request(a, 55, 0, body, True))
            d.i16()
            d.uv(); d.cstring()
            d.uv(); d.i32(); d.i16()
            lead, epoch, hw = d.i32(), d.i32(), d.i64()
            if lead >= 0:
                print(lead, epoch, hw)
                return
        except (OSError, ValueError):
            continue
    sys.exit(1)

def bindable(addrs):
    # A port is free to listen on only if no socket holds it: a listener, or any
    # connection that took it as its local (ephemeral) port, TIME_WAIT included.
    busy = []
    for a in addrs:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(split(a))
        except OSError:
            busy.append(a.rpartition(":")[2])
        finally:
            s.close()
    print(" ".join(busy))
    sys.exit(1 if busy else 0)

try:
    if sys.argv[1] == "bindable":
        bindable(sys.argv[2:])
    elif sys.argv[1] == "brokers":
        brokers(sys.argv[2])
    else:
        leader(sys.argv[2:])
except (OSError, ValueError) as e:
    print(e, file=sys.stderr)
    sys.exit(1)
PY
}

# quorum_leader: "LEADER EPOCH HW" from the first controller that answers as leader
# (each probed from its own namespace, where its address is always reachable).
quorum_leader() {
    local id
    for id in $CONTROLLERS; do
        probe "$id" leader "$(addr_of "$id")" 2>/dev/null && return 0
    done
    return 1
}

# --------------------------------------------------------------- properties

write_props() {
    local id=$1 dir props sets
    dir=$(node_dir "$id")
    props=$(node_props "$id")
    mkdir -p "$dir"
    {
        echo "# $(node_role "$id") $id of the local cluster in $DIR (deploy/local-cluster.sh)"
        echo "process.roles=$(node_role "$id")"
        echo "node.id=$id"
        echo "cluster.id=$CLUSTER_ID"
        echo "controller.quorum.voters=$CONTROLLER_QUORUM_VOTERS"
        echo "controller.listener.names=CONTROLLER"
        local var="PORT_$id" admin="ADMIN_$id"
        echo "# GET /metrics and GET /ready (HTTP, no authentication: loopback or a private address)"
        echo "sluice.admin.listener=${!admin}"
        if is_controller "$id"; then
            echo "listeners=CONTROLLER://$(host_of "$id"):${!var}"
            echo "metadata.log.dir=$dir/metadata"
        else
            echo "listeners=PLAINTEXT://$(host_of "$id"):${!var}"
            echo "advertised.listeners=PLAINTEXT://$(host_of "$id"):${!var}"
            echo "log.dirs=$dir/data"
            echo "# several brokers share this machine's cores: no pinning"
            echo "sluice.cpu.affinity=false"
            echo "# a broker binds its port only once registered: meanwhile another node's closed"
            echo "# connection may hold it in TIME_WAIT (60 s) when it lies in the ephemeral range"
            echo "sluice.listener.bind.timeout.ms=70000"
            local nbrokers
            nbrokers=$(wc -w <<<"$BROKERS")
            if ((nbrokers < 3)); then
                echo "# fewer brokers than Kafka's default offsets.topic.replication.factor (3), which"
                echo "# would keep consumer groups unavailable (COORDINATOR_NOT_AVAILABLE) for good"
                echo "offsets.topic.replication.factor=$nbrokers"
            fi
        fi
        if ((${#SETS[@]} + ${#ROLE_SETS[@]})); then
            echo "# given with --set"
        fi
        for sets in "${SETS[@]}"; do echo "$sets"; done
        # ROLE_SETS entries: ROLE:[ID]:KEY=VALUE (no ID: every node of the role)
        local role node kv
        for sets in "${ROLE_SETS[@]}"; do
            role=${sets%%:*} kv=${sets#*:}
            node=${kv%%:*} kv=${kv#*:}
            if [[ $role == "$(node_role "$id")" && (-z $node || $node == "$id") ]]; then echo "$kv"; fi
        done
    } >"$props"
}

# --------------------------------------------------------------- processes

start_node() {
    local id=$1 dir props bin pid
    dir=$(node_dir "$id")
    props=$(node_props "$id")
    [[ -f $props ]] || die "node $id: $props is missing"
    if is_controller "$id"; then bin=$CONTROLLER_BIN; else bin=$BROKER_BIN; fi
    echo "--- $(date '+%F %T') local-cluster: starting $bin $props" >>"$dir/out.log"
    local ns
    ns=$(netns_of "$id")
    if [[ -n $ns ]]; then
        # ip execs the node in the namespace: $! is the node's PID
        nohup ip netns exec "$ns" "$bin" "$props" </dev/null >>"$dir/out.log" 2>&1 &
    else
        nohup "$bin" "$props" </dev/null >>"$dir/out.log" 2>&1 &
    fi
    pid=$!
    printf -v "PID_$id" '%s' "$pid"
    say "started $(node_role "$id") $id (pid $pid, $(addr_of "$id")${ns:+ in netns $ns}, output $dir/out.log)"
}

port_of() {
    local var="PORT_$1"
    echo "${!var}"
}

dump_tail() {
    local dir
    dir=$(node_dir "$1")
    echo "--- last lines of $dir/out.log:" >&2
    tail -n 20 "$dir/out.log" >&2 || true
}

# admin_port_of ID: the port of node ID's admin listener (empty: a cluster set up
# before nodes had one).
admin_port_of() {
    local var="ADMIN_$1"
    [[ -n ${!var:-} ]] && echo "${!var##*:}"
    return 0
}

# node_ports ID: the ports a node listens on (a controller: also its Raft port; every
# node: its admin port).
node_ports() {
    local port offset
    port=$(port_of "$1")
    if is_controller "$1"; then
        offset=$(sed -n 's/^sluice\.controller\.raft\.port\.offset=//p' "$(node_props "$1")" | tail -n 1)
        echo "$port $((port + ${offset:-1})) $(admin_port_of "$1")"
    else
        echo "$port $(admin_port_of "$1")"
    fi
}

# node_ready ID: node ID's GET /ready answers 200 (true for a node without an admin
# listener). Bash's /dev/tcp, in the node's namespace: no HTTP client needed.
node_ready() {
    local port
    port=$(admin_port_of "$1")
    [[ -n $port ]] || return 0
    in_netns "$1" bash -c 'exec 3<>"/dev/tcp/$0/$1" || exit 1
        printf "GET /ready HTTP/1.0\r\nHost: %s\r\n\r\n" "$0" >&3
        read -r -t 3 line <&3 && [[ $line == "HTTP/1."?" 200 "* ]]' "$(host_of "$1")" "$port" 2>/dev/null
}

# wait_bindable ID...: refuse ports another server listens on; wait (bounded) for ports
# that connections hold. 9092.. and the tests' ports are inside Linux's ephemeral range
# (ip_local_port_range): any process's outgoing connection may take one as its local
# port, and once closed it stays in TIME_WAIT for 60 s, refusing a listener meanwhile.
wait_bindable() {
    local deadline=$((SECONDS + 65)) id port busy said= pending words
    for id in "$@"; do
        for port in $(node_ports "$id"); do
            port_open "$id" "$port" && die "port $port (node $id) is in use: another server listens on $(host_of "$id"):$port"
        done
    done
    while :; do
        busy=
        for id in "$@"; do
            pending=()
            for port in $(node_ports "$id"); do pending+=("$(host_of "$id"):$port"); done
            busy+=" $(probe "$id" bindable "${pending[@]}" || true)"
        done
        read -ra words <<<"$busy"
        busy="${words[*]}"
        [[ -z $busy ]] && break
        if ((SECONDS >= deadline)); then
            die "ports $busy are still held by other connections after 65s (ss -tan | grep :PORT shows them)"
        fi
        if [[ -z $said ]]; then
            say "ports $busy are held by closed connections (TIME_WAIT); waiting up to 65s"
            said=1
        fi
        sleep 1
    done
}

# wait_listening ID...: until each node listens (a broker: registered and unfenced)
# and its GET /ready answers 200.
wait_listening() {
    local deadline=$((SECONDS + WAIT_S)) id pending
    while :; do
        pending=
        for id in "$@"; do
            if [[ -z $(pid_of "$id") ]]; then
                dump_tail "$id"
                echo "local-cluster: $(node_role "$id") $id exited during its start (see $(node_dir "$id")/out.log)" >&2
                return 1
            fi
            port_open "$id" && node_ready "$id" || pending+=" $id"
        done
        [[ -z $pending ]] && return 0
        if ((SECONDS >= deadline)); then
            echo "local-cluster: not listening after ${WAIT_S}s (SLUICE_CLUSTER_WAIT_S):$pending" >&2
            return 1
        fi
        sleep 0.2
    done
}

# wait_cluster [ID...]: every broker's Metadata (of those given, default all) lists
# every one of them (all registered, unfenced).
wait_cluster() {
    local deadline=$((SECONDS + WAIT_S)) want got id bad list=${*:-$BROKERS}
    want=$(echo "$list" | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/ $//')
    while :; do
        bad=
        for id in $list; do
            got=$(probe "$id" brokers "$(addr_of "$id")" 2>/dev/null) || got="no answer"
            [[ $got == "$want" ]] || bad+=" broker $id lists [$got];"
        done
        [[ -z $bad ]] && return 0
        if ((SECONDS >= deadline)); then
            echo "local-cluster: after ${WAIT_S}s (SLUICE_CLUSTER_WAIT_S) not every broker lists [$want]:$bad" >&2
            return 1
        fi
        sleep 0.2
    done
}

# stop_nodes SIGNAL_WAIT_S ID...: SIGTERM, wait, SIGKILL the rest (by PID only).
stop_nodes() {
    local wait_s=$1 id pid deadline left
    shift
    for id in "$@"; do
        pid=$(pid_of "$id")
        [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
    done
    deadline=$((SECONDS + wait_s))
    while :; do
        left=
        for id in "$@"; do
            [[ -n $(pid_of "$id") ]] && left+=" $id"
        done
        [[ -z $left ]] && return 0
        if ((SECONDS >= deadline)); then
            for id in $left; do
                pid=$(pid_of "$id")
                if [[ -n $pid ]]; then
                    say "node $id (pid $pid) still running ${wait_s}s after SIGTERM: SIGKILL"
                    kill -KILL "$pid" 2>/dev/null || true
                fi
            done
            sleep 0.2
            return 0
        fi
        sleep 0.2
    done
}

# --------------------------------------------------------------- commands

cmd_up() {
    local brokers= controllers= base= i id
    local -A hosts=() netnss=() stopped=()
    SETS=()
    ROLE_SETS=()
    while (($#)); do
        case $1 in
        --brokers) brokers=${2:-}; shift 2 || die "--brokers needs a number" ;;
        --controllers) controllers=${2:-}; shift 2 || die "--controllers needs a number" ;;
        --base-port) base=${2:-}; shift 2 || die "--base-port needs a port" ;;
        --set)
            [[ ${2:-} =~ ^[A-Za-z0-9._-]+=.*$ ]] || die "$1 needs KEY=VALUE (got '${2:-}')"
            SETS+=("$2")
            shift 2 ;;
        --set-broker | --set-controller)
            [[ ${2:-} =~ ^(([0-9]+):)?([A-Za-z0-9._-]+=.*)$ ]] || die "$1 needs [ID:]KEY=VALUE (got '${2:-}')"
            ROLE_SETS+=("${1#--set-}:${BASH_REMATCH[2]}:${BASH_REMATCH[3]}")
            shift 2 ;;
        --host-of | --netns-of)
            [[ ${2:-} =~ ^([0-9]+)=([A-Za-z0-9._:-]+)$ ]] || die "$1 needs ID=VALUE (got '${2:-}')"
            local node=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
            if [[ $1 == --host-of ]]; then
                [[ $value =~ ^[0-9]+(\.[0-9]+){3}$ ]] ||
                    die "--host-of: '$value' is not an IPv4 address (the controllers' Raft needs one)"
                hosts[$node]=$value
            else
                [[ -e /run/netns/$value ]] || die "--netns-of: no network namespace '$value' (ip netns add)"
                netnss[$node]=$value
            fi
            shift 2 ;;
        --stopped)
            is_uint "${2:-}" || die "--stopped needs a broker id (got '${2:-}')"
            stopped[$2]=1
            shift 2 ;;
        -h | --help) usage 0 ;;
        *) die "up: unknown option '$1' (see $0 --help)" ;;
        esac
    done

    if [[ -f $DIR/cluster.env ]]; then
        load_env
        for id in $BROKERS $CONTROLLERS; do
            [[ -z $(pid_of "$id") ]] || die "$DIR holds a running cluster (node $id, pid $(pid_of "$id")); run: $0 down $DIR"
        done
        [[ -z $brokers$controllers$base ]] &&
            ((${#SETS[@]} + ${#ROLE_SETS[@]} + ${#hosts[@]} + ${#netnss[@]} + ${#stopped[@]} == 0)) ||
            die "$DIR holds a stopped cluster: \`$0 up $DIR\` without options starts it again as it was; remove $DIR for a new one"
        say "starting the stopped cluster in $DIR again"
    else
        brokers=${brokers:-3}
        controllers=${controllers:-3}
        base=${base:-9092}
        is_uint "$brokers" && ((brokers >= 1 && brokers <= BROKERS_MAX)) ||
            die "--brokers: '$brokers' is not a number from 1 to $BROKERS_MAX"
        is_uint "$controllers" && ((controllers >= 1 && controllers <= CONTROLLERS_MAX)) ||
            die "--controllers: '$controllers' is not a number from 1 to $CONTROLLERS_MAX"
        ((controllers % 2)) || say "warning: $controllers controllers tolerate no more failures than $((controllers - 1)); use an odd number"
        is_uint "$base" && ((base >= 1024 && base + ADMIN_PORT_GAP + CONTROLLER_PORT_GAP + 2 * controllers <= 65535)) ||
            die "--base-port: '$base' leaves no room for the ports (P..P+N-1, P+$CONTROLLER_PORT_GAP..P+$((CONTROLLER_PORT_GAP + 2 * controllers - 1)), admin ports P+$ADMIN_PORT_GAP..P+$((ADMIN_PORT_GAP + CONTROLLER_PORT_GAP + 2 * controllers - 1)))"
        if [[ -e $DIR && -n $(ls -A "$DIR" 2>/dev/null) ]]; then
            die "$DIR exists and is not empty (and has no cluster.env): choose a new or empty directory"
        fi
        mkdir -p "$DIR"
        DIR=$(cd "$DIR" && pwd)
        CLUSTER_ID=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
        BASE_PORT=$base
        BROKERS= CONTROLLERS= BOOTSTRAP= CONTROLLER_BOOTSTRAP= CONTROLLER_QUORUM_VOTERS=
        for id in "${!hosts[@]}" "${!netnss[@]}"; do
            ((id >= 1 && id <= brokers || id > CONTROLLER_ID_BASE && id <= CONTROLLER_ID_BASE + controllers)) ||
                die "--host-of/--netns-of: no node $id (brokers 1..$brokers, controllers $((CONTROLLER_ID_BASE + 1))..$((CONTROLLER_ID_BASE + controllers)))"
        done
        local sets node
        for sets in "${ROLE_SETS[@]}"; do
            node=${sets#*:} node=${node%%:*}
            [[ -z $node ]] && continue
            if [[ ${sets%%:*} == broker ]]; then
                ((node >= 1 && node <= brokers)) || die "--set-broker $node:...: no broker $node (1..$brokers)"
            else
                ((node > CONTROLLER_ID_BASE && node <= CONTROLLER_ID_BASE + controllers)) ||
                    die "--set-controller $node:...: no controller $node ($((CONTROLLER_ID_BASE + 1))..$((CONTROLLER_ID_BASE + controllers)))"
            fi
        done
        for id in "${!stopped[@]}"; do
            ((id >= 1 && id <= brokers)) || die "--stopped: no broker $id (brokers 1..$brokers)"
        done
        ((${#stopped[@]} < brokers)) || die "--stopped: at least one broker must start"
        for ((i = 1; i <= brokers; i++)); do
            BROKERS+="${BROKERS:+ }$i"
            printf -v "PORT_$i" '%s' $((base + i - 1))
            printf -v "HOST_$i" '%s' "${hosts[$i]:-}"
            printf -v "NETNS_$i" '%s' "${netnss[$i]:-}"
            printf -v "ADMIN_$i" '%s' "$(host_of "$i"):$((base + ADMIN_PORT_GAP + i - 1))"
            BOOTSTRAP+="${BOOTSTRAP:+,}$(addr_of "$i")"
        done
        for ((i = 1; i <= controllers; i++)); do
            id=$((CONTROLLER_ID_BASE + i))
            CONTROLLERS+="${CONTROLLERS:+ }$id"
            printf -v "PORT_$id" '%s' $((base + CONTROLLER_PORT_GAP + 2 * (i - 1)))
            printf -v "HOST_$id" '%s' "${hosts[$id]:-}"
            printf -v "NETNS_$id" '%s' "${netnss[$id]:-}"
            printf -v "ADMIN_$id" '%s' "$(host_of "$id"):$((base + ADMIN_PORT_GAP + CONTROLLER_PORT_GAP + 2 * (i - 1)))"
            CONTROLLER_BOOTSTRAP+="${CONTROLLER_BOOTSTRAP:+,}$(addr_of "$id")"
            CONTROLLER_QUORUM_VOTERS+="${CONTROLLER_QUORUM_VOTERS:+,}$id@$(addr_of "$id")"
        done
        for id in $CONTROLLERS $BROKERS; do write_props "$id"; done
    fi

    find_binaries
    local started=() started_brokers=()
    for id in $CONTROLLERS $BROKERS; do
        [[ -n ${stopped[$id]:-} ]] || started+=("$id")
    done
    for id in $BROKERS; do [[ -n ${stopped[$id]:-} ]] || started_brokers+=("$id"); done
    wait_bindable "${started[@]}"
    for id in $CONTROLLERS $BROKERS; do unset "PID_$id"; done
    write_env
    for id in "${started[@]}"; do
        start_node "$id"
        write_env
    done
    if ! wait_listening "${started[@]}" || ! wait_cluster "${started_brokers[@]}"; then
        echo "local-cluster: the cluster did not come up; stopping what was started" >&2
        stop_nodes 10 $BROKERS
        stop_nodes 10 $CONTROLLERS
        exit 1
    fi
    write_env
    local lead
    lead=$(quorum_leader) || lead="?"
    say "cluster up in $DIR: brokers [${started_brokers[*]}] unfenced${stopped[*]:+ (not started: ${!stopped[*]})}, controllers [$CONTROLLERS] (leader ${lead%% *})"
    say "BOOTSTRAP=$BOOTSTRAP"
    say "environment: source $DIR/cluster.env"
}

cmd_kill() {
    local id=${1:-} sig=${2:-KILL} pid
    [[ -n $id ]] || die "kill: usage: $0 kill DIR NODE_ID [SIGNAL]"
    load_env
    is_node "$id" || die "kill: node $id is not in the cluster (brokers: $BROKERS; controllers: $CONTROLLERS)"
    pid=$(pid_of "$id")
    [[ -n $pid ]] || die "kill: $(node_role "$id") $id is not running"
    sig=${sig#SIG}
    if is_uint "$sig"; then
        kill -n "$sig" "$pid" || die "kill: cannot send signal $sig to pid $pid"
        say "sent signal $sig to $(node_role "$id") $id (pid $pid)"
    else
        kill -s "$sig" "$pid" || die "kill: cannot send SIG$sig to pid $pid"
        say "sent SIG$sig to $(node_role "$id") $id (pid $pid)"
    fi
    # After SIGKILL, return once the process is gone (or a zombie without threads:
    # its sockets are closed then), so that a `start` right after finds its ports free: the kernel
    # empties /proc/PID/cmdline before it closes the process's sockets.
    if [[ $sig == KILL || $sig == 9 ]]; then
        local i
        for ((i = 0; i < 100; i++)); do
            [[ -e /proc/$pid ]] || return 0
            # a zombie thread-group leader whose other threads are gone holds no sockets
            [[ $(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null) == Z &&
                $(ls "/proc/$pid/task" 2>/dev/null | wc -l) -le 1 ]] && return 0
            sleep 0.1
        done
        die "kill: pid $pid still there 10 s after SIGKILL"
    fi
}

cmd_start() {
    local id=${1:-} wait=1
    [[ -n $id ]] || die "start: usage: $0 start DIR NODE_ID [--no-wait]"
    [[ ${2:-} == --no-wait ]] && wait=
    [[ -z ${2:-} || ${2:-} == --no-wait ]] || die "start: unknown option '$2'"
    load_env
    is_node "$id" || die "start: node $id is not in the cluster (brokers: $BROKERS; controllers: $CONTROLLERS)"
    [[ -z $(pid_of "$id") ]] || die "start: $(node_role "$id") $id is already running (pid $(pid_of "$id"))"
    find_binaries
    wait_bindable "$id"
    start_node "$id"
    write_env
    if [[ -n $wait ]]; then
        wait_listening "$id" || exit 1
        say "$(node_role "$id") $id listens on $(addr_of "$id")"
    fi
}

cmd_down() {
    load_env
    local id any=
    for id in $BROKERS $CONTROLLERS; do [[ -n $(pid_of "$id") ]] && any=1; done
    [[ -n $any ]] || { say "nothing running in $DIR"; return 0; }
    local ctl_up=
    for id in $CONTROLLERS; do [[ -n $(pid_of "$id") ]] && ctl_up=1; done
    [[ -n $ctl_up ]] || say "no controller is running: each broker waits sluice.controller.shutdown.wait.ms (30 s by default) for a controlled shutdown before it stops"
    say "stopping brokers [$BROKERS] (SIGTERM: controlled shutdown)"
    stop_nodes "$STOP_S" $BROKERS
    say "stopping controllers [$CONTROLLERS]"
    stop_nodes "$STOP_S" $CONTROLLERS
    say "cluster in $DIR stopped"
}

cmd_status() {
    load_env
    local id pid lead listed=
    lead=$(quorum_leader) || lead=
    for id in $BROKERS; do
        listed=$(probe "$id" brokers "$(addr_of "$id")" 2>/dev/null) && break
        listed=
    done
    printf '%-10s %-5s %-22s %-8s %s\n' ROLE ID ENDPOINT PID STATE
    for id in $CONTROLLERS $BROKERS; do
        pid=$(pid_of "$id")
        local state=stopped
        if [[ -n $pid ]]; then
            state=running
            if [[ $(node_role "$id") == controller ]]; then
                [[ -n $lead && ${lead%% *} == "$id" ]] && state="running, quorum leader"
            elif [[ -n $listed ]]; then
                [[ " $listed " == *" $id "* ]] && state="running, unfenced" || state="running, not listed (fenced?)"
            fi
        fi
        printf '%-10s %-5s %-22s %-8s %s\n' "$(node_role "$id")" "$id" "$(addr_of "$id")" "${pid:--}" "$state"
    done
    if [[ -n $lead ]]; then
        read -r l e h <<<"$lead"
        echo "quorum: leader $l, epoch $e, high watermark $h"
    else
        echo "quorum: no controller answers as the leader"
    fi
    echo "unfenced brokers (Metadata): ${listed:-none reachable}"
}

(($#)) || usage
case $1 in -h | --help | help) usage 0 ;; esac
CMD=$1
shift
(($#)) || die "$CMD: DIR missing (see $0 --help)"
DIR=$1
shift
[[ $CMD == up ]] || { [[ -d $DIR ]] || die "$DIR: no such directory"; DIR=$(cd "$DIR" && pwd); }
case $CMD in
up) cmd_up "$@" ;;
kill) cmd_kill "$@" ;;
start) cmd_start "$@" ;;
down) (($# == 0)) || die "down: unexpected '$1'"; cmd_down ;;
status) (($# == 0)) || die "status: unexpected '$1'"; cmd_status ;;
*) die "unknown command '$CMD' (up, kill, start, down, status; see $0 --help)" ;;
esac
