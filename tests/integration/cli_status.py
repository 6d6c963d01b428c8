#!/usr/bin/env python3
"""`sluice cluster status` against a real cluster: 1 sluice-controller and 2
sluice-brokers in cluster mode.

Proves:
- with --bootstrap-server (a broker) and with --bootstrap-controller (the
  controller), --json prints exactly the documented shape: the controller as
  leader with a last applied offset, both brokers with their endpoints,
  unfenced, 0 offline and 0 under-replicated partitions; the table names the
  same ids; a list whose first server is down is tried in turn;
- the other commands in a cluster: `logger` finds the id of the broker it is
  connected to (101 or 102) among Metadata's brokers; `topic describe` shows
  the leaders Metadata gives, spread over both brokers; `group lag` of a group
  that read every partition (kcat -G, when kcat is installed) asks each
  partition's leader for its log end offset: all known, lag 0;
- kill -9 of a broker: after broker.session.timeout.ms (3 s here) the status,
  from either side, shows it fenced and offline_partitions equal to the
  number of partitions it led (an RF=1 topic spread over both brokers, and
  __consumer_offsets), and the table says so;
- nothing reachable: exit 3; a server that answers garbage, one that never
  answers: exit 1; each with a message naming the server; bad usage: usage text,
  exit 2; --help: the usage text on stdout, exit 0.

Python 3 standard library only. Ports 13000-13099 on 127.0.0.1.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import lib
from lib import Enc, check, log

ROOT = lib.ROOT
CLUSTER_ID = "sluice-cli-test"
CONTROLLER_PORT = 13001          # its Raft port is the next one (sluice.controller.raft.port.offset)
BROKER_PORTS = {101: 13010, 102: 13011}
DOWN_PORT = 13099                # nothing listens there
SESSION_MS = 3000
TOPIC, TOPIC_PARTITIONS = "cli-status", 6


def binary(env, default, what):
    p = os.environ.get(env) or os.path.join(ROOT, "build", *default)
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        raise lib.TestFailure(f"{what} not found at {p} (set {env} or build it)")  # fails, never skips
    return p


# ----------------------------------------------------------------- processes

_procs = []


def _cleanup():
    for p in list(_procs):
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        _procs.remove(p)


import atexit  # noqa: E402

atexit.register(_cleanup)


def start(cmd, logpath, port):
    out = open(logpath, "ab")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    out.close()
    _procs.append(p)
    if not lib.wait_port(port, 60, lambda: p.poll() is None):
        raise lib.TestFailure(f"{cmd[0]} did not listen on {port}:\n{tail(logpath)}")
    return p


def kill9(p):
    os.kill(p.pid, signal.SIGKILL)
    p.wait(10)
    _procs.remove(p)


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def write_props(path, props):
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))


def start_controller(root):
    d = os.path.join(root, "c1")
    os.makedirs(d)
    props = os.path.join(d, "controller.properties")
    write_props(props, {
        "process.roles": "controller", "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{CONTROLLER_PORT}",
        "listeners": f"CONTROLLER://127.0.0.1:{CONTROLLER_PORT}",
        "controller.listener.names": "CONTROLLER",
        "metadata.log.dir": os.path.join(d, "metadata"), "cluster.id": CLUSTER_ID,
        "controller.quorum.election.timeout.ms": 1000,
        "broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": 500,
    })
    p = start([binary("SLUICE_CONTROLLER", ("control", "sluice-controller"), "sluice-controller"), props],
              os.path.join(d, "controller.log"), CONTROLLER_PORT)
    log(f"controller 1 up (pid {p.pid}, port {CONTROLLER_PORT})")
    return p


def start_broker(root, node_id):
    port = BROKER_PORTS[node_id]
    d = os.path.join(root, f"b{node_id}")
    os.makedirs(d)
    props = os.path.join(d, "server.properties")
    write_props(props, {
        "process.roles": "broker", "node.id": node_id,
        "controller.quorum.voters": f"1@127.0.0.1:{CONTROLLER_PORT}", "cluster.id": CLUSTER_ID,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}", "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": os.path.join(d, "data"), "broker.heartbeat.interval.ms": 500,
        # __consumer_offsets at RF 1 (cluster mode's default is 3): groups work with two
        # brokers, and its partitions led by a killed broker go offline like the topic's
        "offsets.topic.replication.factor": 1,
    })
    # The broker listens once it is registered and caught up with the controller.
    p = start([binary("SLUICE_BROKER", ("dataplane", "sluice-broker"), "sluice-broker"), props],
              os.path.join(d, "broker.log"), port)
    log(f"broker {node_id} up (pid {p.pid}, port {port})")
    return p


# ----------------------------------------------------------------- the protocol

def create_topic(port, name, partitions):
    """CreateTopics v7 through a broker (forwarded to the controller), RF 1."""
    e = Enc().array_len(1, True).string(name, True).i32(partitions).i16(1).array_len(0, True).array_len(0, True)
    e.tags().i32(30000).i8(0).tags()
    with lib.Conn(port) as c:
        d = c.request(19, 7, e.done(), flexible_req=True)
    d.i32()
    check(d.array_len(True) == 1, "CreateTopics: one topic answered")
    d.string(True)
    d._take(16)
    err, msg = d.i16(), d.string(True)
    check(err == 0, f"CreateTopics {name}: error {err} {msg}")


def leaders(port):
    """{(topic, partition): leader} of every partition, from a broker's Metadata."""
    with lib.Conn(port) as c:
        _, topics = c.metadata(None, auto_create=False)
    return {(t, i): leader for t, (_e, parts) in topics.items() for i, (_pe, leader) in parts.items()}


# ----------------------------------------------------------------- the CLI

def cli(*args, timeout=60):
    return lib.run([binary("SLUICE_CLI", ("tools", "sluice"), "sluice"), *args], timeout=timeout)


def status(flag, servers):
    r = cli(flag, servers, "cluster", "status", "--json")
    check(r.returncode == 0, f"sluice {flag} {servers} cluster status --json: exit {r.returncode}\n{r.stderr}")
    try:
        s = json.loads(r.stdout)
    except ValueError as e:
        raise lib.TestFailure(f"--json output is not JSON ({e}): {r.stdout!r}")
    check_shape(s)
    return s


def check_shape(s):
    check(set(s) == {"controllers", "brokers", "offline_partitions", "under_replicated_partitions"},
          f"top-level keys: {sorted(s)}")
    check(isinstance(s["offline_partitions"], int) and isinstance(s["under_replicated_partitions"], int),
          f"partition counts: {s}")
    for c in s["controllers"]:
        check({"id", "role", "last_applied_offset"} <= set(c), f"controller keys: {c}")
        check(c["role"] in ("leader", "follower") and isinstance(c["last_applied_offset"], int), f"controller: {c}")
    for b in s["brokers"]:
        check({"id", "host", "port", "rack", "fenced"} <= set(b), f"broker keys: {b}")
        check(isinstance(b["fenced"], bool) and isinstance(b["port"], int), f"broker: {b}")


def brokers_of(s):
    return {b["id"]: b for b in s["brokers"]}


def check_healthy(s, where):
    cs = s["controllers"]
    check(len(cs) == 1 and cs[0]["id"] == 1 and cs[0]["role"] == "leader", f"{where}: controllers {cs}")
    check(cs[0]["last_applied_offset"] > 0, f"{where}: the leader applied nothing? {cs}")
    check(cs[0].get("host") == "127.0.0.1" and cs[0].get("port") == CONTROLLER_PORT, f"{where}: endpoint {cs}")
    bs = brokers_of(s)
    check(set(bs) == set(BROKER_PORTS), f"{where}: brokers {sorted(bs)}")
    for i, port in BROKER_PORTS.items():
        b = bs[i]
        check(b["host"] == "127.0.0.1" and b["port"] == port and b["rack"] is None and b["fenced"] is False,
              f"{where}: broker {b}")
    check(s["offline_partitions"] == 0 and s["under_replicated_partitions"] == 0, f"{where}: partitions {s}")


# ----------------------------------------------------------------- fake servers

def fake_server(answer):
    """A listener on a port the kernel picks (the ports of this range are also
    other sessions' ephemeral ones) that reads one request per connection and
    sends answer() back, or holds the connection silent when that is None."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                try:
                    n = int.from_bytes(conn.recv(4), "big")
                    conn.recv(n)
                    out = answer()
                    if out is None:
                        conn.recv(1)  # hold the connection until the client leaves
                    else:
                        conn.sendall(out)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return srv


def failures():
    r = cli("--bootstrap-server", f"127.0.0.1:{DOWN_PORT}", "cluster", "status")
    check(r.returncode == 3 and f"127.0.0.1:{DOWN_PORT}" in r.stderr and "connect" in r.stderr,
          f"nothing reachable: exit {r.returncode}, stderr {r.stderr!r}")
    # ApiVersions answered with a frame of the wrong correlation id and junk
    garbage = fake_server(lambda: b"\x00\x00\x00\x08\x7f\xff\xff\xff\x01\x02\x03\x04")
    silent = fake_server(lambda: None)
    garbage_port, silent_port = garbage.getsockname()[1], silent.getsockname()[1]
    try:
        r = cli("--bootstrap-controller", f"127.0.0.1:{garbage_port}", "cluster", "status", "--json")
        check(r.returncode == 1 and "malformed" in r.stderr and str(garbage_port) in r.stderr and r.stdout == "",
              f"garbage answer: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
        t0 = time.monotonic()
        r = cli("--bootstrap-server", f"127.0.0.1:{silent_port}", "--timeout-ms", "500", "cluster", "status")
        check(r.returncode == 1 and "timed out" in r.stderr, f"silent server: exit {r.returncode}, {r.stderr!r}")
        check(time.monotonic() - t0 < 10, "the time-out was not kept")
    finally:
        garbage.close()
        silent.close()
    for args in ([], ["cluster", "status"], ["--bootstrap-server", "127.0.0.1:1", "cluster"],
                 ["--bootstrap-server", "nohostport", "cluster", "status"],
                 ["--bootstrap-server", "127.0.0.1:1", "--bootstrap-controller", "127.0.0.1:2", "cluster", "status"],
                 ["--bootstrap-server", "127.0.0.1:1", "cluster", "status", "--bogus"],
                 ["--bootstrap-server", "127.0.0.1:1", "topics", "list"]):
        r = cli(*args)
        check(r.returncode == 2 and "usage: sluice" in r.stderr, f"sluice {args}: exit {r.returncode}, {r.stderr!r}")
    r = cli("--help")
    check(r.returncode == 0 and "usage: sluice" in r.stdout, f"sluice --help: exit {r.returncode}, {r.stdout!r}")
    log("unreachable: exit 3, garbage, silent: exit 1 with a message; bad usage: exit 2; --help: usage on stdout, exit 0")


# ----------------------------------------------------------------- the test

def wait_for(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise lib.TestFailure(f"{what}: not within {timeout}s")
        time.sleep(0.3)


def cluster(root):
    start_controller(root)
    brokers = {i: start_broker(root, i) for i in BROKER_PORTS}
    b1, b2 = (f"127.0.0.1:{BROKER_PORTS[i]}" for i in (101, 102))
    ctl = f"127.0.0.1:{CONTROLLER_PORT}"
    create_topic(BROKER_PORTS[101], TOPIC, TOPIC_PARTITIONS)
    def placed():
        views = [leaders(BROKER_PORTS[i]) for i in BROKER_PORTS]
        ready = all(sum(1 for (t, _), l in m.items() if t == TOPIC and l >= 0) == TOPIC_PARTITIONS for m in views)
        return views[0] if ready else None

    lead = wait_for(f"{TOPIC} with leaders in both brokers' Metadata", placed, 30)
    spread = {l for (t, _), l in lead.items() if t == TOPIC}
    check(spread == set(BROKER_PORTS), f"{TOPIC}'s partitions are not on both brokers: leaders {spread}")
    led_by_102 = sum(1 for l in lead.values() if l == 102)
    log(f"{TOPIC}: {TOPIC_PARTITIONS} partitions over 101 and 102; 102 leads {led_by_102} of {len(lead)} partitions")

    check_healthy(status("--bootstrap-server", b1), "via broker 101")
    check_healthy(status("--bootstrap-controller", ctl), "via the controller")
    check_healthy(status("--bootstrap-server", f"127.0.0.1:{DOWN_PORT},{b2}"), "via a list whose first is down")
    r = cli("--bootstrap-server", b2, "cluster", "status")
    check(r.returncode == 0, f"table: exit {r.returncode} {r.stderr}")
    for word in ("Controllers (leader 1", "leader", "101", "102", "127.0.0.1:13010", "Offline partitions: 0",
                 "Under-replicated partitions: 0"):
        check(word in r.stdout, f"table lacks {word!r}:\n{r.stdout}")
    log("healthy: 1 leader, 2 unfenced brokers, 0 offline, 0 under-replicated (broker, controller, list, table)")

    other_commands(b1, b2, lead)

    kill9(brokers.pop(102))
    t0 = time.monotonic()
    log("broker 102 killed (-9)")

    def fenced_view():
        s = status("--bootstrap-server", b1)
        b = brokers_of(s).get(102)
        return s if b and b["fenced"] and s["offline_partitions"] == led_by_102 else None

    s = wait_for("broker 102 fenced with its partitions offline", fenced_view, SESSION_MS / 1000 + 20)
    log(f"broker 102 fenced and {led_by_102} partitions offline after {time.monotonic() - t0:.1f}s")
    check(brokers_of(s)[101]["fenced"] is False, f"broker 101 fenced too? {s}")
    check(s["under_replicated_partitions"] >= 0, f"{s}")
    s2 = status("--bootstrap-controller", ctl)
    check(brokers_of(s2)[102]["fenced"] is True and s2["offline_partitions"] == led_by_102,
          f"via the controller after the kill: {s2}")
    r = cli("--bootstrap-controller", ctl, "cluster", "status")
    line = next((ln for ln in r.stdout.splitlines() if ln.strip().startswith("102 ")), "")
    check(r.returncode == 0 and line.rstrip().endswith("yes"), f"table after the kill: broker 102 line {line!r}\n{r.stdout}")
    check(f"Offline partitions: {led_by_102} " in r.stdout, f"table's offline count:\n{r.stdout}")
    log("after the kill: 102 fenced, offline partitions = the ones it led (broker, controller, table)")


def cli_json(*args):
    r = cli(*args, "--json")
    check(r.returncode == 0, f"sluice {' '.join(args)} --json: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout)


def other_commands(b1, b2, lead):
    """logger, topic describe and group lag where two brokers lead partitions."""
    for node, server in ((101, b1), (102, b2)):
        d = cli_json("--bootstrap-server", server, "logger", "root")
        check(d["broker_id"] == node and d["loggers"][0]["name"] == "root", f"logger via {node}: {d}")
    d = cli_json("--bootstrap-server", b2, "topic", "describe", TOPIC)
    got = {(TOPIC, p["partition"]): p["leader"] for p in d["partitions"]}
    check(got == {k: v for k, v in lead.items() if k[0] == TOPIC}, f"topic describe leaders {got} != Metadata's {lead}")
    log("logger: each broker's own id; topic describe: the leaders on both brokers")
    kcat = lib.kcat_path(required=False)
    if not kcat:
        log("kcat not installed: group lag across two leaders not checked")
        return
    r = lib.run([kcat, "-b", b1, "-P", "-t", TOPIC, "-K", ":"], timeout=60,
                input="".join(f"k{i}:v{i}\n" for i in range(60)))
    check(r.returncode == 0, f"kcat -P: {r.stderr[-500:]}")
    r = lib.run([kcat, "-b", b1, "-G", "cli-lag", "-e", "-q", "-X", "auto.offset.reset=earliest",
                 "-X", "auto.commit.interval.ms=100", TOPIC], timeout=60)
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 60, f"kcat -G read {len(r.stdout.splitlines())} of 60")
    d = cli_json("--bootstrap-server", b2, "group", "lag", "cli-lag")
    parts = d["partitions"]
    check(len(parts) == TOPIC_PARTITIONS and d["total_lag"] == 0
          and all(p["log_end_offset"] is not None and p["lag"] == 0 for p in parts)
          and sum(p["log_end_offset"] for p in parts) == 60, f"group lag across both leaders: {d}")
    log("group lag: every partition's log end offset from its leader (101 and 102), lag 0")


def main():
    for p in [CONTROLLER_PORT, CONTROLLER_PORT + 1, DOWN_PORT, *BROKER_PORTS.values()]:
        check(not lib.port_open(p), f"port {p} is in use: this test needs 13000-13099 free")
    root = tempfile.mkdtemp(prefix="sluice-cli-status-")
    ok = False
    try:
        failures()
        cluster(root)
        ok = True
    finally:
        _cleanup()
        if ok and os.environ.get("SLUICE_TEST_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            for sub in ("c1/controller.log", "b101/broker.log", "b102/broker.log"):
                log(f"--- {sub} ---\n{tail(os.path.join(root, sub))}")
            log(f"kept {root}")


if __name__ == "__main__":
    lib.main(main)
