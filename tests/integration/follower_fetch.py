#!/usr/bin/env python3
"""Fetch from the closest replica (KIP-392): three brokers in racks a, b and c beside
three controllers (deploy/local-cluster.sh, broker.rack per broker with --set-broker
ID:broker.rack=..., replica.selector.class=Kafka's RackAwareReplicaSelector), topic
`near` with one partition on brokers 1, 2, 3 (leader 1, rack a).

Proves, in order:
- Metadata names each broker's rack;
- the leader's side, raw Fetch v11 and v12 from a consumer: RackId b gets
  PreferredReadReplica 2 and no records (error 0, the high watermark), c gets 3; its
  own rack a, no rack, an unknown rack, and v10 (no RackId) read records there;
- a follower's side, raw: a consumer's Fetch v11 is served from broker 2's log, every
  record below the high watermark the answer names; v10 gets NOT_LEADER_OR_FOLLOWER, a
  broker that holds no replica NOT_LEADER_OR_FOLLOWER at v11 too, a CurrentLeaderEpoch
  above the follower's UNKNOWN_LEADER_EPOCH, an offset past its log end
  OFFSET_OUT_OF_RANGE;
- real consumers in rack b, kcat (librdkafka, client.rack=b) and Kafka's
  ConsoleConsumer (the Java consumer, --consumer-property client.rack=b), each read all
  N records exactly once and in order, and every byte of them came from broker 2: its
  log (log.level=DEBUG) shows consumer reads as a follower adding up to at least the
  partition's bytes, broker 1's shows the consumer sent to broker 2; a kcat in rack a
  reads them from the leader, no follower serving it;
- a follower never serves what its high watermark does not cover: with broker 3
  stopped (SIGSTOP, still in the ISR) the leader takes M records with acks=1, broker 2
  holds them (its log is the leader's byte for byte) but the high watermark stays at N
  and broker 2 serves nothing at or past N (empty at N and at its log end, error 0;
  OFFSET_OUT_OF_RANGE past it); the leader still sends rack b there for offset N + 10
  (broker 2 holds it); a consumer's Fetch parked on broker 2 at N stays parked through
  one more acks=1 batch, and once broker 3 is resumed (the high watermark moves, maybe
  in steps) it answers within half of replica.fetch.wait.max.ms (3000 here) with
  exactly the records below the new high watermark: the leader answers a follower's
  fetch when the high watermark is news to it (KIP-1166's idea) and the follower wakes
  the consumer fetches waiting on it (without either, 2.8 s and 19 s were measured);
- Kafka's kafka-topics --describe: broker 3 killed with kill -9 leaves the ISR (1,2;
  replicas still 1,2,3) once replica.lag.time.max.ms or its session expires, and the
  leader then sends rack c nowhere (no in-sync replica there); restarted, it is back in
  the ISR (1,2,3) and rack c is sent to it again.

Short timeouts through local-cluster.sh's --set: broker.session.timeout.ms=6000,
broker.heartbeat.interval.ms=500, controller.quorum.election.timeout.ms=1000,
replica.lag.time.max.ms=6000, replica.fetch.wait.max.ms=3000. Ports 23500-23605 on
127.0.0.1 (brokers 23500-23502, controllers 23600/23602/23604 and their Raft ports + 1).
"""
import hashlib
import os
import re
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import cluster as clu  # noqa: E402
import lib  # noqa: E402
import replication as rep  # noqa: E402
from lib import Dec, Enc, check, log  # noqa: E402

BASE_PORT = 23500
SESSION_MS, HEARTBEAT_MS, ELECTION_MS, LAG_MS, FETCH_WAIT_MS = 6000, 500, 1000, 6000, 3000
RACKS = {1: "a", 2: "b", 3: "c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SETS = ["--set", f"broker.session.timeout.ms={SESSION_MS}",
        "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={LAG_MS}",
        "--set-broker", f"replica.fetch.wait.max.ms={FETCH_WAIT_MS}",
        "--set-broker", f"replica.selector.class={SELECTOR}",
        "--set-broker", "log.level=DEBUG"]
for _b, _r in RACKS.items():
    SETS += ["--set-broker", f"{_b}:broker.rack={_r}"]
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TOPIC, APART = "near", "apart"
N, M, LATE = 20000, 100, 25
NONE, OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH = 0, 1, 6, 75
FOLLOWER_READ = re.compile(rf"{TOPIC}-0: a consumer reads from this follower at offset (\d+): (-?\d+) bytes "
                           r"\(high watermark (\d+)\)")
SENT = re.compile(rf"{TOPIC}-0: a consumer at offset (\d+) is sent to broker (\d+), in its rack")
times = {}


def fetch(port, version, offset, rack="", replica_id=-1, epoch=-1, max_bytes=1 << 20, max_wait_ms=0,
          topic=TOPIC, p=0, conn=None):
    """One Fetch v10-v12 of topic-p: {err, hw, log_start, preferred (-1 before v11),
    records (bytes)}. On conn when given, else on the kept connection to port."""
    flex = version >= 12
    e = Enc().i32(replica_id).i32(max_wait_ms).i32(1).i32(max_bytes).i8(0).i32(0).i32(-1)
    e.array_len(1, flex).string(topic, flex).array_len(1, flex)
    e.i32(p).i32(epoch).i64(offset)
    if flex:
        e.i32(-1)  # LastFetchedEpoch
    e.i64(-1).i32(max_bytes)
    if flex:
        e.tags().tags()
    e.array_len(0, flex)  # ForgottenTopicsData
    if version >= 11:
        e.string(rack, flex)
    if flex:
        e.tags()

    def go(c):
        return c.request(1, version, e.done(), flexible_req=flex)
    d = go(conn) if conn else clu.call(port, go)
    d.i32()  # ThrottleTimeMs
    check(d.i16() == NONE, f"Fetch v{version}: a request-level error")
    d.i32()  # SessionId
    res = None
    for _ in range(d.array_len(flex)):
        d.string(flex)
        for _ in range(d.array_len(flex)):
            d.i32()
            res = {"err": d.i16(), "hw": d.i64()}
            d.i64()  # LastStableOffset
            res["log_start"] = d.i64()
            for _ in range(max(d.array_len(flex), 0)):
                d.i64()
                d.i64()
                if flex:
                    d.tags()
            res["preferred"] = d.i32() if version >= 11 else -1
            res["records"] = d.bytes_(flex) or b""
            if flex:
                d.tags()
        if flex:
            d.tags()
    check(res is not None, f"Fetch v{version}: no partition in the answer")
    return res


def offsets_of(blob):
    """Every record offset in a records blob."""
    return [off for b in lib.parse_batches(blob) for off, _k, _v, _h in lib.decode_records(b["raw"])]


def read_whole(port, rack, version=11):
    """{offset: value} and the records' bytes of topic-0 as a consumer in rack reads
    it from port (raw Fetch, records only below each answer's high watermark)."""
    got, offset, total = {}, 0, 0
    while True:
        r = fetch(port, version, offset, rack=rack)
        check(r["err"] == NONE and r["preferred"] == -1,
              f"fetch at {offset} from port {port} (rack {rack!r}): {r['err']}, preferred {r['preferred']}")
        total += len(r["records"])
        for b in lib.parse_batches(r["records"]):
            for off, _k, v, _h in lib.decode_records(b["raw"]):
                check(off < r["hw"], f"port {port} served offset {off}, past the high watermark {r['hw']} it names")
                got[off] = v.decode()
                offset = off + 1
        if offset >= r["hw"]:
            return got, total


def batches_digest(cl, broker, topic=TOPIC, p=0):
    """sha256 over the record batches of topic-p's .log files on broker, in offset
    order: the bytes a log holds, whatever zeros pad a segment's tail (a running
    broker's active segment ends in its last 4 KiB block's padding, a recovered or
    closed one does not)."""
    files = cl.segments(broker, topic, p)
    check(files, f"broker {broker} holds no segment of {topic}-{p}")
    h = hashlib.sha256()
    for name in files:
        with open(name, "rb") as f:
            data = f.read()
        o = 0
        while o + 17 <= len(data):
            _base, length = struct.unpack_from(">qi", data, o)
            if length < 49 or o + 12 + length > len(data) or data[o + 16] != 2:
                break
            h.update(data[o:o + 12 + length])
            o += 12 + length
    return h.hexdigest()


def wait_same_batches(cl, brokers, timeout=20):
    def same():
        d = {b: batches_digest(cl, b) for b in brokers}
        return d if len(set(d.values())) == 1 else None
    return clu.wait_for(f"{TOPIC}-0's batches identical on brokers {brokers}", same, timeout)


def log_mark(cl, node):
    return os.path.getsize(cl.out_log(node))


def log_since(cl, node, mark):
    with open(cl.out_log(node), "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace")


def marks(cl):
    return {b: log_mark(cl, b) for b in cl.brokers}


def follower_bytes(text):
    """Bytes the follower whose log this is served consumers of topic-0."""
    return sum(max(int(m.group(2)), 0) for m in FOLLOWER_READ.finditer(text))


def leader_hw(cl):
    return fetch(cl.port(1), 11, 0, rack="a", max_bytes=1)["hw"]


def wait_hw(cl, broker, want, timeout=10):
    """Until broker's answer to a consumer (rack b) names high watermark want."""
    return clu.wait_for(f"broker {broker}'s high watermark {want}",
                        lambda: fetch(cl.port(broker), 11, want, rack="b")["hw"] == want, timeout)


# ----------------------------------------------------------------- steps

def step_racks(cl):
    brokers, *_ = clu.metadata(cl.port(1))
    racks = {b[0]: b[3] for b in brokers}
    check(racks == RACKS, f"Metadata: racks {racks}, want {RACKS}")
    log(f"Metadata: brokers in racks {racks}")


def step_create(cl, tools, kcat):
    bootstrap = cl.env["BOOTSTRAP"]
    for topic, assignment in ((TOPIC, "1:2:3"), (APART, "1:2")):
        out = tools.run("topics", TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                        "--replica-assignment", assignment)
        check(f"Created topic {topic}." in out, f"kafka-topics --create {topic}: {out!r}")
    clu.wait_identical(cl, [cl.port(b) for b in cl.brokers])
    parts = clu.wait_for(f"{TOPIC}: ISR 1,2,3", lambda: (
        lambda d: d if sorted(d[0][2]) == [1, 2, 3] else None)(tools.describe(bootstrap, TOPIC)), 20)
    check(parts[0][:2] == (1, [1, 2, 3]), f"{TOPIC}-0: leader, replicas {parts[0]}")
    t0 = time.monotonic()
    clu.kcat_produce(kcat, bootstrap, TOPIC, 0, [f"v{i:06d}" for i in range(N)])
    times["produce"] = time.monotonic() - t0
    check(leader_hw(cl) == N, f"{TOPIC}-0's high watermark after {N} acks=all records: {leader_hw(cl)}")
    for b in (2, 3):
        wait_hw(cl, b, N)
    log(f"{TOPIC}: replicas 1,2,3 (leader 1), ISR 1,2,3; {N} records produced with kcat (acks=all) in "
        f"{times['produce']:.2f}s; both followers name high watermark {N}")


def step_leader_side(cl):
    port = cl.port(1)
    for v in (11, 12):
        for rack, want in (("b", 2), ("c", 3)):
            r = fetch(port, v, 0, rack=rack)
            check(r["err"] == NONE and r["preferred"] == want and r["records"] == b"" and r["hw"] == N,
                  f"v{v} rack {rack} at the leader: error {r['err']}, preferred {r['preferred']}, "
                  f"{len(r['records'])} bytes, hw {r['hw']}")
        for rack in ("a", "", "nowhere"):
            r = fetch(port, v, 0, rack=rack)
            check(r["err"] == NONE and r["preferred"] == -1 and offsets_of(r["records"])[:1] == [0],
                  f"v{v} rack {rack!r} at the leader: error {r['err']}, preferred {r['preferred']}, "
                  f"{len(r['records'])} bytes")
    r = fetch(port, 10, 0)
    check(r["err"] == NONE and offsets_of(r["records"])[:1] == [0], f"v10 at the leader: {r['err']}")
    log("leader (rack a): rack b -> PreferredReadReplica 2, rack c -> 3 (no records, error 0, high watermark "
        f"{N}); rack a, no rack, an unknown rack and v10 read records there")


def step_follower_side(cl):
    got, _ = read_whole(cl.port(2), "b")
    check(got == {i: f"v{i:06d}" for i in range(N)}, f"broker 2 served {len(got)} records, not the {N} produced")
    got, _ = read_whole(cl.port(2), "b", version=12)
    check(len(got) == N, f"broker 2 at v12: {len(got)} records")
    r = fetch(cl.port(2), 10, 0)
    check(r["err"] == NOT_LEADER_OR_FOLLOWER, f"v10 on follower 2: error {r['err']}")
    r = fetch(cl.port(3), 11, 0, rack="c", topic=APART)
    check(r["err"] == NOT_LEADER_OR_FOLLOWER, f"v11 on broker 3 (no replica of {APART}): error {r['err']}")
    epoch = clu.md_partition(cl.port(1), TOPIC, 0)[2]
    r = fetch(cl.port(2), 12, 0, rack="b", epoch=epoch)
    check(r["err"] == NONE and r["records"], f"v12 on follower 2 at the leader epoch {epoch}: error {r['err']}")
    r = fetch(cl.port(2), 12, 0, rack="b", epoch=epoch + 1)
    check(r["err"] == UNKNOWN_LEADER_EPOCH, f"v12 on follower 2 at epoch {epoch + 1}: error {r['err']}")
    r = fetch(cl.port(2), 11, N + 5, rack="b")
    check(r["err"] == OFFSET_OUT_OF_RANGE, f"v11 on follower 2 past its log end: error {r['err']}")
    log(f"follower 2 serves a consumer's Fetch v11/v12 (all {N} records, each below the answer's high "
        f"watermark); v10: NOT_LEADER_OR_FOLLOWER; broker 3 without a replica of {APART}: "
        "NOT_LEADER_OR_FOLLOWER; epoch above its own: UNKNOWN_LEADER_EPOCH; past its log end: OFFSET_OUT_OF_RANGE")


def check_consumed(values, who):
    want = [f"v{i:06d}" for i in range(N)]
    check(len(values) == N, f"{who}: {len(values)} records, want {N}")
    if values != want:
        at = next(i for i, (a, b) in enumerate(zip(values, want)) if a != b)
        check(False, f"{who}: records not the {N} produced in order: at {at} {values[at]!r}, want {want[at]!r}")


def check_from_follower(cl, m, who, total, follower=2):
    texts = {b: log_since(cl, b, m[b]) for b in cl.brokers}
    served = follower_bytes(texts[follower])
    check(served >= total, f"{who}: broker {follower} served consumers {served} bytes of {TOPIC}-0, "
          f"the partition holds {total}")
    sent = [int(x.group(2)) for x in SENT.finditer(texts[1])]
    check(sent and set(sent) == {follower}, f"{who}: broker 1 sent the consumer to {sent}")
    for b in cl.brokers:
        if b != follower:
            check(follower_bytes(texts[b]) == 0 and not FOLLOWER_READ.search(texts[b]),
                  f"{who}: broker {b} served a consumer as a follower")
    return served


def step_kcat(cl, kcat, total):
    bootstrap = cl.env["BOOTSTRAP"]
    for rack in ("b", "a"):
        m = marks(cl)
        t0 = time.monotonic()
        r = lib.run([kcat, "-C", "-b", bootstrap, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-q",
                     "-X", f"client.rack={rack}"], timeout=60)
        took = time.monotonic() - t0
        check(r.returncode == 0, f"kcat -C (client.rack={rack}): exit {r.returncode}: {r.stderr[-1500:]}")
        check_consumed(r.stdout.splitlines(), f"kcat client.rack={rack}")
        if rack == "b":
            served = check_from_follower(cl, m, "kcat client.rack=b", total)
            log(f"kcat (librdkafka, client.rack=b) read {N} records exactly once, in order, in {took:.2f}s: "
                f"broker 2 served it {served} bytes as a follower ({total} in the partition), broker 1 "
                "sent it there")
        else:
            texts = {b: log_since(cl, b, m[b]) for b in cl.brokers}
            check(not any(FOLLOWER_READ.search(t) or SENT.search(t) for t in texts.values()),
                  "kcat client.rack=a: a follower served it or the leader sent it elsewhere")
            log(f"kcat client.rack=a read the {N} records from the leader (rack a): no follower served it")


def step_java(cl, java, total):
    m = marks(cl)
    t0 = time.monotonic()
    r = java.run(CONSUMER, "--bootstrap-server", cl.env["BOOTSTRAP"], "--topic", TOPIC, "--partition", "0",
                 "--offset", "earliest", "--max-messages", str(N), "--timeout-ms", "30000",
                 "--consumer-property", "client.rack=b", timeout=120, heap="-Xmx256m")
    took = time.monotonic() - t0
    check(r.returncode == 0 and f"Processed a total of {N} messages" in r.stderr,
          f"kafka-console-consumer (client.rack=b): exit {r.returncode}: {r.stderr[-2000:]}")
    check_consumed(r.stdout.splitlines(), "kafka-console-consumer client.rack=b")
    served = check_from_follower(cl, m, "kafka-console-consumer client.rack=b", total)
    log(f"kafka-console-consumer (Java consumer {java.version}, client.rack=b) read {N} records exactly once, "
        f"in order, in {took:.2f}s: broker 2 served it {served} bytes as a follower, broker 1 sent it there")


class ParkedFetch(threading.Thread):
    """A consumer's Fetch v11 on broker 2 at offset, waiting up to 20 s for a byte."""

    def __init__(self, port, offset):
        super().__init__(daemon=True)
        self.port, self.offset, self.res, self.done_at, self.error = port, offset, None, None, None

    def run(self):
        try:
            with lib.Conn(self.port, timeout=30) as c:
                self.res = fetch(self.port, 11, self.offset, rack="b", max_wait_ms=20000, conn=c)
        except Exception as e:  # noqa: BLE001 (reported by the step)
            self.error = e
        self.done_at = time.monotonic()


def step_hw_limit(cl):
    """With broker 3 stopped (in the ISR still), the leader takes M records (acks=1):
    broker 2 holds them but serves none, the high watermark staying at N."""
    pid3 = cl.pid(3)
    os.kill(pid3, signal.SIGSTOP)
    stopped_at = time.monotonic()
    resumed = False
    try:
        time.sleep(0.8)  # broker 3's fetch parks at the leader and no other comes
        for i in range(0, M, 25):
            err, base, msg = rep.produce(cl.port(1), TOPIC, 0, [f"w{j:06d}" for j in range(i, i + 25)], acks=1)
            check(err == NONE and base == N + i, f"acks=1 produce of {i}..: error {err} base {base} {msg}")
        wait_same_batches(cl, [1, 2], timeout=10)
        check(leader_hw(cl) == N, f"high watermark {leader_hw(cl)} with broker 3 stopped in the ISR")
        port = cl.port(2)
        r = fetch(port, 11, N - 60, rack="b")
        offs = offsets_of(r["records"])
        check(r["err"] == NONE and r["hw"] == N and offs and max(offs) == N - 1,
              f"follower 2 from {N - 60}: error {r['err']}, hw {r['hw']}, offsets up to {max(offs or [-1])}")
        for at in (N, N + 50, N + M):
            r = fetch(port, 11, at, rack="b")
            check(r["err"] == NONE and r["records"] == b"" and r["hw"] == N,
                  f"follower 2 at {at} (holds up to {N + M - 1}, high watermark {N}): error {r['err']}, "
                  f"{len(r['records'])} bytes, hw {r['hw']}")
        r = fetch(port, 11, N + M + 1, rack="b")
        check(r["err"] == OFFSET_OUT_OF_RANGE, f"follower 2 past its log end {N + M}: error {r['err']}")
        r = fetch(cl.port(1), 11, N + 10, rack="b")
        check(r["err"] == NONE and r["preferred"] == 2, f"leader, rack b at {N + 10}: {r['err']} {r['preferred']}")
        parked = ParkedFetch(port, N)
        parked.start()
        time.sleep(0.5)
        check(parked.res is None and parked.error is None, "the consumer's fetch at the high watermark answered "
              "at once instead of waiting")
        # A last batch: broker 2 fetches it and its next fetch waits at the leader afresh
        # (replica.fetch.wait.max.ms) when broker 3 resumes below.
        err, base, msg = rep.produce(cl.port(1), TOPIC, 0, [f"x{j:06d}" for j in range(LATE)], acks=1)
        check(err == NONE and base == N + M, f"acks=1 produce of the last batch: error {err} base {base} {msg}")
        wait_same_batches(cl, [1, 2], timeout=10)
        time.sleep(0.2)
        check(parked.res is None, "the consumer's fetch parked on broker 2 answered before the high watermark moved")
        within = time.monotonic() - stopped_at
        check(leader_hw(cl) == N, f"the high watermark moved before broker 3 was resumed ({within:.1f}s after its "
              f"SIGSTOP: the session or the lag time ran out); the check above is void")
        os.kill(pid3, signal.SIGCONT)
        resumed = True
        t0 = time.monotonic()
    finally:
        if not resumed:
            os.kill(pid3, signal.SIGCONT)
    log(f"broker 3 stopped: the leader took {M} records (acks=1), broker 2's log holds them (identical to the "
        f"leader's) but its answers stop at the high watermark {N}: records up to {N - 1}, nothing at {N}, "
        f"{N + 50} or its log end {N + M}, OFFSET_OUT_OF_RANGE past it; the leader sends rack b to it for "
        f"{N + 10}")
    parked.join(25)
    took = (parked.done_at or time.monotonic()) - t0
    check(parked.error is None and parked.res, f"the parked fetch on broker 2: {parked.error}")
    r = parked.res
    offs = offsets_of(r["records"])
    # Broker 3 first appends what the leader had sent it before its stop (a part of the
    # records), so the high watermark may move in steps: the answer holds every record
    # below the first step, none above it.
    check(r["err"] == NONE and N < r["hw"] <= N + M + LATE and offs == list(range(N, r["hw"])),
          f"the parked fetch: error {r['err']}, hw {r['hw']}, offsets {offs[:1]}..{offs[-1:]}")
    check(took < FETCH_WAIT_MS / 1000 / 2, f"the parked consumer fetch on broker 2 answered {took:.2f}s after broker 3 "
          f"resumed: the follower learned the new high watermark late (the leader held its fetch, up to "
          f"replica.fetch.wait.max.ms={FETCH_WAIT_MS}), or did not wake the consumer fetches waiting on it")
    times["follower high watermark"] = took
    wait_hw(cl, 2, N + M + LATE)
    log(f"broker 3 resumed: the consumer's fetch parked on broker 2 at {N} got records {N}..{r['hw'] - 1} (the "
        f"new high watermark {r['hw']}) {took * 1000:.0f} ms later: the high watermark reached the follower without "
        f"waiting out replica.fetch.wait.max.ms={FETCH_WAIT_MS}; then broker 2's reached {N + M + LATE}")


def isr_of(cl):
    st = clu.md_partition(cl.port(1), TOPIC, 0)
    return sorted(st[4]) if st else None


def step_isr(cl, tools):
    bootstrap = cl.env["BOOTSTRAP"].split(",", 1)[0]
    cl.kill(3)
    t0 = time.monotonic()
    clu.wait_for("broker 3 out of the ISR (Metadata)", lambda: isr_of(cl) == [1, 2], (SESSION_MS + LAG_MS) / 1000 + 15)
    times["isr shrink"] = time.monotonic() - t0
    d = tools.describe(bootstrap, TOPIC)
    check(d[0][:2] == (1, [1, 2, 3]) and sorted(d[0][2]) == [1, 2],
          f"kafka-topics --describe with broker 3 dead: {d[0]}")
    r = fetch(cl.port(1), 11, 0, rack="c")
    check(r["err"] == NONE and r["preferred"] == -1 and r["records"],
          f"rack c with broker 3 out of the ISR: error {r['err']}, preferred {r['preferred']}")
    log(f"kill -9 of broker 3: out of the ISR after {times['isr shrink']:.1f}s; kafka-topics --describe: leader 1, "
        "replicas 1,2,3, ISR 1,2; rack c is now served by the leader")
    t0 = time.monotonic()
    cl.start(3)
    clu.wait_for("broker 3 back in the ISR (Metadata)", lambda: isr_of(cl) == [1, 2, 3], 60)
    times["isr expand"] = time.monotonic() - t0
    d = tools.describe(bootstrap, TOPIC)
    check(d[0][:2] == (1, [1, 2, 3]) and sorted(d[0][2]) == [1, 2, 3],
          f"kafka-topics --describe after broker 3's return: {d[0]}")
    clu.wait_for("rack c sent to broker 3 again", lambda: fetch(cl.port(1), 11, 0, rack="c")["preferred"] == 3, 20)
    wait_same_batches(cl, [1, 3])
    wait_hw(cl, 3, N + M + LATE)
    got, _ = read_whole(cl.port(3), "c")
    check(len(got) == N + M + LATE, f"broker 3 serves {len(got)} records after its return, want {N + M + LATE}")
    log(f"broker 3 restarted: back in the ISR {times['isr expand']:.1f}s after its start (kafka-topics --describe: "
        f"ISR 1,2,3), rack c sent to it again, and it serves all {N + M + LATE} records")


def main():
    kcat = lib.kcat_path()
    java = clients.Java()
    tools = rep.Tools(java)
    with clu.temp_cluster("sluice-follower-fetch-", lambda root: clu.Cluster(root, BASE_PORT, SETS)) as cl:
        cl.up_timed(times, brokers=[1, 2, 3])
        step_racks(cl)
        step_create(cl, tools, kcat)
        step_leader_side(cl)
        step_follower_side(cl)
        _, total = read_whole(cl.port(1), "a")
        step_kcat(cl, kcat, total)
        step_java(cl, java, total)
        step_hw_limit(cl)
        step_isr(cl, tools)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
