"""Helpers shared by the failover tests (idempotent_failover.py, broker_shutdowns.py,
follower_out_of_range.py, purgatory.py): a three-controller, three-broker cluster through
deploy/local-cluster.sh on a fixed base port (cluster.py's Cluster with these tests'
settings), and the raw Kafka requests they need (CreateTopics with assignments and
configs, InitProducerId, Produce of prepared batches, Metadata of one partition from any
live broker, DescribeTopicPartitions, a read of a whole partition) plus a reader of
partition segment files as they lie on disk. Standard library only.
"""
import struct

import cluster as clu
import lib
from lib import Enc, check

NONE = 0
OFFSET_OUT_OF_RANGE = 1
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
# What a producer retries on another leader or later (Kafka's RetriableException).
RETRIABLE = (LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
             NOT_ENOUGH_REPLICAS_AFTER_APPEND, KAFKA_STORAGE_ERROR)

SESSION_MS, HEARTBEAT_MS, ELECTION_MS, LAG_MS = 4000, 500, 1000, 3000
SETS = ["--set", f"broker.session.timeout.ms={SESSION_MS}",
        "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={LAG_MS}"]


class Cluster(clu.Cluster):
    """local-cluster.sh with 3 controllers and 3 brokers on base_port (brokers base_port..+2,
    controllers base_port+100..+105), with SETS (or sets) and then extra."""

    def __init__(self, root, base_port, extra=(), sets=SETS):
        super().__init__(root, base_port, [*sets, *extra])


# ----------------------------------------------------------------- requests

def create_topic(port, name, partitions, assignment=None, configs=(), rf=3):
    """CreateTopics v5 through a broker: partitions with replication factor rf, or the
    explicit assignment [[brokers of partition 0], ...]; configs [(key, value)]."""
    e = Enc().array_len(1, True).string(name, True)
    if assignment:
        e.i32(-1).i16(-1).array_len(len(assignment), True)
        for i, brokers in enumerate(assignment):
            e.i32(i).array_len(len(brokers), True)
            for b in brokers:
                e.i32(b)
            e.tags()
    else:
        e.i32(partitions).i16(rf).array_len(0, True)
    e.array_len(len(configs), True)
    for k, v in configs:
        e.string(k, True).string(v, True).tags()
    e.tags().i32(30000).i8(0).tags()
    d = clu.call(port, lambda c: c.request(19, 5, e.done(), flexible_req=True))
    d.i32()
    d.array_len(True)
    d.string(True)
    err, msg = d.i16(), d.string(True)
    check(err == NONE, f"CreateTopics {name}: error {err} {msg}")


def init_producer_id(port):
    """InitProducerId v1 (idempotent, no transactional id): (producer id, epoch)."""
    body = Enc().string(None).i32(60000).done()
    d = clu.call(port, lambda c: c.request(22, 1, body))
    d.i32()
    err, pid, epoch = d.i16(), d.i64(), d.i16()
    check(err == NONE and pid >= 0, f"InitProducerId: error {err}, id {pid}")
    return pid, epoch


def idempotent_batch(values, pid, epoch, seq):
    return lib.record_batch([(None, v.encode(), []) for v in values], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq)


def produce(port, topic, p, blob, acks=-1, conn=None):
    """One Produce v8 of the prepared batch blob: (error, base offset, message)."""
    if conn is not None:
        return conn.produce(topic, p, blob, version=8, acks=acks, timeout_ms=15000)
    return clu.call(port, lambda c: c.produce(topic, p, blob, version=8, acks=acks, timeout_ms=15000))


def md_any(cl, topic, p, skip=()):
    """md_partition from the first live broker not in skip that answers."""
    for b in cl.brokers:
        if b in skip or not cl.running(b):
            continue
        st = clu.md_partition(cl.port(b), topic, p)
        if st:
            return st
    return None


def describe_partition(port, topic, p):
    """DescribeTopicPartitions v0 (what kafka-topics --describe asks) for topic-p at port:
    {"leader", "isr", "elr", "last_known_elr"} (lists; None for a null list), or None."""
    body = Enc().array_len(1, True).string(topic, True).tags().i32(2000).i8(-1).tags().done()
    try:
        d = clu.call(port, lambda c: c.request(75, 0, body, flexible_req=True))
    except (OSError, lib.ProtocolError):
        return None

    def ids():
        n = d.array_len(True)
        return None if n < 0 else [d.i32() for _ in range(n)]
    d.i32()
    found = None
    for _ in range(d.array_len(True)):
        d.i16()
        name = d.string(True)
        d._take(16)
        d.i8()
        for _ in range(d.array_len(True)):
            err, idx, leader, _epoch = d.i16(), d.i32(), d.i32(), d.i32()
            _replicas, isr, elr, lkelr, _offline = ids(), ids(), ids(), ids(), ids()
            d.tags()
            if name == topic and idx == p and err in (NONE, LEADER_NOT_AVAILABLE):
                found = {"leader": leader, "isr": isr, "elr": elr, "last_known_elr": lkelr}
        d.i32()
        d.tags()
    return found


def read_values(port, topic, p, start=0):
    """[(offset, value str)] of every record of topic-p below the high watermark, read
    from its leader at port."""
    got, offset = [], start
    with lib.Conn(port, timeout=10) as c:
        while True:
            err, hw, blob = c.fetch(topic, p, offset, max_wait_ms=0, version=5)
            check(err == NONE, f"fetch {topic}-{p} at {offset} from port {port}: error {err}")
            for b in lib.parse_batches(blob):
                check(b["crc_ok"], f"{topic}-{p}: batch at {b['base_offset']} has a bad CRC")
                for off, _k, v, _h in lib.decode_records(b["raw"]):
                    if off >= offset:
                        got.append((off, v.decode()))
                        offset = off + 1
            if offset >= hw:
                return got


def high_watermark(port, topic, p, at=0):
    """The high watermark a Fetch at offset `at` (within the log) answers, or -1."""
    try:
        with lib.Conn(port, timeout=5) as c:
            err, hw, _blob = c.fetch(topic, p, at, max_bytes=1, max_wait_ms=0)
    except (OSError, lib.ProtocolError):
        return -1
    return hw if err == NONE else -1


# ----------------------------------------------------------------- files

def segment_batches(path):
    """[(base offset, last offset, byte position, byte length, leader epoch, producer id)]
    of the batches of one segment file, up to the first thing that is not a batch
    (a preallocated zero tail, a torn end)."""
    with open(path, "rb") as f:
        data = f.read()
    out, o = [], 0
    while o + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, o)
        ple, magic = struct.unpack_from(">ib", data, o + 12)
        if length < 49 or magic != 2 or o + 12 + length > len(data):
            break
        lod = struct.unpack_from(">i", data, o + 23)[0]
        pid = struct.unpack_from(">q", data, o + 43)[0]
        out.append((base, base + lod, o, 12 + length, ple, pid))
        o += 12 + length
    return out


def log_records(cl, broker, topic, p):
    """{offset: value str} of every record in broker's segment files of topic-p (what
    its disk holds, below and above any high watermark)."""
    got = {}
    for path in cl.segments(broker, topic, p):
        with open(path, "rb") as f:
            data = f.read()
        for _base, _last, pos, n, _e, _pid in segment_batches(path):
            for off, _k, v, _h in lib.decode_records(data[pos:pos + n]):
                got[off] = v.decode()
    return got
