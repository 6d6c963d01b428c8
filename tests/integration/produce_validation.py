#!/usr/bin/env python3
"""Produce must refuse record batches whose contents lie about themselves.

A batch with a correct CRC can still claim more or fewer records than it holds,
carry records whose length prefix does not cover exactly their fields, hide bytes
after the last record, number its records out of order, or wrap a compressed
payload that is truncated or holds another number of records. Kafka decodes every
record of a produced batch (decompressing compressed ones) and refuses these; a
broker that stores them burns offsets for records that do not exist and leaves
consumers stuck on a batch they cannot parse (librdkafka stalls silently).

Over raw sockets (Produce v9, flexible, so RecordErrors and ErrorMessage are
parsed), each lying batch is sent and the test checks the error code, the
per-record errors where Kafka gives them (a null key on a cleanup.policy=compact
topic), that the log end offset did not move, and finally that kcat consumes the
good records around the rejected ones to the end, in order, without stalling.
Expected codes are Apache Kafka 4.1's answers, observed with
SLUICE_TEST_TARGET=kafka; where Sluice deliberately answers otherwise the case
lists both and the test prints a NOTE.
"""
import os
import struct
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, log, varint  # noqa: E402

TOPIC = "pv"
COMPACT = "pv-compact"
ODD = "pv-odd"  # the lies Kafka stores: kept off TOPIC so kcat can read TOPIC on both targets
INVALID_RECORD, CORRUPT_MESSAGE, UNKNOWN_SERVER_ERROR = 87, 2, -1
TXN_ID_AUTH_FAILED, INVALID_TIMESTAMP = 53, 32


def rec(delta, key, value, hdrs=(), ts_delta=0, len_adjust=0, raw_tail=b""):
    """One v2 record; len_adjust skews its length prefix, raw_tail adds body bytes."""
    r = bytearray(b"\x00")
    r += varint(ts_delta) + varint(delta)
    r += varint(-1) if key is None else varint(len(key)) + key
    r += varint(-1) if value is None else varint(len(value)) + value
    r += varint(len(hdrs))
    for hk, hv in hdrs:
        r += varint(len(hk)) + hk + (varint(-1) if hv is None else varint(len(hv)) + hv)
    r += raw_tail
    return bytes(varint(len(r) + len_adjust) + r)


def records(n, prefix=b"r", first=0):
    return [rec(i, b"k%d" % (first + i), prefix + b"-%d" % (first + i)) for i in range(n)]


def gzip(data):
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def batch(recs, count=None, lod=None, codec=0, attrs=0, pid=-1, seq=-1, base_offset=0,
          section=None, base_ts=None):
    """A batch with a correct CRC around recs (a list of encoded records) or around
    section (raw bytes for the records part); count and lastOffsetDelta may lie."""
    if base_ts is None:
        base_ts = int(time.time() * 1000)
    if section is None:
        section = b"".join(recs)
        if codec == 1:
            section = gzip(section)
    n = len(recs) if count is None else count
    lod = (len(recs) - 1 if count is None else count - 1) if lod is None else lod
    after_crc = struct.pack(">hiqqqhii", (codec & 7) | attrs, lod, base_ts, base_ts, pid,
                            0 if pid >= 0 else -1, seq, n) + section
    body = struct.pack(">ibI", -1, 2, lib.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def produce(conn, topic, blob, version=9, txn_id=None):
    """Produce to partition 0: (error, base_offset, [(batch_index, message)], message)."""
    flex = version >= 9
    e = Enc()
    e.string(txn_id, flex)
    e.i16(-1).i32(10000)
    e.array_len(1, flex).string(topic, flex)
    e.array_len(1, flex).i32(0).bytes_(blob, flex)
    if flex:
        e.tags().tags().tags()
    d = conn.request(0, version, e.done(), flexible_req=flex)
    res = None
    for _ in range(d.array_len(flex)):
        d.string(flex)
        for _ in range(d.array_len(flex)):
            _idx, err, base = d.i32(), d.i16(), d.i64()
            d.i64()
            d.i64()
            rerrs = []
            for _ in range(d.array_len(flex)):
                rerrs.append((d.i32(), d.string(flex)))
                if flex:
                    d.tags()
            msg = d.string(flex)
            if flex:
                d.tags()
            res = (err, base, rerrs, msg)
        if flex:
            d.tags()
    return res


def create_topic(conn, name, configs):
    """CreateTopics v4 with one partition and the given configs; returns the error."""
    e = Enc().array_len(1).string(name).i32(1).i16(1).array_len(0)
    e.array_len(len(configs))
    for k, v in configs.items():
        e.string(k).string(v)
    e.i32(30000).i8(0)
    d = conn.request(19, 4, e.done())
    d.i32()
    d.array_len()
    d.string()
    return d.i16()


def end_offset(conn, topic):
    err, hw, _ = conn.fetch(topic, 0, 0)
    check(err == 0, f"fetch {topic}: error {err}")
    return hw


def test():
    notes, failures = [], []
    with lib.Broker("produce-validation", {"num.partitions": 1}) as broker:
        with lib.Conn(broker.port) as c:
            c.ensure_topic(TOPIC)
            c.ensure_topic(ODD)
            check(create_topic(c, COMPACT, {"cleanup.policy": "compact"}) in (0, 36),
                  "create the compacted topic")
            c.ensure_topic(COMPACT)
            good = 0

            def expect(name, blob, codes, topic=TOPIC, record_errors=None, txn_id=None):
                before = end_offset(c, topic)
                err, base, rerrs, msg = produce(c, topic, blob, txn_id=txn_id)
                after = end_offset(c, topic)
                out = f"error {err}" + (f" record errors {rerrs}" if rerrs else "") + \
                    (f" ({msg})" if msg else "")
                log(f"  {name:52s} {out}")
                if err not in codes:
                    failures.append(f"{name}: error {err}, expected one of {codes}")
                elif err != codes[0]:
                    notes.append(f"{name}: error {err} (Kafka: {codes[0]})")
                if after != before and not (err == 0 and broker.target == "kafka"):
                    failures.append(f"{name}: the log end offset moved {before} -> {after}")
                if record_errors is not None:
                    got = [i for i, _ in rerrs]
                    if got != record_errors:
                        failures.append(f"{name}: RecordErrors indices {got}, want {record_errors}")
                return rerrs, msg

            def accept(name, blob, n):
                nonlocal good
                err, base, _, msg = produce(c, TOPIC, blob)
                log(f"  {name:52s} error {err} base {base}")
                check(err == 0 and base == good, f"{name}: error {err} ({msg}) base {base}, want 0/{good}")
                good += n

            log("uncompressed")
            accept("good batch", batch(records(3, first=0)), 3)
            r3 = records(3, first=100)
            expect("count 4 with 3 records", batch(r3, count=4), [INVALID_RECORD])
            expect("count 2 with 3 records", batch(r3, count=2), [INVALID_RECORD])
            expect("count 2, lastOffsetDelta 2", batch(r3, count=2, lod=2), [INVALID_RECORD])
            over = [r3[0], rec(1, b"k101", b"r-101", len_adjust=1), r3[2]]
            expect("record 1 length one byte too long", batch(over), [INVALID_RECORD])
            under = [r3[0], rec(1, b"k101", b"r-101", len_adjust=-1), r3[2]]
            expect("record 1 length one byte too short", batch(under), [INVALID_RECORD])
            last_over = r3[:2] + [rec(2, b"k102", b"r-102", len_adjust=3)]
            expect("last record length past the batch end", batch(last_over), [INVALID_RECORD])
            tail = [r3[0], rec(1, b"k101", b"r-101", raw_tail=b"\x00\x00"), r3[2]]
            expect("record 1 with 2 stray bytes inside", batch(tail), [INVALID_RECORD])
            expect("3 bytes after the last record", batch(r3, section=b"".join(r3) + b"xyz"),
                   [INVALID_RECORD])
            expect("record 1 key length 99", batch(r3, section=r3[0] + rec(1, b"k", b"v")[:4] +
                                                   b"\xc6\x01" + rec(1, b"k", b"v")[5:] + r3[2]),
                   [INVALID_RECORD])
            expect("negative header count", batch([rec(0, b"k", b"v")[:-1] + b"\x01"]),
                   [INVALID_RECORD])
            swapped = [rec(0, b"a", b"0"), rec(2, b"b", b"1"), rec(1, b"c", b"2")]
            expect("offset deltas 0, 2, 1", batch(swapped), [0, INVALID_RECORD], topic=ODD)
            dup = [rec(0, b"a", b"0"), rec(0, b"b", b"1"), rec(1, b"c", b"2")]
            expect("offset deltas 0, 0, 1", batch(dup), [0, INVALID_RECORD], topic=ODD)
            accept("good batch after the lies", batch(records(2, first=3)), 2)

            log("attributes")
            expect("control batch", batch(records(1), attrs=0x20), [INVALID_RECORD])
            expect("transactional, no transactional id", batch(records(1), attrs=0x10, pid=5, seq=0),
                   [TXN_ID_AUTH_FAILED])
            expect("codec 5", batch(records(1), codec=5, section=b"\x00" * 8),
                   [UNKNOWN_SERVER_ERROR, INVALID_RECORD])
            expect("producer id 7 with sequence -1", batch(records(1), pid=7, seq=-1),
                   [INVALID_RECORD])
            expect("BaseOffset 5", batch(records(1), base_offset=5), [INVALID_RECORD])
            late = [rec(0, b"a", b"0"), rec(1, b"b", b"1"), rec(2, b"c", b"2", ts_delta=2 * 3600 * 1000)]
            rerrs, msg = expect("record 2 two hours in the future", batch(late), [INVALID_TIMESTAMP],
                                record_errors=[2])
            check(all(m and m.startswith("Timestamp ") and "of message with offset 2 is out of range" in m
                      for _, m in rerrs), f"timestamp record error {rerrs}")
            check(msg == "One or more records have been rejected due to invalid timestamp", f"message {msg!r}")

            log("gzip")
            accept("good gzip batch", batch(records(4, first=5), codec=1), 4)
            g3 = records(3, first=200)
            expect("gzip, count 4 with 3 records", batch(g3, codec=1, count=4), [INVALID_RECORD])
            expect("gzip, count 2 with 3 records", batch(g3, codec=1, count=2), [INVALID_RECORD])
            expect("gzip, record 1 length one byte too long",
                   batch([g3[0], rec(1, b"k201", b"r-201", len_adjust=1), g3[2]], codec=1),
                   [0, INVALID_RECORD], topic=ODD)  # Kafka's compressed path does not check it
            z = gzip(b"".join(g3))
            expect("gzip, payload truncated by 10 bytes", batch(g3, codec=1, section=z[:-10]),
                   [UNKNOWN_SERVER_ERROR, INVALID_RECORD])
            expect("gzip, payload not gzip", batch(g3, codec=1, section=b"\x55" * 40),
                   [UNKNOWN_SERVER_ERROR, INVALID_RECORD])
            expect("gzip, bytes after the last record", batch(g3, codec=1,
                                                             section=gzip(b"".join(g3) + b"\x00")),
                   [INVALID_RECORD])
            accept("good gzip batch after the lies", batch(records(2, first=9), codec=1), 2)

            log("compacted topic")
            nk = [rec(0, b"a", b"0"), rec(1, None, b"1"), rec(2, b"c", b"2"), rec(3, None, b"3")]
            rerrs, msg = expect("null keys at 1 and 3", batch(nk), [INVALID_RECORD], topic=COMPACT,
                                record_errors=[1, 3])
            want = f"Compacted topic cannot accept message without key in topic partition {COMPACT}-0"
            check(all(m == want for _, m in rerrs), f"record error messages {rerrs}, want {want!r}")
            check(msg and msg.startswith("One or more records have been rejected due to 2 record errors"),
                  f"error message {msg!r}")
            expect("gzip, null key at 0", batch([rec(0, None, b"0")], codec=1), [INVALID_RECORD],
                   topic=COMPACT, record_errors=[0])
            err, base, _, _ = produce(c, COMPACT, batch([rec(0, b"a", b"0")]))
            check(err == 0, f"keyed record on the compacted topic: error {err}")

            end = end_offset(c, TOPIC)
            check(end == good, f"log end offset {end}, want {good}")

        log("kcat consumes the good records to the end")
        kcat = lib.kcat_path(required=False)
        if kcat:
            r = lib.run([kcat, "-C", "-b", broker.bootstrap, "-t", TOPIC, "-p", "0", "-o", "beginning",
                         "-e", "-q", "-f", "%o %s\\n", "-X", "fetch.wait.max.ms=100"], timeout=60)
            lines = r.stdout.decode().split("\n") if isinstance(r.stdout, bytes) else r.stdout.split("\n")
            lines = [ln for ln in lines if ln]
            check(r.returncode == 0, f"kcat exit {r.returncode}: {r.stderr}")
            offsets = [int(ln.split()[0]) for ln in lines]
            check(offsets == list(range(good)), f"kcat offsets {offsets}, want 0..{good - 1}")
            log(f"  kcat read {len(lines)} records, offsets 0..{good - 1}")
            if broker.target == "kafka":
                # For the record: what librdkafka makes of the lies Kafka stored.
                try:
                    r = lib.run([kcat, "-C", "-b", broker.bootstrap, "-t", ODD, "-p", "0", "-o", "beginning",
                                 "-e", "-q", "-f", "%o %s\\n"], timeout=20)
                    log(f"  kcat on {ODD}: exit {r.returncode}, {len(r.stdout.split())} words")
                except lib.TestFailure as e:
                    log(f"  kcat on {ODD}: {e}")
        else:
            log("  kcat not installed: skipped")

    for n in notes:
        log(f"NOTE {n}")
    if failures:
        raise lib.TestFailure("; ".join(failures))


if __name__ == "__main__":
    lib.main(test)
