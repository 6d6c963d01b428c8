#!/usr/bin/env python3
"""Bad input to sluice-controller's listener is refused and changes nothing.

Three controllers, one (fake) broker keeping its session. Proves that:
- garbage frames (negative, tiny and oversized lengths, an unknown api key, an
  unsupported version) close the connection; a frame whose length lies (more
  declared than sent) holds nothing up: other connections are served meanwhile;
- every truncation of a valid request of each API, and byte flips of many of them,
  is answered or closes the connection, never more;
- a broker registering with a live broker's node id and another incarnation is
  refused DUPLICATE_BROKER_REGISTRATION; one with another cluster id
  INCONSISTENT_CLUSTER_ID;
- AlterPartition with a stale partition epoch is refused INVALID_UPDATE_VERSION
  (the current one is accepted, after which it is stale in turn);
- pipelined requests past the per-connection queue bound are all answered in
  order; connections past max.connections are closed, later ones served;
- afterwards the same controller leads at the same epoch, every voter holds the
  whole log, every controller answers, and SIGTERM stops each with exit 0.

Python 3 standard library only. Ports 31100-31199 on 127.0.0.1.
"""
import os
import random
import shutil
import socket
import struct
import tempfile
import time
import uuid

import lib
from lib import Enc, check, log
import controller_basic as cb
from controller_basic import Ctl, Controller, FakeBroker

NODES = [(1, 31100), (2, 31102), (3, 31104)]
PORTS = [p for _, p in NODES]
CONNECTIONS_MAX = 48


def closed_or_answered(port, payload, timeout=5.0):
    """Sends raw bytes; returns 'closed' or 'answered' (a whole response frame came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        try:
            s.sendall(payload)
        except OSError:
            return "closed"
        buf = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return "closed"
                buf += chunk
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    return "answered"
        except ConnectionResetError:
            return "closed"
        except socket.timeout:
            raise lib.TestFailure(f"no answer and no close for {payload[:24].hex()}...")


def alive_check(what):
    for i, p in NODES:
        with Ctl(p, timeout=5) as c:
            check(c.api_versions(3), f"controller {i} does not answer after {what}")


def header(api_key, version, corr=1, flexible=True):
    return lib.request_header(api_key, version, corr, "bad-input", flexible=flexible)


def samples(broker, topic_id):
    """A valid request of each API: (name, api key, version, flexible header, body)."""
    e = Enc().array_len(1, True).string(cb.METADATA_TOPIC, True).array_len(1, True).i32(0).tags().tags().tags()
    dq = e.done()
    reg = (Enc().i32(77).string(cb.CLUSTER_ID, True).raw(uuid.uuid4().bytes)
           .array_len(1, True).string("PLAINTEXT", True).string("127.0.0.1", True).i16(31190).i16(0).tags()
           .array_len(0, True).string(None, True).i8(0).array_len(0, True).i64(-1).tags().done())
    hb = Enc().i32(broker.id).i64(broker.epoch).i64(0).i8(0).i8(0).tags().done()
    fetch = (Enc().i32(-1).i32(0).i32(1).i32(1 << 20).i8(0).i32(0).i32(-1)
             .array_len(1, True).string(cb.METADATA_TOPIC, True)
             .array_len(1, True).i32(0).i32(-1).i64(0).i32(-1).i64(-1).i32(1 << 20).tags().tags()
             .array_len(0, True).string("", True).tags().done())
    fsnap = (Enc().i32(-1).i32(1 << 20).array_len(1, True).string(cb.METADATA_TOPIC, True)
             .array_len(1, True).i32(0).i32(-1).i64(-1).i32(-1).tags().i64(0).tags().tags().tags().done())
    ct = (Enc().array_len(1, True).string("fuzzed", True).i32(1).i16(1).array_len(0, True)
          .array_len(1, True).string("retention.ms", True).string("1000", True).tags().tags()
          .i32(1000).i8(1).tags().done())
    dt = Enc().array_len(1, True).string("no-such-topic", True).raw(bytes(16)).tags().i32(1000).tags().done()
    cp = Enc().array_len(1, True).string("t", True).i32(1).array_len(None, True).tags().i32(1000).i8(1).tags().done()
    iac = (Enc().array_len(1, True).i8(2).string("t", True).array_len(1, True).string("retention.ms", True)
           .i8(0).string("60000", True).tags().tags().i8(1).tags().done())
    dc = (Enc().array_len(1, True).i8(2).string("t", True).array_len(None, True).tags().i8(0).i8(0).tags().done())
    ap = (Enc().i32(broker.id).i64(broker.epoch).array_len(1, True).raw(topic_id).array_len(1, True)
          .i32(0).i32(0).array_len(1, True).i32(broker.id).i8(0).i32(-1).tags().tags().tags().done())
    pid = Enc().i32(broker.id).i64(broker.epoch).tags().done()
    dcl = Enc().i8(0).i8(2).tags().done()
    av = Enc().string("bad-input", True).string("1", True).tags().done()
    ra = (Enc().i32(1000).i8(1).array_len(1, True).string("t", True).array_len(1, True).i32(0)
          .array_len(1, True).i32(broker.id).tags().tags().tags().done())
    lr = Enc().i32(1000).array_len(1, True).string("t", True).array_len(1, True).i32(0).tags().tags().done()
    return [
        ("DescribeQuorum", 55, 1, dq), ("BrokerRegistration", 62, 3, reg), ("BrokerHeartbeat", 63, 1, hb),
        ("Fetch", 1, 12, fetch), ("FetchSnapshot", 59, 0, fsnap), ("CreateTopics", 19, 7, ct),
        ("DeleteTopics", 20, 6, dt), ("CreatePartitions", 37, 3, cp), ("IncrementalAlterConfigs", 44, 1, iac),
        ("DescribeConfigs", 32, 4, dc), ("AlterPartition", 56, 2, ap), ("AllocateProducerIds", 67, 0, pid),
        ("DescribeCluster", 60, 1, dcl), ("ApiVersions", 18, 3, av),
        ("AlterPartitionReassignments", 45, 1, ra), ("ListPartitionReassignments", 46, 0, lr),
    ]


def garbage_frames(port):
    cases = {
        "negative length": struct.pack(">i", -1) + b"x" * 16,
        "length below a header": struct.pack(">i", 3) + b"abc",
        "length above socket.request.max.bytes": struct.pack(">i", 200 << 20) + b"x" * 100,
        "unknown api key": lib.frame(struct.pack(">hhi", 9999, 0, 1) + b"\x00\x00"),
        "unsupported version": lib.frame(header(1, 4, flexible=False) + b"\x00" * 40),
        "negative api key": lib.frame(struct.pack(">hhi", -7, 0, 1) + b"\x00\x00"),
        "a header without its client id": lib.frame(struct.pack(">hhi", 55, 0, 1) + b"\x00\x05ab"),
    }
    rng = random.Random(12)
    for i in range(20):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        size = rng.choice([-5, 0, 5, 9, 1 << 30, len(blob)])
        cases[f"random {i}"] = struct.pack(">i", size) + blob
    for name, payload in cases.items():
        declared = struct.unpack(">i", payload[:4])[0]
        if 0 < declared and declared > len(payload) - 4 and declared < 100 << 20:
            continue  # a lying length: tested below
        got = closed_or_answered(port, payload)
        check(got == "closed", f"{name}: {got}, expected the connection closed")
    log(f"{len(cases)} garbage frames: connection closed each time")


def lying_length(port):
    # declared 1000 bytes, 10 sent: the connection waits; others are served meanwhile
    liar = socket.create_connection(("127.0.0.1", port), timeout=5)
    liar.sendall(struct.pack(">i", 1000) + b"\x00\x37\x00\x00" + b"\x00" * 6)
    big = socket.create_connection(("127.0.0.1", port), timeout=5)
    big.sendall(struct.pack(">i", 50 << 20) + b"\x00\x12\x00\x03")  # 50 MiB declared, 4 bytes sent
    t0 = time.monotonic()
    with Ctl(port, timeout=5) as c:
        c.api_versions(3)
        c.describe_quorum()
    check(time.monotonic() - t0 < 2, "a lying length held other connections up")
    liar.close()
    big.close()
    log("frames declaring more than they send hold nothing up")


def truncations_and_flips(port, broker, topic_id):
    rng = random.Random(7)
    total = answered = 0
    for name, key, version, body in samples(broker, topic_id):
        hdr = header(key, version, flexible=key != 18 or version >= 3)
        got = closed_or_answered(port, lib.frame(hdr + body))
        check(got == "answered", f"the valid {name} sample was not answered")
        for cut in range(len(body)):
            total += 1
            answered += closed_or_answered(port, lib.frame(hdr + body[:cut])) == "answered"
        if key in (19, 37):  # flips of creations could ask for 2^31 partitions: truncations only
            continue
        for _ in range(40):
            b = bytearray(body)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            total += 1
            answered += closed_or_answered(port, lib.frame(hdr + bytes(b))) == "answered"
    alive_check("truncated and mutated requests")
    log(f"{total} truncated or mutated requests: {answered} answered, {total - answered} closed; all controllers serve")


def stolen_broker_id(port, broker):
    with Ctl(port) as c:
        err, _ = c.register(broker.id, uuid.uuid4().bytes, 31191)
        check(err == cb.DUPLICATE_BROKER_REGISTRATION, f"a stolen broker id with another incarnation: error {err}")
        err, _ = c.register(broker.id + 1, uuid.uuid4().bytes, 31192, cluster_id="another-cluster")
        check(err == 104, f"another cluster id: error {err} (INCONSISTENT_CLUSTER_ID expected)")
        # the real broker's session is untouched
        err, _, fenced, _ = c.heartbeat(broker.id, broker.epoch, 0)
        check(err == cb.NONE and not fenced, f"the real broker after the theft: error {err}, fenced {fenced}")
    log("a stolen broker id: DUPLICATE_BROKER_REGISTRATION; another cluster: INCONSISTENT_CLUSTER_ID")


def stale_partition_epoch(port, broker, topic_id):
    with Ctl(port) as c:
        top, err, current = c.alter_partition(broker.id, broker.epoch, topic_id, 0, 0, [broker.id], -1)
        check(top == cb.NONE and err == cb.INVALID_UPDATE_VERSION and current is not None and current >= 0,
              f"AlterPartition with partition epoch -1: top {top}, error {err}, current {current}")
        top, err, _ = c.alter_partition(broker.id, broker.epoch, topic_id, 0, 0, [broker.id], current + 5)
        # Kafka's rule: a sender knowing a newer epoch means this controller is behind
        check(err == cb.NOT_CONTROLLER, f"AlterPartition with a future partition epoch: error {err}")
        top, err, newer = c.alter_partition(broker.id, broker.epoch, topic_id, 0, 0, [broker.id], current)
        check(top == cb.NONE and err == cb.NONE, f"AlterPartition at the current epoch {current}: {top} {err}")
        if newer != current:
            top, err, _ = c.alter_partition(broker.id, broker.epoch, topic_id, 0, 0, [broker.id], current)
            check(err == cb.INVALID_UPDATE_VERSION, f"AlterPartition at the old epoch {current}: error {err}")
        top, err, _ = c.alter_partition(broker.id, broker.epoch, topic_id, 0, 0, [broker.id, 999], newer)
        check(err != cb.NONE, "AlterPartition with a replica that does not exist was accepted")
    log(f"AlterPartition: stale epoch refused (INVALID_UPDATE_VERSION), current {current} -> {newer} accepted")


def pipelining(port):
    n = 150  # past the per-connection queue bound (64): reading pauses and resumes
    with Ctl(port) as c:
        body = Enc().string("pipe", True).string("1", True).tags().done()
        c.send(b"".join(lib.frame(lib.request_header(18, 3, i + 1, flexible=True) + body) for i in range(n)))
        for i in range(n):
            d = lib.Dec(c.recv_frame())
            got = d.i32()
            check(got == i + 1, f"pipelined response {i}: correlation id {got}")
    log(f"{n} pipelined requests answered in order")


def connections_bound(port):
    socks = []
    try:
        for _ in range(CONNECTIONS_MAX + 20):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        body = Enc().string("conn", True).string("1", True).tags().done()
        served = closed = 0
        for s in socks:
            try:
                s.sendall(lib.frame(lib.request_header(18, 3, 1, flexible=True) + body))
                if len(s.recv(4)) == 4:
                    served += 1
                else:
                    closed += 1
            except OSError:
                closed += 1
        check(served <= CONNECTIONS_MAX and served + closed == len(socks) and closed >= 20 - 3,
              f"{len(socks)} connections with max.connections {CONNECTIONS_MAX}: {served} served, {closed} closed")
    finally:
        for s in socks:
            s.close()
    time.sleep(0.3)
    with Ctl(port) as c:
        c.api_versions(3)
    log(f"connections past max.connections ({CONNECTIONS_MAX}) closed; served again once others closed")


def main():
    root = tempfile.mkdtemp(prefix="sluice-ctl-bad-")
    ctls = {}
    broker = None
    try:
        voters = cb.voters_string(NODES)
        extra = {"max.connections": str(CONNECTIONS_MAX)}
        ctls = {i: Controller(root, i, p, voters, extra=extra) for i, p in NODES}
        for c in ctls.values():
            c.start()
        lport, view = cb.find_leader(PORTS)
        leader, epoch = view["leader"], view["epoch"]
        broker = FakeBroker(301, PORTS, 31199)
        broker.register(lport)
        broker.wait_unfenced(lport)
        broker.start_heartbeats()
        (err, msg, topic_id, _), _ = cb.create_topic(lport, "t", 2)
        check(err == cb.NONE, f"CreateTopics t: {err} {msg}")
        log(f"controller {leader} leads (epoch {epoch}); broker 301 registered; topic t created")

        garbage_frames(lport)
        lying_length(lport)
        stolen_broker_id(lport, broker)
        stale_partition_epoch(lport, broker, topic_id)
        truncations_and_flips(lport, broker, topic_id)
        follower = next(p for p in PORTS if p != lport)
        garbage_frames(follower)
        pipelining(lport)
        connections_bound(lport)

        # the quorum is unaffected: same leader, same epoch, every voter has the whole log
        deadline = time.monotonic() + 10
        while True:
            v = cb.quorum_view(lport)
            if v and v["error"] == cb.NONE and all(x == v["hw"] for x in v["voters"].values()):
                break
            check(time.monotonic() < deadline, f"voters not caught up: {v}")
            time.sleep(0.1)
        check(v["leader"] == leader and v["epoch"] == epoch,
              f"leadership changed under bad input: {leader}@{epoch} -> {v['leader']}@{v['epoch']}")
        alive_check("everything")
        log(f"the quorum is unaffected: controller {leader} leads at epoch {epoch}, all voters at {v['hw']}")
        broker.stop()
        for c in ctls.values():
            check(c.stop() == 0, f"controller {c.node_id}: non-zero exit on SIGTERM")
    finally:
        if broker:
            broker.stop()
        cb._cleanup()
        if os.environ.get("SLUICE_TEST_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"kept {root}")


if __name__ == "__main__":
    lib.main(main)
