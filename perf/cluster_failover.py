#!/usr/bin/env python3
"""The measurements of perf/cluster-failover.sh on one running cluster of 3 controllers
and 3 brokers (Sluice's from deploy/local-cluster.sh or Apache Kafka's), described by a
cluster.env (BROKERS, CONTROLLERS, PORT_<id>, PID_<id>). Run by the shell script; by
hand:

  perf/cluster_failover.py --env DIR/cluster.env --start-cmd 'deploy/local-cluster.sh start DIR' \\
      --label sluice [--partitions 1000] [--topics 50] [--rounds 3] [--kills 10] [--stops 5]
      [--leader-partitions 100] [--probe-ms 10] [--tests propagation,broker,controller,leader]
      [--json FILE]

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
4. Leader failover (replication), --kills times kill -9 and then --stops times SIGTERM:
   one topic of --leader-partitions partitions with replication factor 3; before each
   round every ISR is full and (as far as the cluster gives leadership back within 60 s)
   every partition is led by its preferred replica; the victim is the broker leading the
   most partitions. A prober (one Python thread, raw Produce v7 acks=-1 of one 100-byte
   record per partition, one request per leader, Metadata v12 from a surviving broker
   before each pass, a pass every --probe-ms) writes to every partition the victim leads
   from a second before the signal until each of them has taken a write at another
   broker. kill -9: the time from the kill until each partition accepts a write again
   (per kill: the slowest of its partitions). SIGTERM (controlled shutdown): each
   partition's write unavailability, from its last write accepted by the old leader to
   its first accepted by the new one, beside the prober's Metadata round trip, the time
   from the new leader showing in Metadata to its first accepted write, and an acks=all
   write's round trip at the victim before the signal. The victim
   is restarted and caught up between rounds.

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
TESTS = ("propagation", "broker", "controller", "leader")


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

    def signal_and_wait(self, node, sig, wait_s=120):
        """Sends sig to the node; returns the time it was sent. Waits (bounded) for it to
        exit in a thread, so that the caller measures meanwhile; join the returned
        thread before restarting the node."""
        pid = int(self.env[f"PID_{node}"])
        os.kill(pid, sig)
        t = time.monotonic()

        def gone():
            while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z":
                if time.monotonic() - t > wait_s:
                    log(f"node {node} pid {pid} still running {wait_s}s after signal {sig}: SIGKILL")
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.02)
        th = threading.Thread(target=gone, daemon=True)
        th.start()
        return t, th

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


def create_topic(c, name, partitions=1, on_broker=None, timeout_ms=60000, replication=1):
    """CreateTopics v7, replication factor `replication` (placed by the cluster);
    on_broker: every partition placed there, one replica. Returns (error, message)."""
    e = Enc().array_len(1, True).string(name, True)
    if on_broker is None:
        e.i32(partitions).i16(replication).array_len(0, True)
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


def metadata_replicas(c, topic):
    """Metadata v12 for one topic: (broker ids, error, {partition: (leader, replicas, isr)})."""
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
            lists = []
            for _ in range(3):
                lists.append([d.i32() for _ in range(max(d.array_len(True), 0))])
            d.tags()
            parts[idx] = (leader, lists[0], lists[1])
        d.i32()
        d.tags()
    return brokers, err, parts


def produce_many(c, topic, partitions, batch, timeout_ms):
    """Produce v7, acks=-1, the same batch to each partition: {partition: error}."""
    e = Enc().string(None).i16(-1).i32(timeout_ms).array_len(1).string(topic)
    e.array_len(len(partitions))
    for p in partitions:
        e.i32(p).bytes_(batch)
    d = c.request(0, 7, e.done())
    res = {}
    for _ in range(d.array_len()):
        d.string()
        for _ in range(d.array_len()):
            idx, err = d.i32(), d.i16()
            d.i64(), d.i64(), d.i64()  # base offset, log append time, log start offset
            res[idx] = err
    d.i32()  # throttle
    return res


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


class Prober(threading.Thread):
    """Writes to `parts` of `topic` in passes until stopped: before each pass a Metadata
    from a broker other than the victim tells the leaders; each leader gets one Produce
    for its pending partitions on a kept connection. Records, per partition, every
    accepted write's time and leader (first and last ones only), and the Metadata round
    trips."""

    def __init__(self, cl, topic, parts, victim, probe_s, timeout_ms=3000):
        super().__init__(daemon=True)
        self.cl, self.topic, self.parts, self.victim = cl, topic, sorted(parts), victim
        self.probe_s, self.timeout_ms = probe_s, timeout_ms
        self.others = [b for b in cl.brokers if b != victim]
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.event_t = None           # set by the caller at the signal
        self.last_victim_ok = {}      # partition -> last accepted write at the victim
        self.first_new_ok = {}        # partition -> (time, leader) first accepted elsewhere after the event
        self.first_new_meta = {}      # partition -> time a new leader first showed in Metadata
        self.md_rtt = []
        self.write_rtt = []           # before the event: one acks=all Produce to the victim, answered in full
        self.errors = {}              # error code -> count (after the event)
        self.trace = []               # after the event: (sent, answered, leader, accepted, errors) per Produce
        self.conns = {}
        self.batch = lib.record_batch([(None, b"x" * 100, [])])

    def done(self):
        with self.lock:
            return len(self.first_new_ok) == len(self.parts)

    def call(self, port, fn, timeout):
        c = self.conns.pop(port, None)
        try:
            c = c or lib.Conn(port, timeout=timeout)
            res = fn(c)
            self.conns[port] = c
            return res
        except (OSError, lib.ProtocolError):
            if c:
                c.close()
            raise

    def run(self):
        i = 0
        while not self.stop_flag.is_set():
            t_pass = time.monotonic()
            md_from = self.others[i % len(self.others)]
            i += 1
            try:
                t = time.monotonic()
                _, _, parts = self.call(self.cl.port(md_from), lambda c: metadata_replicas(c, self.topic), 5)
                self.md_rtt.append(time.monotonic() - t)
            except (OSError, lib.ProtocolError):
                time.sleep(self.probe_s)
                continue
            now = time.monotonic()
            by_leader = {}
            for p in self.parts:
                leader = parts.get(p, (-1,))[0]
                with self.lock:
                    after = self.event_t is not None
                    if after and leader not in (-1, self.victim) and p not in self.first_new_meta:
                        self.first_new_meta[p] = now
                    if p in self.first_new_ok:
                        continue
                if leader >= 0:
                    by_leader.setdefault(leader, []).append(p)
            for leader, ps in by_leader.items():
                t_send = time.monotonic()
                try:
                    res = self.call(self.cl.port(leader),
                                    lambda c: produce_many(c, self.topic, ps, self.batch, self.timeout_ms),
                                    self.timeout_ms / 1000 + 5)
                except (OSError, lib.ProtocolError):
                    res = {p: -1 for p in ps}
                t_ok = time.monotonic()
                with self.lock:
                    after = self.event_t is not None
                    if not after and leader == self.victim and res and all(e == NONE for e in res.values()):
                        self.write_rtt.append(t_ok - t_send)
                    if after and len(self.trace) < 2000:
                        self.trace.append((round(t_send - self.event_t, 4), round(t_ok - self.event_t, 4), leader,
                                           sum(1 for e in res.values() if e == NONE),
                                           sorted({e for e in res.values() if e != NONE})))
                    for p, err in res.items():
                        if err != NONE:
                            if after:
                                self.errors[err] = self.errors.get(err, 0) + 1
                            continue
                        if leader == self.victim:
                            self.last_victim_ok[p] = t_ok
                        elif after and p not in self.first_new_ok:
                            self.first_new_ok[p] = (t_ok, leader)
            rest = self.probe_s - (time.monotonic() - t_pass)
            if rest > 0:
                time.sleep(rest)
        for c in self.conns.values():
            c.close()


def wait_replicated(cl, topic, total, prefer_s=60.0, deadline_s=300.0):
    """Waits until every partition has a leader and all its replicas in the ISR on every
    broker, then (at most prefer_s more) until each is led by its preferred replica.
    Returns {partition: (leader, replicas, isr)} as broker 1 sees it."""
    t0 = time.monotonic()
    preferred_since = None
    while True:
        views, ok = [], True
        for b in cl.brokers:
            try:
                _, e, parts = cl.call(cl.port(b), lambda c: metadata_replicas(c, topic))
            except (OSError, lib.ProtocolError):
                ok = False
                break
            views.append(parts)
            ok = ok and e == NONE and len(parts) == total and all(
                ld >= 0 and len(isr) == len(reps) == 3 for ld, reps, isr in parts.values())
        if ok:
            if all(ld == reps[0] for ld, reps, _ in views[0].values()):
                return views[0]
            preferred_since = preferred_since or time.monotonic()
            if time.monotonic() - preferred_since > prefer_s:
                return views[0]
        if time.monotonic() - t0 > deadline_s:
            raise RuntimeError(f"{topic}: not fully replicated after {deadline_s}s")
        time.sleep(0.2)


def leader_round(cl, topic, total, kind, rnd, probe_s):
    parts = wait_replicated(cl, topic, total)
    count = {}
    for ld, _, _ in parts.values():
        count[ld] = count.get(ld, 0) + 1
    victim = max(sorted(count), key=lambda b: count[b])
    mine = [p for p, (ld, _, _) in parts.items() if ld == victim]
    preferred = sum(1 for ld, reps, _ in parts.values() if ld == reps[0])
    pr = Prober(cl, topic, mine, victim, probe_s)
    pr.start()
    # Every partition the victim leads takes writes before the signal (a fresh topic's
    # first acks=all writes wait for the followers' first fetches), then 0.5 s more.
    t_warm = time.monotonic()
    while time.monotonic() - t_warm < 30:
        with pr.lock:
            warm = len(pr.last_victim_ok)
        if warm == len(mine):
            break
        time.sleep(0.05)
    if warm < len(mine):
        log(f"  (only {warm} of the victim's {len(mine)} partitions took a write in 30 s before the signal)")
    time.sleep(0.5)
    sig = signal.SIGKILL if kind == "kill" else signal.SIGTERM
    t0, exiting = cl.signal_and_wait(victim, sig)
    with pr.lock:
        pr.event_t = t0
    while not pr.done() and time.monotonic() - t0 < 120:
        time.sleep(0.01)
    pr.stop_flag.set()
    pr.join(30)
    exiting.join(130)
    with pr.lock:
        first = dict(pr.first_new_ok)
        last = dict(pr.last_victim_ok)
        meta = dict(pr.first_new_meta)
        errors = dict(pr.errors)
        trace = [t for t in pr.trace if t[2] != victim]
    missing = sorted(set(mine) - set(first))
    resume = sorted(first[p][0] - t0 for p in first)             # signal -> writable elsewhere
    meta_s = sorted(meta[p] - t0 for p in meta)
    gaps = sorted(first[p][0] - last[p] for p in first if p in last)  # last old write -> first new write
    meta_to_write = sorted(first[p][0] - meta[p] for p in first if p in meta)  # new leader seen -> its first write
    last_old = sorted(last[p] - t0 for p in last)
    res = {"kind": kind, "round": rnd, "victim": victim, "partitions": len(mine),
           "preferred_leaders": preferred, "missing": missing,
           "resume_s": resume, "new_leader_in_metadata_s": meta_s, "gap_s": gaps,
           "old_leader_last_write_s": last_old,
           "errors_after": {str(k): v for k, v in sorted(errors.items())},
           "metadata_rtt_ms_median": statistics.median(pr.md_rtt) * 1000 if pr.md_rtt else None,
           "write_rtt_ms_median_before": statistics.median(pr.write_rtt) * 1000 if pr.write_rtt else None,
           "new_leader_seen_to_write_s": meta_to_write,
           "probe_passes": len(pr.md_rtt),
           "trace_new_leaders": trace[:50]}
    res["all_resumed_s"] = max(resume) if resume and not missing else None
    res["max_gap_s"] = max(gaps) if gaps else None
    if kind == "kill":
        log(f"kill -9 #{rnd} of broker {victim} (leads {len(mine)} of {total}): writes accepted again by every "
            f"partition after {fmt_s(res['all_resumed_s'])} (first {fmt_s(resume[0] if resume else None)}, "
            f"median {fmt_s(statistics.median(resume) if resume else None)}); new leaders in Metadata after "
            f"{fmt_s(meta_s[0] if meta_s else None)}..{fmt_s(meta_s[-1] if meta_s else None)}"
            + (f"; {len(missing)} partitions never resumed" if missing else ""))
    else:
        log(f"SIGTERM #{rnd} of broker {victim} (leads {len(mine)} of {total}): write unavailability per partition "
            f"median {fmt_ms(statistics.median(gaps) if gaps else None)}, max {fmt_ms(res['max_gap_s'])} "
            f"(Metadata round trip median {res['metadata_rtt_ms_median'] or float('nan'):.1f} ms, a pass every "
            f"{probe_s * 1000:.0f} ms; new leader in Metadata -> its first write median "
            f"{fmt_ms(statistics.median(meta_to_write) if meta_to_write else None)}, an acks=all write before the "
            f"signal {res['write_rtt_ms_median_before'] or float('nan'):.1f} ms); all moved {fmt_s(res['all_resumed_s'])} after the signal; errors seen "
            f"{res['errors_after']}" + (f"; {len(missing)} partitions never resumed" if missing else ""))
    t1 = time.monotonic()
    cl.start(victim)
    res["restart_s"] = time.monotonic() - t1
    return res


def fmt_s(v):
    return "–" if v is None else f"{v:.3f} s"


def fmt_ms(v):
    return "–" if v is None else f"{v * 1000:.1f} ms"


def leader_failover(cl, tag, partitions, kills, stops, probe_s):
    topic = f"leaders-{tag}"
    err, msg = cl.call(cl.port(cl.brokers[0]), lambda c: create_topic(c, topic, partitions, replication=3),
                       timeout=120)
    if err != NONE:
        raise RuntimeError(f"CreateTopics {topic} ({partitions} partitions, RF 3): {err} {msg}")
    rounds = []
    for i in range(kills):
        rounds.append(leader_round(cl, topic, partitions, "kill", i + 1, probe_s))
    for i in range(stops):
        rounds.append(leader_round(cl, topic, partitions, "stop", i + 1, probe_s))
    wait_replicated(cl, topic, partitions, prefer_s=0)
    out = {"partitions": partitions, "probe_ms": probe_s * 1000, "rounds": rounds}
    k = [r for r in rounds if r["kind"] == "kill"]
    if k:
        alls = [r["all_resumed_s"] for r in k if r["all_resumed_s"] is not None]
        pooled = sorted(x for r in k for x in r["resume_s"])
        out["kill"] = {"kills": len(k), "failed": len(k) - len(alls),
                       "all_resumed_p50_s": pct(alls, 50) if alls else None,
                       "all_resumed_p99_s": pct(alls, 99) if alls else None,
                       "all_resumed_max_s": max(alls) if alls else None,
                       "partition_p50_s": pct(pooled, 50) if pooled else None,
                       "partition_p99_s": pct(pooled, 99) if pooled else None,
                       "victim_partitions_median": statistics.median(r["partitions"] for r in k)}
        log(f"leader kill -9 over {len(k)} kills: every partition writable again p50 "
            f"{fmt_s(out['kill']['all_resumed_p50_s'])}, p99 {fmt_s(out['kill']['all_resumed_p99_s'])}; "
            f"per partition p50 {fmt_s(out['kill']['partition_p50_s'])}, p99 {fmt_s(out['kill']['partition_p99_s'])}")
    s_ = [r for r in rounds if r["kind"] == "stop"]
    if s_:
        gaps = sorted(x for r in s_ for x in r["gap_s"])
        maxes = [r["max_gap_s"] for r in s_ if r["max_gap_s"] is not None]
        rtt = [r["metadata_rtt_ms_median"] for r in s_ if r["metadata_rtt_ms_median"] is not None]
        wrtt = [r["write_rtt_ms_median_before"] for r in s_ if r.get("write_rtt_ms_median_before") is not None]
        seen = sorted(x for r in s_ for x in r.get("new_leader_seen_to_write_s", []))
        out["stop"] = {"stops": len(s_), "failed": sum(1 for r in s_ if r["missing"]),
                       "gap_p50_ms": pct(gaps, 50) * 1000 if gaps else None,
                       "gap_p99_ms": pct(gaps, 99) * 1000 if gaps else None,
                       "gap_max_ms": max(gaps) * 1000 if gaps else None,
                       "per_stop_max_gap_p50_ms": pct(maxes, 50) * 1000 if maxes else None,
                       "all_moved_p50_s": pct([r["all_resumed_s"] for r in s_ if r["all_resumed_s"]], 50)
                       if any(r["all_resumed_s"] for r in s_) else None,
                       "metadata_rtt_ms_median": statistics.median(rtt) if rtt else None,
                       "write_rtt_ms_median_before": statistics.median(wrtt) if wrtt else None,
                       "seen_to_write_p50_ms": pct(seen, 50) * 1000 if seen else None,
                       "seen_to_write_max_ms": max(seen) * 1000 if seen else None}
        log(f"leader SIGTERM over {len(s_)} stops: write unavailability per partition p50 "
            f"{out['stop']['gap_p50_ms'] or float('nan'):.1f} ms, p99 {out['stop']['gap_p99_ms'] or float('nan'):.1f} ms, "
            f"max {out['stop']['gap_max_ms'] or float('nan'):.1f} ms (Metadata round trip median "
            f"{out['stop']['metadata_rtt_ms_median'] or float('nan'):.1f} ms); new leader in Metadata -> its first "
            f"write p50 {out['stop']['seen_to_write_p50_ms'] or float('nan'):.1f} ms, max "
            f"{out['stop']['seen_to_write_max_ms'] or float('nan'):.1f} ms (an acks=all write before the signal "
            f"{out['stop']['write_rtt_ms_median_before'] or float('nan'):.1f} ms)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True)
    ap.add_argument("--start-cmd", required=True, help="command to which a node id is appended to start it")
    ap.add_argument("--label", required=True)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kills", type=int, default=10, help="leader failover: kill -9 rounds")
    ap.add_argument("--stops", type=int, default=5, help="leader failover: SIGTERM rounds")
    ap.add_argument("--leader-partitions", type=int, default=100)
    ap.add_argument("--probe-ms", type=float, default=10)
    ap.add_argument("--tests", default=",".join(TESTS), help="which measurements, of " + ",".join(TESTS))
    ap.add_argument("--json")
    a = ap.parse_args()
    tests = [t for t in a.tests.split(",") if t]
    for t in tests:
        if t not in TESTS:
            ap.error(f"--tests: unknown '{t}'")
    cl = Cluster(a.env, a.start_cmd.split())
    tag = str(int(time.time()))
    out = {"label": a.label}
    if "propagation" in tests:
        out["propagation"] = propagation(cl, a.topics, tag)
    if "broker" in tests:
        out["broker_death"] = broker_death(cl, a.partitions, tag)
    if "controller" in tests:
        rounds = [controller_round(cl, r, tag) for r in range(a.rounds)]
        el = [r["elected_s"] for r in rounds]
        cr = [r["create_ok_s"] for r in rounds if r["create_ok_s"] is not None]
        out["controller_failover"] = {"rounds": rounds, "elected_median_s": statistics.median(el),
                                      "elected_max_s": max(el),
                                      "create_ok_median_s": statistics.median(cr) if cr else None}
        log(f"controller failover over {a.rounds} rounds: new leader median {statistics.median(el):.2f}s "
            f"(max {max(el):.2f}s); CreateTopics works again median "
            f"{out['controller_failover']['create_ok_median_s'] or float('nan'):.2f}s")
    if "leader" in tests and a.kills + a.stops > 0:
        out["leader_failover"] = leader_failover(cl, tag, a.leader_partitions, a.kills, a.stops,
                                                 a.probe_ms / 1000)
    for c in cl.conns.values():
        c.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
