#!/usr/bin/env python3
"""Replication (issue 13): three controllers and three brokers through
deploy/local-cluster.sh, a topic with replication factor 3, and the leader of a
partition killed with SIGKILL.

Proves, in order:
- kafka-topics --create --replication-factor 3 makes a topic whose every partition has
  three replicas, and kafka-topics --describe shows its ISR as all three;
- acks=all waits for every ISR member: with a follower stopped (SIGSTOP), the answer
  comes once the leader has dropped it from the ISR (replica.lag.time.max.ms, or the
  controller's fencing), and with min.insync.replicas=3 it is
  NOT_ENOUGH_REPLICAS_AFTER_APPEND; the follower resumed rejoins the ISR;
- acks=all produce (raw Produce v3, so every answer's error and offset is seen) of N
  records to partition 0 is acknowledged, while a consumer fetching from the leader the
  whole time never gets a record at or past the high watermark its answer names;
- the followers' logs are the leader's, byte for byte (same offsets, bytes and CRCs);
- records the leader takes alone (acks=1 while its followers are stopped) never become
  visible (the high watermark stays);
- kill -9 of partition 0's leader: another replica from the ISR leads it (within the
  session timeout and a little), kafka-topics --describe shows the ISR without the dead
  broker, and the new leader serves every acknowledged record at its offset, and every
  record the consumer saw before the kill (nothing it read is lost);
- the new leader's side of the replica Fetch v12, raw: a stale CurrentLeaderEpoch gets
  FENCED_LEADER_EPOCH, a future one UNKNOWN_LEADER_EPOCH, a ReplicaId that is no replica
  NOT_LEADER_OR_FOLLOWER, and a follower whose log runs past the end of its
  LastFetchedEpoch here gets DivergingEpoch (that epoch, where it ended) and no records;
- producing works again (acks=all, as long as the ISR holds min.insync.replicas=2);
  a topic with min.insync.replicas=3 refuses acks=all with NOT_ENOUGH_REPLICAS (before
  appending anything) while acks=1 still works;
- the killed broker restarted truncates its unreplicated records at the divergence
  point the new leader's epochs give (Fetch's DivergingEpoch), catches up as a follower
  and rejoins the ISR of every partition (kafka-topics --describe), its log again byte
  for byte the leader's; the leaders' ISR changes that bring it back into the 40
  partitions of topic `many` go to the controller batched, several in one AlterPartition
  (their logs say "asking the controller for N ISR changes in one AlterPartition", N > 1).

Short timeouts through local-cluster.sh's --set: broker.session.timeout.ms=4000,
broker.heartbeat.interval.ms=500, controller.quorum.election.timeout.ms=1000,
replica.lag.time.max.ms=3000. Ports 20500-20605 on 127.0.0.1 (brokers 20500-20502,
controllers 20600/20602/20604 and their Raft ports + 1).
"""
import hashlib
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import cluster as clu  # noqa: E402
import lib  # noqa: E402
from lib import Dec, Enc, check, log  # noqa: E402

BASE_PORT = 20500
SESSION_MS, HEARTBEAT_MS, ELECTION_MS, LAG_MS = 4000, 500, 1000, 3000
SETS = ["--set", f"broker.session.timeout.ms={SESSION_MS}",
        "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={LAG_MS}"]
TOPICS = "org.apache.kafka.tools.TopicCommand"
TOPIC, STRICT, MANY = "replicated", "strict", "many"
MANY_PARTITIONS = 40
N, PER_BATCH = 3000, 50
NONE, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS = 0, 6, 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 20, 74, 75
times = {}


def ids(text):
    return [int(x) for x in text.split(",") if x]


class Tools(clu.Tools):
    def describe(self, bootstrap, topic):
        """{partition: (leader, [replicas], [isr])} from kafka-topics --describe."""
        out = self.run("topics", TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
        parts = {}
        for m in re.finditer(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)\s+Replicas:\s*([\d,]*)\s+Isr:\s*([\d,]*)", out):
            parts[int(m.group(1))] = (int(m.group(2)), ids(m.group(3)), ids(m.group(4)))
        check(parts, f"kafka-topics --describe {topic}: no partitions in {out!r}")
        return parts

    def create_rf3(self, bootstrap, topic, partitions, *configs):
        args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", str(partitions),
                "--replication-factor", "3"]
        for c in configs:
            args += ["--config", c]
        out = self.run("topics", TOPICS, *args)
        check(f"Created topic {topic}." in out, f"kafka-topics --create {topic}: {out!r}")


def produce(port, topic, p, values, acks=-1):
    """(error, base offset, message) of one Produce v3 of values to topic-p at port."""
    blob = lib.record_batch([(None, v.encode(), []) for v in values])
    return clu.call(port, lambda c: c.produce(topic, p, blob, version=3, acks=acks))


def high_watermark(port):
    """topic-0's high watermark as its leader at port answers a Fetch, or -1."""
    try:
        with lib.Conn(port, timeout=5) as c:
            err, hw, _blob = c.fetch(TOPIC, 0, 0, max_bytes=1, max_wait_ms=0)
    except (OSError, lib.ProtocolError):
        return -1
    return hw if err == NONE else -1


def read_all(port, topic, p):
    """{offset: value} of every record of topic-p, read from port (its leader)."""
    got, offset = {}, 0
    with lib.Conn(port, timeout=10) as c:
        while True:
            err, hw, blob = c.fetch(topic, p, offset, max_wait_ms=0)
            check(err == NONE, f"fetch {topic}-{p} at {offset} from port {port}: error {err}")
            for b in lib.parse_batches(blob):
                check(b["crc_ok"], f"{topic}-{p}: batch at {b['base_offset']} has a bad CRC")
                for off, _k, v, _h in lib.decode_records(b["raw"]):
                    got[off] = v.decode()
                    offset = off + 1
            if offset >= hw:
                return got


def replica_fetch(port, replica_id, epoch, offset, last_epoch, topic=TOPIC, p=0):
    """One replica Fetch v12 (as a follower sends it, max wait 0): (error, high watermark,
    DivergingEpoch (epoch, end offset) or None, records bytes)."""
    e = Enc().i32(replica_id).i32(0).i32(1).i32(1 << 20).i8(0).i32(0).i32(-1)
    e.array_len(1, True).string(topic, True).array_len(1, True)
    e.i32(p).i32(epoch).i64(offset).i32(last_epoch).i64(-1).i32(1 << 20).tags().tags()
    e.array_len(0, True).string("", True).tags()
    d = clu.call(port, lambda c: c.request(1, 12, e.done(), flexible_req=True))
    d.i32()  # ThrottleTimeMs
    check(d.i16() == NONE, "replica Fetch: a request-level error")
    d.i32()  # SessionId
    res = None
    for _ in range(d.array_len(True)):
        d.string(True)
        for _ in range(d.array_len(True)):
            d.i32()
            err, hw = d.i16(), d.i64()
            d.i64()
            d.i64()
            for _ in range(max(d.array_len(True), 0)):
                d.i64()
                d.i64()
                d.tags()
            d.i32()  # PreferredReadReplica
            records = d.bytes_(True) or b""
            diverging = None
            for _ in range(d.uv()):
                tag, size = d.uv(), d.uv()
                body = Dec(d._take(size))
                if tag == 0:
                    diverging = (body.i32(), body.i64())
            res = (err, hw, diverging, records)
        d.tags()
    d.tags()
    return res


class Consumer(threading.Thread):
    """Fetches topic-0 from its leader's port over and over (v4, long polls of 100 ms),
    keeping every record it gets, and checking each against the high watermark of the
    answer that carried it: a consumer never reads at or past it."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.seen, self.stop, self.violations, self.errors = port, {}, threading.Event(), [], 0

    def run(self):
        offset = 0
        try:
            c = lib.Conn(self.port, timeout=5)
        except OSError:
            self.errors += 1
            return
        with c:
            while not self.stop.is_set():
                try:
                    err, hw, blob = c.fetch(TOPIC, 0, offset, max_wait_ms=100)
                except (OSError, lib.ProtocolError):
                    self.errors += 1
                    return
                if err != NONE:
                    self.errors += 1
                    continue
                for b in lib.parse_batches(blob):
                    for off, _k, v, _h in lib.decode_records(b["raw"]):
                        if off >= hw:
                            self.violations.append((off, hw))
                        self.seen[off] = v.decode()
                        offset = off + 1


def segments_digest(cl, broker, topic, p):
    """sha256 over partition topic-p's .log files on broker (in offset order)."""
    h = hashlib.sha256()
    files = cl.segments(broker, topic, p)
    check(files, f"broker {broker} holds no segment of {topic}-{p}")
    for f in files:
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def wait_same_logs(cl, brokers, topic, p, timeout=20):
    def same():
        d = {b: segments_digest(cl, b, topic, p) for b in brokers}
        return d if len(set(d.values())) == 1 else None
    return clu.wait_for(f"{topic}-{p}'s segments identical on brokers {brokers}", same, timeout)


# ----------------------------------------------------------------- steps

def step_create(cl, tools):
    bootstrap = cl.env["BOOTSTRAP"]
    tools.create_rf3(bootstrap, TOPIC, 3, "min.insync.replicas=2")
    tools.create_rf3(bootstrap, STRICT, 1, "min.insync.replicas=3")
    tools.create_rf3(bootstrap, MANY, MANY_PARTITIONS)
    ports = [cl.port(b) for b in cl.brokers]
    clu.wait_identical(cl, ports)
    for topic in (TOPIC, STRICT, MANY):
        parts = clu.wait_for(f"{topic}: ISR of all three in kafka-topics --describe",
                             lambda: (lambda d: d if all(sorted(isr) == cl.brokers for _l, _r, isr in d.values())
                                  else None)(tools.describe(bootstrap, topic)), 20)
        for p, (leader, replicas, isr) in parts.items():
            check(sorted(replicas) == cl.brokers and leader == replicas[0] and leader in isr,
                  f"{topic}-{p}: leader {leader}, replicas {replicas}, isr {isr}")
    log(f"{TOPIC} and {STRICT}: 3 replicas each, ISR all three (kafka-topics --describe)")


def step_acks_all_waits(cl, tools):
    """acks=all waits for every ISR member: with a follower of strict-0 stopped, the
    answer comes only once the leader has dropped it from the ISR (after
    replica.lag.time.max.ms, through AlterPartition, or the controller's fencing),
    and then, the ISR below min.insync.replicas=3, as NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    _e, leader, _ep, replicas, isr = clu.md_partition(cl.port(1), STRICT, 0)
    stopped = [b for b in replicas if b != leader][0]
    pid = cl.pid(stopped)
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        err, base, msg = produce(cl.port(leader), STRICT, 0, ["waits"], acks=-1)
        waited = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    check(err == NOT_ENOUGH_REPLICAS_AFTER_APPEND and waited >= LAG_MS / 1000 - 0.5,
          f"acks=all with follower {stopped} stopped: error {err} {msg} after {waited:.2f}s")
    log(f"{STRICT}-0: acks=all with follower {stopped} stopped answered after {waited:.2f}s, once the ISR dropped "
        f"it, with NOT_ENOUGH_REPLICAS_AFTER_APPEND (ISR below min.insync.replicas=3)")
    clu.wait_for(f"broker {stopped} back in {STRICT}-0's ISR", lambda: (
        lambda st: st and sorted(st[4]) == cl.brokers)(clu.md_partition(cl.port(1), STRICT, 0)), 30)
    return 1  # strict-0's log end: the record was appended (only its answer is the error)


def step_produce(cl):
    _e, leader, epoch, _r, _i = clu.md_partition(cl.port(1), TOPIC, 0)
    port = cl.port(leader)
    consumer = Consumer(port)
    consumer.start()
    acked = {}
    t0 = time.monotonic()
    for i in range(0, N, PER_BATCH):
        values = [f"r-{j}" for j in range(i, i + PER_BATCH)]
        err, base, msg = produce(port, TOPIC, 0, values)
        check(err == NONE, f"acks=all produce of records {i}..: error {err} {msg}")
        for k, v in enumerate(values):
            acked[base + k] = v
    times["produce acks=all"] = time.monotonic() - t0
    check(sorted(acked) == list(range(N)), f"acknowledged offsets are not 0..{N - 1}")
    clu.wait_for("the consumer to read every acknowledged record", lambda: len(consumer.seen) >= N, 20)
    consumer.stop.set()
    consumer.join(10)
    check(not consumer.violations, f"records at or past the high watermark were served: {consumer.violations[:5]}")
    check(consumer.seen == acked, "the consumer read other records than those acknowledged")
    digests = wait_same_logs(cl, cl.brokers, TOPIC, 0)
    log(f"{N} records acknowledged with acks=all in {times['produce acks=all']:.2f}s by leader {leader} "
        f"(epoch {epoch}); the consumer read them all, none past the high watermark; the three logs are "
        f"identical ({next(iter(digests.values()))[:12]})")
    return leader, acked, consumer.seen


def step_kill_leader(cl, tools, old_leader, acked, seen, strict_end):
    """The leader gets records its followers never fetch (they are stopped while it
    takes them with acks=1), then dies: those records are not acknowledged by acks=all,
    never visible, and the new leader writes over their offsets."""
    survivors = [b for b in cl.brokers if b != old_leader]
    port = cl.port(survivors[0])
    for b in survivors:
        os.kill(cl.pid(b), signal.SIGSTOP)
    # The followers' fetches parked at the leader end (replica.fetch.wait.max.ms: their
    # empty answers wait in their sockets) and no new one comes: nothing carries the
    # records below to them.
    time.sleep(0.8)
    try:
        err, base, msg = produce(cl.port(old_leader), TOPIC, 0, [f"unreplicated-{i}" for i in range(20)], acks=1)
        check(err == NONE and base == N, f"acks=1 to the leader alone: error {err} base {base} {msg}")
        check(high_watermark(cl.port(old_leader)) == N, "records no follower has are visible (high watermark moved)")
        # kill -9 of the leader before the followers run again (else they fetch those).
        pid = cl.pid(old_leader)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        clu.wait_for(f"broker {old_leader} gone after SIGKILL", lambda: not cl.ours(pid), 30)
    finally:
        for b in survivors:
            os.kill(cl.pid(b), signal.SIGCONT)
    log(f"20 records taken by leader {old_leader} alone (acks=1, followers stopped): high watermark stayed {N}; "
        f"leader killed (kill -9)")

    def moved():
        st = clu.md_partition(port, TOPIC, 0)
        return st if st and st[0] == NONE and st[1] in survivors and old_leader not in st[4] else None
    err, leader, epoch, replicas, isr = clu.wait_for("a new leader from the ISR for partition 0", moved,
                                                     SESSION_MS / 1000 + 15)
    times["new leader"] = time.monotonic() - t0
    check(leader in survivors and sorted(isr) == survivors, f"after the kill: leader {leader}, isr {isr}")
    # A new leader's high watermark is the one it had as a follower (its last answer
    # from the old leader) until its ISR has fetched from it, as in Kafka: the
    # acknowledged records become visible then.
    clu.wait_for(f"the new leader's high watermark to reach {N}", lambda: high_watermark(cl.port(leader)) >= N, 15)
    got = read_all(cl.port(leader), TOPIC, 0)
    lost = [o for o in acked if got.get(o) != acked[o]]
    check(not lost, f"{len(lost)} acknowledged records lost or changed after the failover (first {lost[:5]})")
    lost = [o for o in seen if got.get(o) != seen[o]]
    check(not lost, f"{len(lost)} records a consumer read before the kill are gone (first {lost[:5]})")
    check(len(got) == N, f"the new leader holds {len(got)} records, {N} were produced")

    def produced():
        r = produce(cl.port(leader), TOPIC, 0, [f"after-{i}" for i in range(PER_BATCH)])
        return r if r[0] == NONE else None
    err, base, _msg = clu.wait_for("acks=all produce to the new leader", produced, 15)
    times["writes again"] = time.monotonic() - t0
    check(base == N, f"the first record after the failover went to offset {base}, not {N}")
    log(f"broker {old_leader} killed: broker {leader} leads {TOPIC}-0 at epoch {epoch} after "
        f"{times['new leader']:.2f}s, ISR {isr}; all {N} acknowledged records there at their offsets; "
        f"acks=all works again after {times['writes again']:.2f}s")
    parts = clu.wait_for("kafka-topics --describe: the ISR without the dead broker",
                         lambda: (lambda d: d if all(old_leader not in isr for _l, _r, isr in d.values()) else None)(
                         tools.describe(cl.env["BOOTSTRAP"], TOPIC)), 20)
    log(f"kafka-topics --describe {TOPIC}: {parts}")

    # The leader's side of the replica Fetch, raw: the epochs checked, a replica the
    # partition does not have refused, a diverged log told where (the old leader's
    # epoch ended at N here: what a follower holding its unreplicated records asks).
    lport, follower = cl.port(leader), [b for b in survivors if b != leader][0]
    err, _hw, div, _r = replica_fetch(lport, follower, epoch - 1, N, epoch - 1)
    check(err == FENCED_LEADER_EPOCH, f"replica Fetch at a stale epoch: error {err}")
    err, _hw, div, _r = replica_fetch(lport, follower, epoch + 1, N, epoch - 1)
    check(err == UNKNOWN_LEADER_EPOCH, f"replica Fetch at a future epoch: error {err}")
    err, _hw, div, _r = replica_fetch(lport, 99, epoch, N, epoch - 1)
    check(err == NOT_LEADER_OR_FOLLOWER, f"replica Fetch from broker 99, not a replica: error {err}")
    err, hw, div, recs = replica_fetch(lport, follower, epoch, N + 20, epoch - 1)
    check(err == NONE and div == (epoch - 1, N) and not recs,
          f"replica Fetch at {N + 20} under epoch {epoch - 1}: error {err}, DivergingEpoch {div}, "
          f"{len(recs)} record bytes")
    log(f"replica Fetch v12 to leader {leader}: FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, "
        f"NOT_LEADER_OR_FOLLOWER for a non-replica, DivergingEpoch {div} for a log past epoch {epoch - 1}'s end")

    _e, sleader, _ep, _r, sisr = clu.wait_for(f"{STRICT}: ISR of two", lambda: (
        lambda st: st if st and st[1] in survivors and len(st[4]) == 2 else None)(
            clu.md_partition(port, STRICT, 0)), 20)
    err, _b, msg = produce(cl.port(sleader), STRICT, 0, ["strict-all"], acks=-1)
    check(err == NOT_ENOUGH_REPLICAS, f"acks=all with ISR {sisr} < min.insync.replicas=3: error {err} {msg}")
    err, base, msg = produce(cl.port(sleader), STRICT, 0, ["strict-one"], acks=1)
    check(err == NONE and base == strict_end,
          f"acks=1 to {STRICT}: error {err} base {base} (not {strict_end}) {msg}: the acks=all one was appended?")
    log(f"{STRICT} (min.insync.replicas=3, ISR {sisr}): acks=all refused with NOT_ENOUGH_REPLICAS, nothing "
        f"appended; acks=1 accepted at offset {base}")
    return leader


def step_rejoin(cl, tools, old_leader, leader):
    others = [b for b in cl.brokers if b != old_leader]
    log_at = {b: os.path.getsize(cl.out_log(b)) for b in others}
    t0 = time.monotonic()
    cl.start(old_leader)
    bootstrap = cl.env["BOOTSTRAP"]
    for topic in (TOPIC, STRICT, MANY):
        parts = clu.wait_for(f"{topic}: broker {old_leader} back in every ISR (kafka-topics --describe)",
                             lambda: (lambda d: d if all(sorted(isr) == cl.brokers for _l, _r, isr in d.values())
                                  else None)(tools.describe(bootstrap, topic)), 40)
    times["rejoined"] = time.monotonic() - t0
    log(f"broker {old_leader} restarted: back in the ISR of every partition after {times['rejoined']:.2f}s: "
        f"{parts}")
    batched = []
    for b in others:
        with open(cl.out_log(b), errors="replace") as f:
            f.seek(log_at[b])
            batched += [int(n) for n in
                        re.findall(r"asking the controller for (\d+) ISR changes in one AlterPartition", f.read())]
    check(batched and max(batched) > 1,
          f"brokers {others} sent no AlterPartition with more than one ISR change while broker {old_leader} "
          f"rejoined the ISR of {MANY_PARTITIONS + 4} partitions (batches: {batched})")
    log(f"the leaders batched those ISR changes: AlterPartition requests of {batched} changes (and single ones)")
    wait_same_logs(cl, cl.brokers, TOPIC, 0)
    st = clu.md_partition(cl.port(1), TOPIC, 0)
    got = read_all(cl.port(st[1]), TOPIC, 0)
    check(len(got) == N + PER_BATCH and not any(v.startswith("unreplicated") for v in got.values()),
          f"{TOPIC}-0 holds {len(got)} records after the return, {N + PER_BATCH} were acknowledged")
    with open(cl.out_log(old_leader), errors="replace") as f:
        check(re.search(rf"{TOPIC}-0: diverged from the leader .* truncating from {N + 20} to {N}\b", f.read()),
              f"broker {old_leader} did not log its truncation of {TOPIC}-0 from {N + 20} to {N}")
    log(f"its log of {TOPIC}-0 dropped its 20 unreplicated records (truncated at the divergence point {N}, "
        f"DivergingEpoch) and is the leader's byte for byte again ({N + PER_BATCH} records, leader {st[1]})")


def main():
    java = clients.Java()
    tools = Tools(java)
    with clu.temp_cluster("sluice-replication-", lambda root: clu.Cluster(root, BASE_PORT, SETS)) as cl:
        cl.up_timed(times, brokers=[1, 2, 3])
        step_create(cl, tools)
        strict_end = step_acks_all_waits(cl, tools)
        old_leader, acked, seen = step_produce(cl)
        leader = step_kill_leader(cl, tools, old_leader, acked, seen, strict_end)
        step_rejoin(cl, tools, old_leader, leader)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
