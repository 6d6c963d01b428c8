#!/usr/bin/env python3
"""A full disk under a running broker (a 16 MiB tmpfs as its only log directory):

  - produce until the disk is full: the broker answers KAFKA_STORAGE_ERROR, never
    crashes, and every record it acknowledged before is still served;
  - an offset commit whose __consumer_offsets record cannot be written is refused
    (NOT_COORDINATOR, as Kafka answers a storage error, or another error), and the
    group's committed offset stays the last one that was written: a commit is never
    acknowledged, or shown by OffsetFetch, before it is on disk.

Needs root to mount the tmpfs (skipped otherwise). Raw protocol requests, so every
error code is seen as the broker sent it.
"""
import os
import subprocess

import lib
from lib import Enc, check, log

GROUP = "disk-full-group"


def offset_commit(c, topic, partition, offset):
    """OffsetCommit v2 as a standalone consumer; returns the partition's error code."""
    e = Enc().string(GROUP).i32(-1).string("").i64(-1)
    e.array_len(1).string(topic).array_len(1).i32(partition).i64(offset).string("")
    d = c.request(8, 2, e.done())
    err = None
    for _ in range(d.array_len()):
        d.string()
        for _ in range(d.array_len()):
            d.i32()
            err = d.i16()
    return err


def offset_fetch(c, topic, partition):
    """OffsetFetch v1: (offset, error)."""
    e = Enc().string(GROUP).array_len(1).string(topic).array_len(1).i32(partition)
    d = c.request(9, 1, e.done())
    res = (None, None)
    for _ in range(d.array_len()):
        d.string()
        for _ in range(d.array_len()):
            d.i32()
            off = d.i64()
            d.string()
            res = (off, d.i16())
    return res


def test():
    if os.geteuid() != 0:
        lib.skip("needs root to mount a tmpfs")
    broker = lib.Broker("disk-full", {"offsets.topic.num.partitions": 1})
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", broker.datadir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        broker.cleanup()
        lib.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    failed = True
    try:
        broker.start()
        run(broker)
        failed = False
    finally:
        if failed:
            broker._dump_log()
        broker.stop(quiet=True)
        subprocess.run(["umount", "-l", broker.datadir], capture_output=True)
        broker.cleanup(failed=False)


def run(broker):
    with lib.Conn(broker.port, timeout=30) as c:
        c.ensure_topic("keep")
        acked = []
        for i in range(10):
            err, base, _ = c.produce("keep", 0, lib.record_batch([(b"k%d" % i, b"v%d" % i, [])]))
            check(err == 0, f"produce to keep: error {err}")
            acked.append(base)
        check(offset_commit(c, "keep", 0, 5) == 0, "first offset commit refused")
        check(offset_fetch(c, "keep", 0) == (5, 0), f"committed offset: {offset_fetch(c, 'keep', 0)}")
        # fill the disk
        c.ensure_topic("fill")
        big = os.urandom(900 << 10)
        errors = []
        for i in range(40):
            err, _, _ = c.produce("fill", 0, lib.record_batch([(None, big, [])]))
            if err:
                errors.append(err)
                if len(errors) >= 2:
                    break
        log(f"fill: errors {errors} after {i + 1} produce requests")
        check(errors and all(e == 56 for e in errors), f"a full disk must answer KAFKA_STORAGE_ERROR, got {errors}")
        check(broker.alive(), "broker died on a full disk")
        err = offset_commit(c, "keep", 0, 7)
        log(f"offset commit on a full disk: error {err}")
        check(err != 0, "an offset commit that could not be written was acknowledged")
        off, ferr = offset_fetch(c, "keep", 0)
        check(ferr != 0 or off == 5, f"OffsetFetch shows {off} (error {ferr}): an unwritten commit became visible")
        # what was acknowledged before is still served
        err, hw, blob = c.fetch("keep", 0, 0)
        got = len(lib.parse_batches(blob)) if err == 0 else 0
        check(err in (0, 56), f"fetch after the disk filled: error {err}")
        if err == 0:
            check(got == 10, f"{got} of the 10 acknowledged records served")
        check(broker.alive(), "broker died")
    log(f"broker log tail:\n{broker.log_tail(8)}")


if __name__ == "__main__":
    lib.main(test)
