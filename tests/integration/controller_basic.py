#!/usr/bin/env python3
"""sluice-controller on its own, spoken to with Kafka's protocol (a tiny client below).

Proves, with 1 controller and with 3:
- a controller starts from controller.properties, is elected, answers ApiVersions
  (exactly the APIs it serves), DescribeQuorum (leader, epoch, voters, their
  endpoints) and DescribeCluster (controller endpoints, active controller);
- a broker registers (BrokerRegistration), is unfenced by its heartbeats, and
  CreateTopics then creates a topic whose response carries the Sluice tag 1000
  (SluiceMetadataOffset) = the last record's offset; the metadata log (Fetch of
  __cluster_metadata) returns record batches with offsets 0..HW-1 holding that
  topic's TopicRecord, a fetch at the end long-polls (and a change wakes it), and
  FetchSnapshot returns the image;
- non-leaders refuse writes with NOT_CONTROLLER and metadata fetches with
  NOT_LEADER_OR_FOLLOWER;
- kill -9 of the active controller: another is active within a few election
  timeouts, the topic created before is still there, creation works again; the
  killed one restarted catches up (the leader's DescribeQuorum shows its log end
  equal to the high watermark, its own view too);
- SIGTERM stops a controller cleanly (exit 0) and a restart keeps the state.

Python 3 standard library only. Ports 31000-31099 on 127.0.0.1.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import lib
from lib import Enc, Dec, check, log

ROOT = lib.ROOT
METADATA_TOPIC = "__cluster_metadata"
CLUSTER_ID = "sluice-test-cluster"
TAG_METADATA_OFFSET = 1000

# Kafka error codes used here
NONE, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE = 0, 6, 1
TOPIC_ALREADY_EXISTS, NOT_CONTROLLER, UNSUPPORTED_VERSION = 36, 41, 35
INVALID_UPDATE_VERSION, DUPLICATE_BROKER_REGISTRATION = 95, 101


def controller_path():
    env = os.environ.get("SLUICE_CONTROLLER")
    p = env or os.path.join(ROOT, "build", "control", "sluice-controller")
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        # A test that cannot run fails loudly (no skip): the binary is part of the build.
        raise lib.TestFailure(f"sluice-controller not found at {p} (build it: ninja -C build control/sluice-controller)")
    return p


# ----------------------------------------------------------------- processes

_live = []


def _cleanup():
    for c in list(_live):
        c.kill(quiet=True)


def _on_signal(sig, frame):
    _cleanup()
    sys.exit(128 + sig)


import atexit  # noqa: E402

atexit.register(_cleanup)
signal.signal(signal.SIGTERM, _on_signal)


class Controller:
    """One sluice-controller process with its own properties file, data dir and log."""

    def __init__(self, root, node_id, port, voters, election_ms=1000, extra=None):
        self.node_id, self.port = node_id, port
        self.dir = os.path.join(root, f"c{node_id}")
        os.makedirs(self.dir, exist_ok=True)
        self.props = os.path.join(self.dir, "controller.properties")
        self.logpath = os.path.join(self.dir, "controller.log")
        lines = {
            "process.roles": "controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "metadata.log.dir": os.path.join(self.dir, "metadata"),
            "cluster.id": CLUSTER_ID,
            "controller.quorum.election.timeout.ms": str(election_ms),
            # broker keys a shared Kafka file may carry: warned about, ignored
            "log.retention.hours": "168",
        }
        lines.update(extra or {})
        with open(self.props, "w") as f:
            for k, v in lines.items():
                f.write(f"{k}={v}\n")
        self.proc = None

    def start(self):
        out = open(self.logpath, "a")
        self.proc = subprocess.Popen([controller_path(), self.props], stdout=out, stderr=subprocess.STDOUT)
        out.close()
        _live.append(self)
        if not lib.wait_port(self.port, 20, lambda: self.proc.poll() is None):
            raise lib.TestFailure(f"controller {self.node_id} did not listen on {self.port}:\n{self.log_tail()}")
        log(f"controller {self.node_id} started (pid {self.proc.pid}, port {self.port})")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, quiet=False):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            if not quiet:
                log(f"controller {self.node_id} killed (-9)")
        if self in _live:
            _live.remove(self)

    def stop(self, timeout=15):
        """SIGTERM; returns the exit status."""
        check(self.alive(), f"controller {self.node_id} died before its stop:\n{self.log_tail()}")
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise lib.TestFailure(f"controller {self.node_id} did not stop within {timeout}s of SIGTERM")
        if self in _live:
            _live.remove(self)
        log(f"controller {self.node_id} stopped, exit {rc}")
        return rc

    def log_tail(self, n=30):
        try:
            with open(self.logpath, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"


def voters_string(nodes):
    return ",".join(f"{i}@127.0.0.1:{p}" for i, p in nodes)


# ----------------------------------------------------------------- the client

def read_tags(d):
    """A tagged-field section: {tag: bytes}."""
    out = {}
    for _ in range(d.uv()):
        tag = d.uv()
        out[tag] = d._take(d.uv())
    return out


def tag_offset(tags):
    v = tags.get(TAG_METADATA_OFFSET)
    return None if v is None else int.from_bytes(v, "big", signed=True)


class Ctl(lib.Conn):
    """A connection to a controller speaking the APIs of DESIGN-12's wire protocol."""

    def describe_quorum(self, version=2):
        e = Enc().array_len(1, True).string(METADATA_TOPIC, True).array_len(1, True).i32(0).tags().tags().tags()
        d = self.request(55, version, e.done(), flexible_req=True)
        top_err = d.i16()
        if version >= 2:
            d.string(True)
        res = {"top_error": top_err}
        for _ in range(d.array_len(True)):
            d.string(True)
            for _ in range(d.array_len(True)):
                d.i32()
                res["error"] = d.i16()
                if version >= 2:
                    d.string(True)
                res["leader"], res["epoch"], res["hw"] = d.i32(), d.i32(), d.i64()
                for key in ("voters", "observers"):
                    res[key] = {}
                    for _ in range(d.array_len(True)):
                        rid = d.i32()
                        if version >= 2:
                            d._take(16)
                        leo = d.i64()
                        if version >= 1:
                            d.i64(), d.i64()
                        d.tags()
                        res[key][rid] = leo
                d.tags()
            d.tags()
        if version >= 2:
            res["nodes"] = {}
            for _ in range(d.array_len(True)):
                nid = d.i32()
                eps = []
                for _ in range(d.array_len(True)):
                    name, host, port = d.string(True), d.string(True), d.i16() & 0xFFFF
                    d.tags()
                    eps.append((name, host, port))
                d.tags()
                res["nodes"][nid] = eps
        d.tags()
        return res

    def describe_cluster(self, endpoint_type=2, version=1):
        e = Enc().i8(0)
        if version >= 1:
            e.i8(endpoint_type)
        if version >= 2:
            e.i8(0)
        d = self.request(60, version, e.tags().done(), flexible_req=True)
        d.i32()
        res = {"error": d.i16(), "message": d.string(True)}
        if version >= 1:
            res["endpoint_type"] = d.i8()
        res["cluster_id"], res["controller_id"] = d.string(True), d.i32()
        res["brokers"] = {}
        for _ in range(d.array_len(True)):
            bid, host, port, _rack = d.i32(), d.string(True), d.i32(), d.string(True)
            if version >= 2:
                d.i8()
            d.tags()
            res["brokers"][bid] = (host, port)
        d.i32()
        d.tags()
        return res

    def register(self, broker_id, incarnation, port, cluster_id=CLUSTER_ID, previous_epoch=-1, version=3):
        e = Enc().i32(broker_id).string(cluster_id, True).raw(incarnation)
        e.array_len(1, True).string("PLAINTEXT", True).string("127.0.0.1", True).i16(port).i16(0).tags()
        e.array_len(0, True)          # Features
        e.string(None, True)          # Rack
        if version >= 1:
            e.i8(0)                   # IsMigratingZkBroker
        if version >= 2:
            e.array_len(0, True)      # LogDirs
        if version >= 3:
            e.i64(previous_epoch)
        d = self.request(62, version, e.tags().done(), flexible_req=True)
        d.i32()
        err, epoch = d.i16(), d.i64()
        d.tags()
        return err, epoch

    def heartbeat(self, broker_id, epoch, offset, want_shutdown=False):
        e = Enc().i32(broker_id).i64(epoch).i64(offset).i8(0).i8(1 if want_shutdown else 0).tags()
        d = self.request(63, 1, e.done(), flexible_req=True)
        d.i32()
        err, caught_up, fenced, shutdown = d.i16(), d.i8(), d.i8(), d.i8()
        d.tags()
        return err, bool(caught_up), bool(fenced), bool(shutdown)

    def create_topics(self, topics, version=7, validate_only=False):
        """topics: [(name, partitions, rf)]. Returns ({name: (err, msg, id, partitions)}, tag-1000 offset)."""
        flex = version >= 5
        e = Enc().array_len(len(topics), flex)
        for name, parts, rf in topics:
            e.string(name, flex).i32(parts).i16(rf).array_len(0, flex).array_len(0, flex)
            if flex:
                e.tags()
        e.i32(30000).i8(1 if validate_only else 0)
        if flex:
            e.tags()
        d = self.request(19, version, e.done(), flexible_req=flex)
        d.i32()
        out = {}
        for _ in range(d.array_len(flex)):
            name = d.string(flex)
            tid = d._take(16) if version >= 7 else None
            err, msg = d.i16(), d.string(flex)
            parts = -1
            if version >= 5:
                parts, _rf = d.i32(), d.i16()
                for _ in range(max(d.array_len(flex), 0)):
                    d.string(flex), d.string(flex), d.i8(), d.i8(), d.i8()
                    d.tags()
            if flex:
                d.tags()
            out[name] = (err, msg, tid, parts)
        return out, tag_offset(read_tags(d)) if flex else None

    def fetch_metadata(self, offset, max_wait_ms=0, max_bytes=1 << 20):
        """Returns (error, high watermark, log start, records blob)."""
        e = Enc().i32(-1).i32(max_wait_ms).i32(1).i32(max_bytes).i8(0).i32(0).i32(-1)
        e.array_len(1, True).string(METADATA_TOPIC, True)
        e.array_len(1, True).i32(0).i32(-1).i64(offset).i32(-1).i64(-1).i32(max_bytes).tags()
        e.tags()
        e.array_len(0, True).string("", True).tags()
        d = self.request(1, 12, e.done(), flexible_req=True)
        d.i32(), d.i16(), d.i32()
        res = None
        for _ in range(d.array_len(True)):
            d.string(True)
            for _ in range(d.array_len(True)):
                d.i32()
                err, hw, _lso, start = d.i16(), d.i64(), d.i64(), d.i64()
                d.array_len(True)
                d.i32()
                recs = d.bytes_(True) or b""
                d.tags()
                res = (err, hw, start, recs)
            d.tags()
        d.tags()
        return res

    def fetch_snapshot(self, end_offset=-1, position=0, max_bytes=1 << 20):
        """Returns (error, end offset, size, position, bytes)."""
        e = Enc().i32(-1).i32(max_bytes).array_len(1, True).string(METADATA_TOPIC, True)
        e.array_len(1, True).i32(0).i32(-1).i64(end_offset).i32(-1).tags().i64(position).tags().tags().tags()
        d = self.request(59, 0, e.done(), flexible_req=True)
        d.i32(), d.i16()
        res = None
        for _ in range(d.array_len(True)):
            d.string(True)
            for _ in range(d.array_len(True)):
                d.i32()
                err, end, _epoch = d.i16(), d.i64(), d.i32()
                d.tags()
                size, pos, data = d.i64(), d.i64(), d.bytes_(True)
                d.tags()
                res = (err, end, size, pos, data)
            d.tags()
        d.tags()
        return res

    def alter_partition(self, broker_id, broker_epoch, topic_id, partition, leader_epoch, isr, partition_epoch):
        """AlterPartition v2: returns (top error, partition error, partition epoch)."""
        e = Enc().i32(broker_id).i64(broker_epoch).array_len(1, True).raw(topic_id).array_len(1, True)
        e.i32(partition).i32(leader_epoch).array_len(len(isr), True)
        for b in isr:
            e.i32(b)
        e.i8(0).i32(partition_epoch).tags().tags().tags()
        d = self.request(56, 2, e.done(), flexible_req=True)
        d.i32()
        top = d.i16()
        perr, pepoch = None, None
        for _ in range(d.array_len(True)):
            d._take(16)
            for _ in range(d.array_len(True)):
                d.i32()
                perr = d.i16()
                d.i32(), d.i32()
                for _ in range(d.array_len(True)):
                    d.i32()
                d.i8()
                pepoch = d.i32()
                d.tags()
            d.tags()
        d.tags()
        return top, perr, pepoch


def metadata_records(blob):
    """[(offset, api key of the metadata record, value)] of a records blob."""
    out = []
    for b in lib.parse_batches(blob):
        check(b["crc_ok"], f"metadata batch at {b['base_offset']}: bad CRC")
        for off, _k, v, _h in lib.decode_records(b["raw"]):
            d = Dec(v)
            d.uv()  # frame version
            out.append((off, d.uv(), v))
    return out


def quorum_view(port):
    try:
        with Ctl(port, timeout=3) as c:
            return c.describe_quorum()
    except (OSError, lib.ProtocolError):
        return None


def find_leader(ports, timeout=20.0, exclude=()):
    """The port of the controller that answers DescribeQuorum as the leader."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in ports:
            if p in exclude:
                continue
            v = quorum_view(p)
            if v and v.get("error") == NONE:
                return p, v
        time.sleep(0.05)
    raise lib.TestFailure(f"no controller among {ports} became the leader within {timeout}s")


class FakeBroker:
    """A broker as far as the controller can tell: registers, then heartbeats
    every 500 ms (to whichever controller leads) so that it stays unfenced."""

    def __init__(self, broker_id, ports, listener_port):
        self.id, self.ports, self.listener_port = broker_id, list(ports), listener_port
        self.incarnation = uuid.uuid4().bytes
        self.epoch = -1
        self.fenced = True
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.thread = None

    def register(self, port, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            with Ctl(port) as c:
                err, epoch = c.register(self.id, self.incarnation, self.listener_port)
            if err == NONE:
                self.epoch = epoch
                return epoch
            check(time.monotonic() < deadline, f"broker {self.id} registration: error {err}")
            time.sleep(0.2)

    def beat_once(self, port):
        with Ctl(port, timeout=3) as c:
            view = c.describe_quorum()
            hw = view.get("hw", 0)
            err, _caught, fenced, _sd = c.heartbeat(self.id, self.epoch, max(hw - 1, self.epoch))
        if err == NONE:
            self.fenced = fenced
        return err

    def wait_unfenced(self, port, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            err = self.beat_once(port)
            check(err == NONE, f"heartbeat of broker {self.id}: error {err}")
            if not self.fenced:
                return
            time.sleep(0.1)
        raise lib.TestFailure(f"broker {self.id} not unfenced within {timeout}s")

    def _loop(self):
        while not self.stop_flag.wait(0.5):
            for p in self.ports:
                try:
                    if self.beat_once(p) == NONE:
                        break
                except (OSError, lib.ProtocolError):
                    continue

    def start_heartbeats(self):
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def stop(self):
        self.stop_flag.set()
        if self.thread:
            self.thread.join(5)


def create_topic(port, name, partitions=3):
    with Ctl(port) as c:
        res, off = c.create_topics([(name, partitions, 1)])
    return res[name], off


# ----------------------------------------------------------------- scenarios

def check_api_versions(port):
    with Ctl(port) as c:
        keys = c.api_versions(3)
        want = {1: (12, 12), 18: (0, 3), 19: (2, 7), 20: (1, 6), 32: (1, 4), 33: (0, 2), 37: (0, 3),
                44: (0, 1), 45: (0, 1), 46: (0, 0), 55: (0, 2), 56: (2, 3), 59: (0, 1), 60: (0, 2), 62: (0, 4), 63: (0, 1), 67: (0, 0)}
        check(keys == want, f"ApiVersions lists {keys}, expected exactly {want}")
        # a version past the range: UNSUPPORTED_VERSION with ApiVersions' own range (v0 body)
        c.corr += 1
        c.send(lib.frame(lib.request_header(18, 99, c.corr)))
        d = Dec(c.recv_frame())
        d.i32()
        check(d.i16() == UNSUPPORTED_VERSION, "ApiVersions v99 not answered UNSUPPORTED_VERSION")


def single_controller(root):
    port = 31000
    ctl = Controller(root, 1, port, voters_string([(1, port)]))
    ctl.start()
    _, view = find_leader([port])
    check(view["leader"] == 1 and 1 in view["voters"], f"DescribeQuorum: {view}")
    check(view["nodes"] == {1: [("CONTROLLER", "127.0.0.1", port)]}, f"DescribeQuorum nodes: {view['nodes']}")
    check_api_versions(port)
    with Ctl(port) as c:
        dc = c.describe_cluster(2)
    check(dc["error"] == NONE and dc["controller_id"] == 1 and dc["brokers"] == {1: ("127.0.0.1", port)}
          and dc["cluster_id"] == CLUSTER_ID, f"DescribeCluster (controllers): {dc}")

    broker = FakeBroker(101, [port], 31099)
    epoch = broker.register(port)
    broker.wait_unfenced(port)
    log(f"broker 101 registered (epoch {epoch}) and unfenced")
    with Ctl(port) as c:
        dc = c.describe_cluster(1)
    check(dc["brokers"] == {101: ("127.0.0.1", 31099)}, f"DescribeCluster (brokers): {dc}")

    (err, msg, tid, parts), off = create_topic(port, "alpha", 3)
    check(err == NONE and parts == 3 and tid != bytes(16), f"CreateTopics alpha: error {err} {msg}")
    check(off is not None and off > epoch, f"CreateTopics' SluiceMetadataOffset (tag 1000): {off}")
    (err, _, _, _), off2 = create_topic(port, "alpha", 3)
    check(err == TOPIC_ALREADY_EXISTS and off2 >= off, f"CreateTopics alpha again: error {err}, offset {off2}")
    log(f"topic alpha created, its last record at offset {off}")

    with Ctl(port) as c:
        err, hw, start, blob = c.fetch_metadata(0)
    check(err == NONE and hw == off + 1 and start == 0, f"Fetch from 0: error {err}, hw {hw}, start {start}")
    recs = metadata_records(blob)
    check([r[0] for r in recs] == list(range(hw)), f"metadata offsets {[r[0] for r in recs]}, hw {hw}")
    check(any(k == 2 and b"alpha" in v for _, k, v in recs), "no TopicRecord of alpha in the metadata log")
    check(any(k == 0 for _, k, _ in recs), "no RegisterBrokerRecord in the metadata log")
    log(f"metadata log: {len(recs)} records in {len(list(lib.parse_batches(blob)))} batches")

    with Ctl(port) as c:
        err, _, _, _ = c.fetch_metadata(hw + 5)
    check(err == OFFSET_OUT_OF_RANGE, f"Fetch past the end: error {err}")
    # long poll: nothing new, answered after MaxWaitMs
    with Ctl(port) as c:
        t0 = time.monotonic()
        err, hw2, _, blob = c.fetch_metadata(hw, max_wait_ms=600)
        waited = time.monotonic() - t0
    check(err == NONE and not blob and hw2 == hw and 0.45 < waited < 3, f"long poll: {err} {hw2} {waited:.2f}s")
    # a change wakes a parked fetch
    result = {}

    def parked():
        with Ctl(port) as c:
            t = time.monotonic()
            result["r"] = c.fetch_metadata(hw, max_wait_ms=10000)
            result["t"] = time.monotonic() - t

    th = threading.Thread(target=parked)
    th.start()
    time.sleep(0.3)
    (err, _, _, _), off3 = create_topic(port, "beta", 1)
    th.join(15)
    check(err == NONE and "r" in result, "parked fetch not answered")
    err, hw3, _, blob = result["r"]
    check(err == NONE and blob and hw3 >= off3 + 1 and result["t"] < 5,
          f"parked fetch: error {err}, hw {hw3}, {result['t']:.2f}s")
    log(f"a parked fetch was woken by a commit after {result['t']:.2f}s")

    with Ctl(port) as c:
        err, end, size, pos, data = c.fetch_snapshot(-1)
        check(err == NONE and end == off3 + 1 and size == len(data) and size > 0 and pos == 0,
              f"FetchSnapshot: error {err}, end {end}, size {size}, got {len(data or b'')}")
        snap = metadata_records(data)
        check([r[0] for r in snap] == list(range(len(snap))) and any(b"beta" in v for _, _, v in snap),
              "snapshot records not numbered from 0 or without beta")
        err, end2, _, pos2, data2 = c.fetch_snapshot(end, position=size // 2)
        check(err == NONE and end2 == end and pos2 == size // 2 and data2 == data[size // 2:],
              "FetchSnapshot second page")
        err = c.fetch_snapshot(end + 100)[0]
        check(err == 98, f"FetchSnapshot of an unknown snapshot: error {err} (SNAPSHOT_NOT_FOUND expected)")
    log(f"FetchSnapshot: {len(snap)} records, {size} bytes")

    # SIGTERM with clients still connected (the fake broker's connections and
    # an idle one): the controller closes them and exits, it does not hang.
    with Ctl(port):
        check(ctl.stop() == 0, "SIGTERM with connections open: non-zero exit")
    broker.stop()
    ctl.start()
    _, view = find_leader([port])
    check(view["hw"] == off3 + 1, f"after restart the high watermark is {view['hw']}, expected {off3 + 1}")
    (err, _, _, _), _ = create_topic(port, "alpha", 3)
    check(err == TOPIC_ALREADY_EXISTS, f"after restart, CreateTopics alpha: error {err}")
    check(ctl.stop() == 0, "SIGTERM: non-zero exit")


def three_controllers(root):
    nodes = [(1, 31010), (2, 31012), (3, 31014)]  # Raft ports: each + 1
    election_ms = 1000
    ctls = {i: Controller(root, i, p, voters_string(nodes), election_ms) for i, p in nodes}
    for c in ctls.values():
        c.start()
    ports = [p for _, p in nodes]
    lport, view = find_leader(ports)
    leader = view["leader"]
    check(ctls[leader].port == lport and sorted(view["voters"]) == [1, 2, 3], f"DescribeQuorum: {view}")
    log(f"controller {leader} leads (epoch {view['epoch']})")
    for i, p in nodes:
        deadline = time.monotonic() + 5  # a follower learns of the leader from its first append
        while True:
            with Ctl(p) as c:
                dc = c.describe_cluster(2)
            if dc["controller_id"] == leader or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check(dc["controller_id"] == leader and len(dc["brokers"]) == 3, f"DescribeCluster from {i}: {dc}")

    broker = FakeBroker(201, ports, 31098)
    broker.register(lport)
    broker.wait_unfenced(lport)
    broker.start_heartbeats()
    (err, msg, _, _), off = create_topic(lport, "before", 2)
    check(err == NONE, f"CreateTopics before: {err} {msg}")

    follower = next(p for p in ports if p != lport)
    with Ctl(follower) as c:
        res, _ = c.create_topics([("nope", 1, 1)])
        check(res["nope"][0] == NOT_CONTROLLER, f"CreateTopics on a follower: {res}")
        check(c.register(299, uuid.uuid4().bytes, 31097)[0] == NOT_CONTROLLER, "registration on a follower")
        check(c.fetch_metadata(0)[0] == NOT_LEADER_OR_FOLLOWER, "Fetch on a follower")
        fv = c.describe_quorum()
        check(fv["error"] == NOT_LEADER_OR_FOLLOWER and fv["leader"] == leader, f"follower's DescribeQuorum: {fv}")

    ctls[leader].kill()
    t0 = time.monotonic()
    survivors = [p for p in ports if p != lport]
    nport, nview = find_leader(survivors, timeout=10 * election_ms / 1000)
    took = time.monotonic() - t0
    check(took < 5 * election_ms / 1000, f"a new leader took {took:.2f}s (more than 5 election timeouts)")
    log(f"controller {nview['leader']} leads {took:.2f}s after the kill (epoch {nview['epoch']})")
    (err, _, _, _), _ = create_topic(nport, "before", 2)
    check(err == TOPIC_ALREADY_EXISTS, f"the topic created before the failover: error {err}")
    (err, msg, _, _), off_after = create_topic(nport, "after", 2)
    check(err == NONE and off_after > off, f"CreateTopics after the failover: {err} {msg} at {off_after}")

    ctls[leader].start()
    deadline = time.monotonic() + 20
    while True:
        v = quorum_view(nport)
        own = quorum_view(lport)
        if v and own and v["voters"].get(leader) == v["hw"] and own["hw"] == v["hw"]:
            break
        check(time.monotonic() < deadline, f"restarted controller {leader} did not catch up: {v} / {own}")
        time.sleep(0.1)
    log(f"restarted controller {leader} caught up to {v['hw']}")
    with Ctl(lport) as c:
        check(c.fetch_metadata(0)[0] == NOT_LEADER_OR_FOLLOWER, "the restarted follower serves the log")
    broker.stop()
    for c in ctls.values():
        check(c.stop() == 0, f"controller {c.node_id}: non-zero exit on SIGTERM")


def bad_config(root):
    """A bad or missing property: exit 1 with one message naming the key."""
    good = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:31020",
            "listeners": "CONTROLLER://127.0.0.1:31020", "metadata.log.dir": os.path.join(root, "bad"),
            "cluster.id": "x"}
    cases = [
        ("process.roles", {"process.roles": "broker,controller"}),
        ("node.id", {"node.id": "abc"}),
        ("cluster.id", {"cluster.id": None}),
        ("controller.quorum.voters", {"controller.quorum.voters": "1@127.0.0.1:31022"}),
        ("listeners", {"listeners": "PLAINTEXT://127.0.0.1:31020"}),
        ("controller.quorum.election.timeout.ms", {"controller.quorum.election.timeout.ms": "-5"}),
    ]
    for key, change in cases:
        props = dict(good)
        for k, v in change.items():
            if v is None:
                props.pop(k)
            else:
                props[k] = v
        path = os.path.join(root, "bad.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        r = lib.run([controller_path(), path], timeout=20)
        check(r.returncode == 1 and key in r.stderr, f"bad {key}: exit {r.returncode}, stderr {r.stderr!r}")
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in good.items()))
    r = lib.run([controller_path(), path, "--override", "node.id=-3"], timeout=20)
    check(r.returncode == 1 and "node.id" in r.stderr, f"--override node.id=-3: {r.returncode} {r.stderr!r}")
    log(f"{len(cases) + 1} bad configurations refused naming their key")


def main():
    root = tempfile.mkdtemp(prefix="sluice-ctl-basic-")
    try:
        bad_config(root)
        single_controller(os.path.join(root, "one"))
        three_controllers(os.path.join(root, "three"))
    finally:
        _cleanup()
        if os.environ.get("SLUICE_TEST_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"kept {root}")


if __name__ == "__main__":
    lib.main(main)
