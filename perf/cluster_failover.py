#!/usr/bin/env python3
"""The measurements of perf/cluster-failover.sh on one running cluster of 3 controllers
and 3 brokers (Sluice's from deploy/local-cluster.sh or Apache Kafka's), described by a
cluster.env (BROKERS, CONTROLLERS, PORT_<id>, PID_<id>). Run by the shell script; by
hand:

  perf/cluster_failover.py --env DIR/cluster.env --start-cmd 'deploy/local-cluster.sh start DIR' \\
      --label sluice [--partitions 1000] [--topics 50] [--rounds 3] [--json FILE]

1. Metadata propagation: --topics topics of one partition are created one at a time
   (CreateTopics v7 to a broker, round robin); for each, the time from sending the
   request until every broker's Metadata shows the topic with a leader (each broker
   polled in turn on a kept connection). p50, p99 and max.
2. A broker's death: one topic of 3 x --partitions partitions, replication factor 1,
   placed by the cluster (both spread them evenly: broker 3 leads --partitions of them);
   kill -9 of broker 3; the time until it leaves the broker list of both other brokers'
   Metadata (fenced) and until all its partitions have leader -1 in both (offline). Then it is restarted (--start-cmd) and
   the time until all its partitions lead again everywhere is taken too.
3. Controller failover, --rounds times: kill -9 of the active controller; the time until
   another answers DescribeQuorum as the leader, and until a CreateTopics sent through a
   broker succeeds; the killed one is restarted and caught up before the next round.

All clients are Python on the same 2 cores as the cluster: compare the targets of one
run, not absolute figures across machines.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import lib  # noqa: E402
from lib import Enc  # noqa: E402

NONE, UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE, NOT_CONTROLLER = 0, 3, 5, 41
VICTIM = 3


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_env(path):
    env = {}
    with open(path) as f:
        for ln in f:
            m = re.fullmatch(r'([A-Z_0-9]+)=("?)(.*)\2\n?', ln)
            if m:
                env[m.group(1)] = m.group(3)
    return env


class Cluster:
    def __init__(self, env_path, start_cmd):
        self.env_path, self.start_cmd = env_path, start_cmd
        self.env = read_env(env_path)
        self.conns = {}

    def reload(self):
        self.env = read_env(self.env_path)

    @property
    def brokers(self):
        return [int(x) for x in self.env["BROKERS"].split()]

    @property
    def controllers(self):
        return [int(x) for x in self.env["CONTROLLERS"].split()]

    def port(self, node):
        return int(self.env[f"PORT_{node}"])

    def kill9(self, node):
        pid = int(self.env[f"PID_{node}"])
        os.kill(pid, signal.SIGKILL)
        t = time.monotonic()
        while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z":
            if time.monotonic() - t > 30:
                raise RuntimeError(f"node {node} pid {pid} survived SIGKILL")
            time.sleep(0.005)
        return t

    def start(self, node):
        r = subprocess.run(self.start_cmd + [str(node)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"starting node {node}: {r.stdout}{r.stderr}")
        self.reload()

    def call(self, port, fn, timeout=5):
        """fn(connection) on a kept connection (each closed one leaves a TIME_WAIT port)."""
        for attempt in (0, 1):
            c = self.conns.pop(port, None)
            try:
                c = c or lib.Conn(port, timeout=timeout)
                res = fn(c)
                self.conns[port] = c
                return res
            except (OSError, lib.ProtocolError):
                if c:
                    c.close()
                if attempt:
                    raise
        return None


# ----------------------------------------------------------------- requests

def metadata_topic(c, topic):
    """Metadata v12 for one topic, no auto-creation: (broker ids, error, {partition: leader})."""
    body = Enc().array_len(1, True).raw(bytes(16)).string(topic, True).tags().i8(0).i8(0).tags().done()
    d = c.request(3, 12, body, flexible_req=True)
    d.i32()
    brokers = []
    for _ in range(d.array_len(True)):
        brokers.append(d.i32())
        d.string(True), d.i32(), d.string(True)
        d.tags()
    d.string(True), d.i32()
    err, parts = None, {}
    for _ in range(d.array_len(True)):
        err = d.i16()
        d.string(True), d._take(16), d.i8()
        for _ in range(d.array_len(True)):
            d.i16()
            idx, leader = d.i32(), d.i32()
            d.i32()
            for _ in range(3):
                for _ in range(max(d.array_len(True), 0)):
                    d.i32()
            d.tags()
            parts[idx] = leader
        d.i32()
        d.tags()
    return brokers, err, parts


def create_topic(c, name, partitions=1, on_broker=None, timeout_ms=60000):
    """CreateTopics v7, replication factor 1; on_broker: every partition placed there.
    Returns (error, message)."""
    e = Enc().array_len(1, True).string(name, True)
    if on_broker is None:
        e.i32(partitions).i16(1).array_len(0, True)
    else:
        e.i32(-1).i16(-1).array_len(partitions, True)
        for p in range(partitions):
            e.i32(p).array_len(1, True).i32(on_broker).tags()
    e.array_len(0, True).tags().i32(timeout_ms).i8(0).tags()
    d = c.request(19, 7, e.done(), flexible_req=True)
    d.i32()
    for _ in range(d.array_len(True)):
        d.string(True), d._take(16)
        return d.i16(), d.string(True)
    return -1, "no topic in the answer"


def describe_quorum(c):
    """DescribeQuorum v0: (error, leader, epoch, {voter: log end offset}, high watermark)."""
    body = Enc().array_len(1, True).string("__cluster_metadata", True).array_len(1, True).i32(0)
    body = body.tags().tags().tags().done()
    d = c.request(55, 0, body, flexible_req=True)
    top = d.i16()
    res = (top, -1, -1, {}, -1)
    for _ in range(d.array_len(True)):
        d.string(True)
        for _ in range(d.array_len(True)):
            d.i32()
            err, leader, epoch, hw = d.i16(), d.i32(), d.i32(), d.i64()
            voters = {}
            for _ in range(d.array_len(True)):
                rid = d.i32()  # (not voters[d.i32()] = d.i64(): the right side is read first)
                voters[rid] = d.i64()
                d.tags()
            for _ in range(d.array_len(True)):
                d.i32(), d.i64()
                d.tags()
            d.tags()
            res = (err or top, leader, epoch, voters, hw)
        d.tags()
    return res


# ----------------------------------------------------------------- measurements

def wait_visible(cl, topic, want, deadline_s=120.0, since=None):
    """Polls every broker until want(brokers, err, parts) holds on all; returns the
    seconds since `since` at which each broker first satisfied it."""
    since = since or time.monotonic()
    seen = {}
    while len(seen) < len(cl.brokers):
        for b in cl.brokers:
            if b in seen:
                continue
            try:
                r = cl.call(cl.port(b), lambda c: metadata_topic(c, topic))
            except (OSError, lib.ProtocolError):
                continue
            if want(*r):
                seen[b] = time.monotonic() - since
        if time.monotonic() - since > deadline_s:
            raise RuntimeError(f"{topic}: not as wanted on brokers {set(cl.brokers) - set(seen)} after {deadline_s}s")
    return seen


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q / 100 * len(v) + 0.5)) - 1))]


def propagation(cl, topics, tag):
    lat, create = [], []
    for i in range(topics):
        name = f"prop-{tag}-{i}"
        port = cl.port(cl.brokers[i % len(cl.brokers)])
        t0 = time.monotonic()
        err, msg = cl.call(port, lambda c: create_topic(c, name), timeout=70)
        create.append(time.monotonic() - t0)
        if err != NONE:
            raise RuntimeError(f"CreateTopics {name}: {err} {msg}")
        seen = wait_visible(cl, name, lambda _b, e, p: e == NONE and p and all(x >= 0 for x in p.values()),
                            since=t0)
        lat.append(max(seen.values()))
    res = {"topics": topics, "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000,
           "max_ms": max(lat) * 1000, "create_p50_ms": statistics.median(create) * 1000}
    log(f"propagation over {topics} topics: create -> visible on every broker p50 {res['p50_ms']:.1f} ms, "
        f"p99 {res['p99_ms']:.1f} ms, max {res['max_ms']:.1f} ms (CreateTopics answered: p50 "
        f"{res['create_p50_ms']:.1f} ms)")
    return res


def broker_death(cl, partitions, tag):
    """partitions: how many the victim leads. The topic has that many per broker, placed
    by the cluster (spread evenly by both Sluice and Kafka)."""
    topic = f"victim-{tag}"
    total = partitions * len(cl.brokers)
    t0 = time.monotonic()
    err, msg = cl.call(cl.port(cl.brokers[0]), lambda c: create_topic(c, topic, total), timeout=120)
    if err != NONE:
        raise RuntimeError(f"CreateTopics {topic} ({total} partitions): {err} {msg}")
    seen = wait_visible(cl, topic, lambda _b, e, p: e == NONE and len(p) == total and all(x >= 0 for x in p.values()),
                        deadline_s=300)
    _, _, parts = cl.call(cl.port(cl.brokers[0]), lambda c: metadata_topic(c, topic))
    mine = sorted(p for p, ld in parts.items() if ld == VICTIM)
    log(f"{topic}: {total} partitions with leaders on every broker {max(seen.values()):.1f}s after the request; "
        f"broker {VICTIM} leads {len(mine)}")
    time.sleep(2)
    others = [b for b in cl.brokers if b != VICTIM]
    t0 = cl.kill9(VICTIM)
    fenced, offline = {}, {}
    while len(offline) < len(others):
        for b in others:
            if b in offline:
                continue
            try:
                brokers, e, parts = cl.call(cl.port(b), lambda c: metadata_topic(c, topic))
            except (OSError, lib.ProtocolError):
                continue
            now = time.monotonic() - t0
            if VICTIM not in brokers and b not in fenced:
                fenced[b] = now
            if len(parts) == total and all(parts[p] == -1 for p in mine):
                offline[b] = now
        if time.monotonic() - t0 > 300:
            raise RuntimeError(f"{topic}: partitions not offline after 300 s: {offline}")
        time.sleep(0.002)
    res = {"partitions": len(mine), "fenced_s": max(fenced.values()) if len(fenced) == len(others) else None,
           "offline_s": max(offline.values())}
    log(f"kill -9 of broker {VICTIM}: gone from Metadata after {res['fenced_s']:.2f}s, all {len(mine)} of its partitions "
        f"offline on every other broker after {res['offline_s']:.2f}s")
    t1 = time.monotonic()
    cl.start(VICTIM)
    seen = wait_visible(cl, topic, lambda _b, e, p: len(p) == total and all(p[x] == VICTIM for x in mine),
                        deadline_s=300, since=t1)
    res["back_s"] = max(seen.values())
    log(f"broker {VICTIM} restarted: all {len(mine)} of its partitions led by it again everywhere after "
        f"{res['back_s']:.2f}s (start included)")
    return res


def active_controller(cl):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for n in cl.controllers:
            try:
                err, leader, epoch, voters, hw = cl.call(cl.port(n), describe_quorum)
            except (OSError, lib.ProtocolError):
                continue
            if err == NONE:
                return n, epoch, voters, hw
        time.sleep(0.02)
    raise RuntimeError("no active controller")


def controller_round(cl, rnd, tag):
    active, epoch, _, _ = active_controller(cl)
    survivors = [n for n in cl.controllers if n != active]
    created = {}

    def create_loop():
        port = cl.port(cl.brokers[rnd % len(cl.brokers)])
        while "t" not in created and time.monotonic() - t0 < 120:
            try:
                err, _ = cl.call(port, lambda c: create_topic(c, f"failover-{tag}-{rnd}", timeout_ms=5000), timeout=10)
            except (OSError, lib.ProtocolError):
                err = -1
            if err == NONE:
                created["t"] = time.monotonic() - t0
            else:
                time.sleep(0.01)

    t0 = cl.kill9(active)
    th = threading.Thread(target=create_loop, daemon=True)
    th.start()
    elected = None
    while elected is None:
        for n in survivors:
            try:
                err, leader, e, _, _ = cl.call(cl.port(n), describe_quorum, timeout=2)
            except (OSError, lib.ProtocolError):
                continue
            if err == NONE and e > epoch:
                elected = (n, time.monotonic() - t0)
                break
        if time.monotonic() - t0 > 120:
            raise RuntimeError("no new controller within 120 s")
        time.sleep(0.002)
    th.join(130)
    log(f"round {rnd}: kill -9 of active controller {active}: controller {elected[0]} answers DescribeQuorum as "
        f"the leader after {elected[1]:.2f}s, a CreateTopics through a broker succeeds after "
        f"{created.get('t', float('nan')):.2f}s")
    cl.start(active)
    deadline = time.monotonic() + 120
    while True:
        n, _, voters, hw = active_controller(cl)
        if voters.get(active) == hw and all(v == hw for v in voters.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"controller {active} did not catch up: {voters}, hw {hw}")
        time.sleep(0.1)
    time.sleep(2)
    return {"elected_s": elected[1], "create_ok_s": created.get("t")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True)
    ap.add_argument("--start-cmd", required=True, help="command to which a node id is appended to start it")
    ap.add_argument("--label", required=True)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    cl = Cluster(a.env, a.start_cmd.split())
    tag = str(int(time.time()))
    out = {"label": a.label}
    out["propagation"] = propagation(cl, a.topics, tag)
    out["broker_death"] = broker_death(cl, a.partitions, tag)
    rounds = [controller_round(cl, r, tag) for r in range(a.rounds)]
    el = [r["elected_s"] for r in rounds]
    cr = [r["create_ok_s"] for r in rounds if r["create_ok_s"] is not None]
    out["controller_failover"] = {"rounds": rounds, "elected_median_s": statistics.median(el),
                                  "elected_max_s": max(el),
                                  "create_ok_median_s": statistics.median(cr) if cr else None}
    log(f"controller failover over {a.rounds} rounds: new leader median {statistics.median(el):.2f}s "
        f"(max {max(el):.2f}s); CreateTopics works again median "
        f"{out['controller_failover']['create_ok_median_s'] or float('nan'):.2f}s")
    for c in cl.conns.values():
        c.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
