#!/usr/bin/env python3
"""An empty consumer group expires after offsets.retention.minutes, as in Kafka
(KIP-211): its committed offsets and metadata are deleted (tombstones in
__consumer_offsets), while a group that is still in use keeps its offsets.

Broker: offsets.retention.minutes=1, checked every second. Group `gone`
consumes 10 records with kcat -G and leaves (committing offset 10). About a
minute later OffsetFetch answers -1 for it, the broker log reports the
expiry, and after a restart the offsets stay gone (the tombstones are
durable). Takes about 75 s.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402


def test():
    kcat = lib.kcat_path()
    props = {"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 1000,
             "group.initial.rebalance.delay.ms": 0}
    with lib.Broker("gexpiry", props) as broker:
        r = subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "ex"],
                           input=b"".join(b"r%d\n" % i for i in range(10)), capture_output=True, timeout=60)
        check(r.returncode == 0, "produce failed")
        r = subprocess.run([kcat, "-b", broker.bootstrap, "-G", "gone", "ex", "-e", "-o", "beginning", "-q",
                            "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000"],
                           capture_output=True, timeout=60)
        nread = r.stdout.count(b"\n")
        check(r.returncode == 0 and nread == 10, f"group consumer read {nread} records")
        off = fetch_offset(broker, "gone")
        check(off == 10, f"committed offset {off}, want 10")
        log("group `gone` committed offset 10; waiting for it to expire (retention 1 minute)")
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline and fetch_offset(broker, "gone") != -1:
            time.sleep(2)
        check(fetch_offset(broker, "gone") == -1, "the empty group's offsets did not expire")
        with open(broker.logfile, errors="replace") as f:
            check("group gone expired" in f.read(), "broker log does not report the expiry")
        # and it stays gone across a restart (the tombstones are durable)
        broker.restart()
        check(fetch_offset(broker, "gone") == -1, "expired offsets came back after a restart")
        broker.stop()


def fetch_offset(broker, group):
    """OffsetFetch v1 for partition 0 of `ex` (raw request, lib's encoder)."""
    body = (lib.Enc().string(group).i32(1).string("ex").i32(1).i32(0).done())
    with lib.Conn(broker.port) as c:
        d = c.request(9, 1, body)
    n = d.i32()
    for _ in range(n):
        d.string()
        for _ in range(d.i32()):
            d.i32()
            off = d.i64()
            d.string()
            d.i16()
            return off
    return None


if __name__ == "__main__":
    lib.main(test)
