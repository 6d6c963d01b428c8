#!/usr/bin/env python3
"""Preallocation follows each partition's write rate and is given back when
the partition goes idle. Proves:

- one small record to each of 300 partitions leaves little allocated: the
  .log files' blocks (st_blocks) sum to at most 16 KiB a partition (it was
  2 MiB each, 600 MiB in all);
- a partition written fast still gets preallocation in large steps (at least
  1 MiB ahead of its data while it is busy), the write path's benefit;
- once idle, both give back what they do not use: every .log file's
  allocation falls to its written blocks within about PREALLOC_IDLE_MS (5 s).
"""
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

PARTS = 300
BLOCK = 4096


def create_topic(port, name, parts):
    e = lib.Enc().array_len(1).string(name).i32(parts).i16(1).array_len(0).array_len(0)
    e.i32(60000).i8(0)
    with lib.Conn(port, timeout=60) as c:
        d = c.request(19, 4, e.done())
        d.i32()
        d.array_len()
        d.string()
        return d.i16()


def produce_all(port, topic, parts, batch):
    e = lib.Enc().string(None).i16(1).i32(30000)
    e.array_len(1).string(topic).array_len(len(parts))
    for p in parts:
        e.i32(p).bytes_(batch)
    with lib.Conn(port, timeout=120) as c:
        d = c.request(0, 3, e.done())
    errs = 0
    for _ in range(d.array_len()):
        d.string()
        for _ in range(d.array_len()):
            _idx, err, _base, _t = d.i32(), d.i16(), d.i64(), d.i64()
            errs += err != 0
    return errs


def usage(datadir, topic, data_bytes):
    """(allocated bytes, bytes allocated past the written blocks) over topic's
    .log files, each holding data_bytes (the file size counts preallocated
    space too: fallocate mode 0)."""
    alloc = extra = 0
    for f in glob.glob(os.path.join(datadir, f"{topic}-*", "*.log")):
        a = os.stat(f).st_blocks * 512
        alloc += a
        extra += max(0, a - (data_bytes + BLOCK - 1) // BLOCK * BLOCK)
    return alloc, extra


def test():
    if lib.TARGET != "sluice":
        lib.skip("checks Sluice's preallocation")
    with lib.Broker("prealloc", {"auto.create.topics.enable": "false"}) as b:
        check(create_topic(b.port, "many", PARTS) == 0, "CreateTopics failed")
        check(create_topic(b.port, "busy", 1) == 0, "CreateTopics failed")
        batch = lib.record_batch([(b"k", b"one small record", [])])
        check(produce_all(b.port, "many", range(PARTS), batch) == 0, "produce to the many partitions failed")
        alloc, extra = usage(b.datadir, "many", len(batch))
        log(f"{PARTS} partitions with one record each: {alloc / 1024:.0f} KiB allocated "
            f"({alloc / PARTS / 1024:.1f} KiB each), {extra / 1024:.0f} KiB past the data")
        check(alloc <= PARTS * 16 * 1024, f"{alloc} bytes allocated for {PARTS} one-record partitions")

        big = lib.record_batch([(b"k", os.urandom(256 * 1024), [])])
        peak_extra = 0
        with lib.Conn(b.port, timeout=60) as c:
            for i in range(48):
                r = c.produce("busy", 0, big)
                check(r and r[0] == 0, f"produce failed: {r}")
                peak_extra = max(peak_extra, usage(b.datadir, "busy", (i + 1) * len(big))[1])
        log(f"busy partition (12 MiB in 256 KiB batches): up to {peak_extra / 1048576:.1f} MiB preallocated "
            "ahead of its data")
        check(peak_extra >= 1 << 20, f"a busy partition got only {peak_extra} bytes ahead")

        deadline = time.monotonic() + 20
        while True:
            left = usage(b.datadir, "many", len(batch))[1] + usage(b.datadir, "busy", 48 * len(big))[1]
            if left <= BLOCK or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        log(f"after idling: {left} bytes still allocated past the data")
        # ext4 counts a large file's extent tree blocks in st_blocks: one block of slack
        check(left <= BLOCK, f"idle partitions kept {left} preallocated bytes")
        # the data is intact
        with lib.Conn(b.port) as c:
            err, hw, blob = c.fetch("many", PARTS - 1, 0)
            check(err == 0 and hw == 1 and len(list(lib.parse_batches(blob))) == 1, f"fetch: {err} {hw}")
            err, hw, _ = c.fetch("busy", 0, 0)
            check(err == 0 and hw == 48, f"busy fetch: {err} {hw}")


if __name__ == "__main__":
    lib.main(test)
