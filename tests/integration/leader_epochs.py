#!/usr/bin/env python3
"""Leader epochs on a single node (issue 13): OffsetForLeaderEpoch and the
checkpoint files, checked against what Apache Kafka does
(SLUICE_TEST_TARGET=kafka runs the same test against it). Proves:

- OffsetForLeaderEpoch v2-v4 is advertised (ApiVersions 2-4) and answers raw
  requests as Kafka's rules give from the leader-epoch-checkpoint on disk
  and the leader epoch Metadata names: the current epoch ends at the log
  end, with CurrentLeaderEpoch -1 or the current one; an older epoch where
  the next one starts (Kafka bumps a single node's leader epoch at each
  restart; Sluice's stays 0); an epoch above every known one and epoch -1
  answer UNDEFINED (-1, -1) without an error; a newer CurrentLeaderEpoch is
  UNKNOWN_LEADER_EPOCH (75), an older one FENCED_LEADER_EPOCH (74); an empty
  partition knows its leader's epoch from offset 0 (the leader started it
  there); an unknown partition or topic is UNKNOWN_TOPIC_OR_PARTITION (3);
  a follower's and a debugging tool's ReplicaId get the same answers;
- the Apache Kafka Java consumer, seeking to an offset read under epoch 0,
  validates it with OffsetForLeaderEpoch and reads on from there; seeking
  under an epoch the broker never had, it detects truncation: a
  LogTruncationException with auto.offset.reset=none, a reset to the
  earliest offset with earliest;
- the partition directories hold leader-epoch-checkpoint in Kafka's format
  (on a single Sluice node exactly "0 / 1 / 0 0"; its first entry epoch 0
  at 0, its last the current leader epoch) and the data directory's
  replication-offset-checkpoint names each partition
  with its high watermark (written every
  replica.high.watermark.checkpoint.interval.ms, here 500), in Kafka's
  format; both survive a clean restart and a kill -9 (after which the high
  watermark checkpoint is the last one written before the kill), and the
  answers and the records are the same after each.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

TOPIC = "epochs"
API = 23


def offset_for_leader_epoch(conn, version, topic, entries, replica=-1):
    """entries: [(partition, current_leader_epoch, leader_epoch)]. Returns
    [(partition, error, leader_epoch, end_offset)] in answer order."""
    flex = version >= 4
    e = lib.Enc()
    if version >= 3:
        e.i32(replica)
    e.array_len(1, flex).string(topic, flex).array_len(len(entries), flex)
    for p, cur, ep in entries:
        e.i32(p).i32(cur).i32(ep)
        if flex:
            e.tags()
    if flex:
        e.tags().tags()
    d = conn.request(API, version, e.done(), flexible_req=flex)
    check(d.i32() == 0, "ThrottleTimeMs 0")
    out = []
    for _ in range(d.array_len(flex)):
        check(d.string(flex) == topic, "topic echoed")
        for _ in range(d.array_len(flex)):
            err, p, ep, end = d.i16(), d.i32(), d.i32(), d.i64()
            if flex:
                d.tags()
            out.append((p, err, ep, end))
        if flex:
            d.tags()
    if flex:
        d.tags()
    return out


def log_dir(broker):
    return os.path.join(broker.datadir, "logs") if broker.target == "kafka" else broker.datadir


def read_file(path):
    with open(path) as f:
        return f.read()


def hw_entries(broker):
    """replication-offset-checkpoint as {(topic, partition): offset}, checked for format."""
    text = read_file(os.path.join(log_dir(broker), "replication-offset-checkpoint"))
    lines = text.split("\n")
    check(text.endswith("\n") and lines[0] == "0", f"version line 0: {text!r}")
    n = int(lines[1])
    body = lines[2:-1]
    check(len(body) == n, f"count {n} for {len(body)} lines: {text!r}")
    out = {}
    for line in body:
        t, p, o = line.split(" ")
        out[(t, int(p))] = int(o)
    return out


def wait_hw(broker, want, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = hw_entries(broker)
            if all(got.get(k) == v for k, v in want.items()):
                return got
        except (OSError, ValueError, lib.TestFailure):
            got = None
        if time.monotonic() > deadline:
            raise lib.TestFailure(f"replication-offset-checkpoint never held {want}: {got}")
        time.sleep(0.2)


def produce(conn, partition, n, tag):
    blob = lib.record_batch([(None, f"{tag}-{i}".encode(), []) for i in range(n)])
    err, base, _ = conn.produce(TOPIC, partition, blob, version=7)
    check(err == 0, f"produce to {partition}: error {err}")
    return base


def leader_epochs(conn):
    """Metadata v7: {partition: leader epoch} of TOPIC."""
    d = conn.request(3, 7, lib.Enc().array_len(1).string(TOPIC).i8(0).done())
    d.i32()  # throttle
    for _ in range(d.array_len()):
        d.i32(), d.string(), d.i32(), d.string()
    d.string()
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        terr, name = d.i16(), d.string()
        d.i8()
        for _ in range(d.array_len()):
            perr, idx, _leader, epoch = d.i16(), d.i32(), d.i32(), d.i32()
            for _ in range(3):
                for _ in range(d.array_len()):
                    d.i32()
            if name == TOPIC and terr == 0 and perr == 0:
                out[idx] = epoch
    return out


def epoch_cache(broker, partition):
    """leader-epoch-checkpoint of a partition as [(epoch, start)], checked for
    Kafka's format and order."""
    path = os.path.join(log_dir(broker), f"{TOPIC}-{partition}", "leader-epoch-checkpoint")
    text = read_file(path)
    lines = text.split("\n")
    check(text.endswith("\n") and lines[0] == "0", f"{path}: version line: {text!r}")
    body = lines[2:-1]
    check(int(lines[1]) == len(body), f"{path}: count {lines[1]} for {len(body)} lines")
    out = [tuple(int(x) for x in line.split(" ")) for line in body]
    for a, b in zip(out, out[1:]):
        check(a[0] < b[0] and a[1] < b[1], f"{path}: entries not increasing: {out}")
    return out


def end_offset_for(cache, epoch, leo):
    """Kafka's LeaderEpochFileCache.endOffsetFor: (epoch, end offset)."""
    if epoch < 0 or not cache:
        return -1, -1
    if cache[-1][0] == epoch:
        return epoch, leo
    higher = [i for i, (e, _) in enumerate(cache) if e > epoch]
    if not higher:
        return -1, -1
    i = higher[0]
    return (epoch if i == 0 else cache[i - 1][0]), cache[i][1]


def check_epoch_files(broker, leo, current):
    """Both partitions' leader-epoch-checkpoint: an epoch from offset 0 first
    (epoch 0 where there are records), the current leader epoch last,
    nothing past the log end; on a single
    Sluice node (whose leader epoch stays 0) exactly "0 / 1 / 0 0". Sluice
    writes a changed cache's file within a second (off the path of the
    writes, synced before the log rolls), Kafka at once: looked at for up
    to 5 s."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return check_epoch_files_once(broker, leo, current)
        except (lib.TestFailure, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def check_epoch_files_once(broker, leo, current):
    for p in (0, 1):
        cache = epoch_cache(broker, p)
        # Epoch 0 from offset 0 where the records of epoch 0 are; an empty
        # partition's later epochs start at 0 too, replacing it (Kafka's).
        check(cache and cache[0][1] == 0 and (leo[p] == 0 or cache[0][0] == 0), f"partition {p}: first entry {cache}")
        check(cache[-1][0] == current[p], f"partition {p}: last epoch {cache} vs leader epoch {current[p]}")
        check(all(s <= leo[p] for _, s in cache), f"partition {p}: {cache} past the log end {leo[p]}")
        if broker.target == "sluice":
            check(cache == [(0, 0)], f"partition {p}: {cache}, want [(0, 0)]")


def check_answers(broker, leo):
    """Raw OffsetForLeaderEpoch on every version (and several ReplicaIds),
    each answer what Kafka's rules give from the leader-epoch-checkpoint on
    disk, the log ends leo[p] and the leader epochs Metadata names."""
    with lib.Conn(broker.port) as c:
        lo, hi = c.api_versions().get(API, (None, None))
        check((lo, hi) == (2, 4), f"OffsetForLeaderEpoch advertised {lo}-{hi}, want 2-4")
        current = leader_epochs(c)
        check(sorted(current) == [0, 1], f"leader epochs {current}")
        # A first request opens the partitions (Sluice opens a partition's log
        # on its first use after a restart or its creation; Kafka at start).
        offset_for_leader_epoch(c, 4, TOPIC, [(0, -1, 0), (1, -1, 0)])
        check_epoch_files(broker, leo, current)
        cache = {p: epoch_cache(broker, p) for p in (0, 1)}
        cur = current[0]
        asks = [(0, -1, cur), (0, cur, cur), (0, -1, 0), (0, -1, cur + 7), (0, -1, -1), (0, cur + 1, 0),
                (1, -1, current[1]), (1, -1, 0), (9, -1, 0)]
        if cur > 0:
            asks.append((0, cur - 1, 0))  # an older CurrentLeaderEpoch: fenced
        want = []
        for p, c_ep, ep in asks:
            if p not in cache:
                want.append((p, 3, -1, -1))
            elif c_ep >= 0 and c_ep < current[p]:
                want.append((p, 74, -1, -1))
            elif c_ep > current[p]:
                want.append((p, 75, -1, -1))
            else:
                e, end = end_offset_for(cache[p], ep, leo[p])
                want.append((p, 0, e, end))
        for v in (2, 3, 4):
            got = offset_for_leader_epoch(c, v, TOPIC, asks)
            check(got == want, f"v{v}: {got}, want {want}")
            for replica in (-2, 1):
                again = offset_for_leader_epoch(c, v, TOPIC, asks[:1], replica=replica)
                check(again == want[:1], f"v{v} ReplicaId {replica}: {again}")
        got = offset_for_leader_epoch(c, 4, "no-such-topic", [(0, -1, 0)])
        check(got == [(0, 3, -1, -1)], f"unknown topic: {got}")
        return current


def read_all(conn, partition, end):
    """The records of a partition up to end, by raw fetches, CRCs checked:
    how many, their offsets contiguous from 0."""
    n, off = 0, 0
    while off < end:
        err, hw, blob = conn.fetch(TOPIC, partition, off)
        check(err == 0, f"fetch at {off}: error {err}")
        batches = list(lib.parse_batches(blob))
        check(batches, f"nothing at {off} below {end} (hw {hw})")
        for b in batches:
            check(b["crc_ok"] and b["base_offset"] == off, f"batch at {off}: {b['base_offset']}, crc {b['crc_ok']}")
            recs = lib.decode_records(b["raw"])
            check([r[0] for r in recs] == list(range(off, off + len(recs))), f"offsets at {off}")
            n += len(recs)
            off = b["base_offset"] + b["last_offset_delta"] + 1
    return n


def java_checks(broker, java, classes):
    def seek(offset, epoch, reset):
        r = java.run("SluiceJavaClient", "seek-epoch", broker.bootstrap, TOPIC, 0, offset, epoch, reset,
                     classpath=[classes], timeout=120)
        return r.returncode, (r.stdout + r.stderr[-1500:]).strip()

    rc, out = seek(5, 0, "none")
    check(rc == 0 and "OK first offset 5 epoch 0" in out, f"seek to 5 under epoch 0: {out}")
    rc, out = seek(5, 3, "none")
    check(rc == 1 and "LogTruncationException" in out, f"seek under an unknown epoch, no reset: {out}")
    rc, out = seek(5, 3, "earliest")
    check(rc == 0 and "OK first offset 0" in out, f"seek under an unknown epoch, reset earliest: {out}")
    log("Java consumer: validated a position with OffsetForLeaderEpoch, detected truncation for an unknown epoch")


def test():
    java = clients.Java()
    classes = java.test_client()
    props = {"num.partitions": 2, "replica.high.watermark.checkpoint.interval.ms": 500}
    with lib.Broker("epochs", props) as broker:
        with lib.Conn(broker.port) as c:
            check(c.ensure_topic(TOPIC) == 2, "two partitions")
            for i in range(3):
                produce(c, 0, 4, f"a{i}")
        check_answers(broker, {0: 12, 1: 0})
        java_checks(broker, java, classes)
        hw = wait_hw(broker, {(TOPIC, 0): 12, (TOPIC, 1): 0})
        log(f"checkpoints after produce: leader epochs {epoch_cache(broker, 0)}, high watermarks {hw}")

        broker.restart()
        wait_hw(broker, {(TOPIC, 0): 12, (TOPIC, 1): 0}, timeout=2)
        current = check_answers(broker, {0: 12, 1: 0})
        log(f"after a restart: leader epochs {current}, partition 0's cache {epoch_cache(broker, 0)}")
        with lib.Conn(broker.port) as c:
            produce(c, 0, 4, "b")
        wait_hw(broker, {(TOPIC, 0): 16})
        time.sleep(1.0)  # one more interval: the file is current when the broker dies
        broker.kill9()
        hw = hw_entries(broker)
        check(hw.get((TOPIC, 0)) == 16, f"the checkpoint written before kill -9: {hw}")
        broker.start()
        current = check_answers(broker, {0: 16, 1: 0})
        log(f"after kill -9: leader epochs {current}, partition 0's cache {epoch_cache(broker, 0)}")
        with lib.Conn(broker.port) as c:
            check(read_all(c, 0, 16) == 16, "every record back after kill -9")
        log("after a clean restart and a kill -9: the same answers and checkpoint files")


if __name__ == "__main__":
    lib.main(test)
