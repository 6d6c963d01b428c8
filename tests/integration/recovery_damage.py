#!/usr/bin/env python3
"""Damage between runs of the real broker never costs intact data: recovery keeps
what it cannot prove is garbage, and a partition whose files contradict each other
goes offline alone.

Topic "dmg" (one partition, 1 MiB segments) holds 45,000 records, topic "other"
100; both live in the same log directory. After a clean stop:
  1. a closed segment of "dmg" is cut in the middle of a batch. After the restart
     kcat reads every record before the cut, a Fetch at the first lost offset
     answers CORRUPT_MESSAGE (2), kcat reads every later segment from its base,
     every segment file is still there, and the next record produced gets offset
     45,000 (no offset reused). Before the fix recovery truncated the segment,
     deleted every later one and handed their offsets out again.
  2. a stray segment file, a copy of a later segment named 00000000000000000007.log,
     is added. After the restart "dmg" answers KAFKA_STORAGE_ERROR (56) and the log
     names the stray file; nothing in its directory changes; "other", in the same
     log directory, is read and written as usual. Before the fix recovery deleted
     five segments and set the high watermark to 7.
Sluice-only: it depends on Sluice's recovery rules.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = 45000
TOPIC = "dmg"


def produce(broker, topic, first, n):
    lines = "".join(f"k{i}:value-{i:06d}-{'x' * 100}\n" for i in range(first, first + n))
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-p", "0",
                        "-X", "linger.ms=20", "-X", "batch.num.messages=100"], input=lines.encode(), capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat produce to {topic} failed: {r.stderr[-2000:]}")


def consume(broker, topic, start, timeout=20):
    """Records from offset start on; a consumer stuck at a batch the broker refuses
    never reaches the end: after timeout what it got is kept."""
    p = subprocess.Popen([lib.kcat_path(), "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o",
                          str(start), "-e", "-q", "-f", "%o %k\\n", "-X", "check.crcs=true"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return [ln.split(" ") for ln in out.decode(errors="replace").splitlines()]


def check_run(lines, first, what):
    for i, (off, key) in enumerate(lines):
        check(int(off) == first + i and key == f"k{first + i}", f"{what}: offset {off} key {key} at {first + i}")


def listing(part):
    return sorted((f, os.path.getsize(os.path.join(part, f))) for f in os.listdir(part))


def test():
    lib.kcat_path()
    with lib.Broker("recovery-damage", {"log.segment.bytes": 1 << 20}) as broker:
        produce(broker, TOPIC, 0, N)
        produce(broker, "other", 0, 100)
        broker.stop()
        part = os.path.join(broker.datadir, f"{TOPIC}-0")
        segs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
        check(len(segs) >= 5, f"expected several segments, got {segs}")
        bases = [int(s[:20]) for s in segs]
        pristine = os.path.join(broker.tmp, "pristine")
        shutil.copytree(part, pristine)

        # 1. a closed segment cut mid-batch after a clean stop
        seg = os.path.join(part, segs[1])
        size = os.path.getsize(seg)
        os.truncate(seg, size // 2)
        log(f"cut {segs[1]} from {size} to {size // 2} bytes")
        before = listing(part)
        broker.start()
        lines = consume(broker, TOPIC, 0, timeout=15)
        check_run(lines, 0, "before the cut")
        lost = len(lines)
        check(bases[1] < lost < bases[2], f"served {lost} records from 0: not up to the cut in {segs[1]}")
        with lib.Conn(broker.port) as c:
            err, hw, _ = c.fetch(TOPIC, 0, lost)
            check(err == 2, f"fetch at the cut (offset {lost}) answered {err}, want CORRUPT_MESSAGE (2)")
            check(hw == N, f"high watermark {hw}, want {N}")
        later = consume(broker, TOPIC, bases[2])
        check_run(later, bases[2], "later segments")
        check(len(later) == N - bases[2], f"later segments: {len(later)} of {N - bases[2]} records")
        after = listing(part)
        check([f for f, _ in after if f.endswith(".log")] == [f for f, _ in before if f.endswith(".log")],
              f"segment files changed: {before} -> {after}")
        check(dict(after)[segs[1]] == size // 2, "the cut segment was changed")
        produce(broker, TOPIC, N, 1)
        tail = consume(broker, TOPIC, N)
        check(tail == [[str(N), f"k{N}"]], f"the next record got {tail}, want offset {N}")
        with open(broker.logfile, errors="replace") as f:
            check("is damaged at byte" in f.read(), "the log does not report the damaged segment")
        log(f"cut segment: {lost} records before it served, fetch there CORRUPT_MESSAGE, "
            f"{len(later)} later records served, next offset {N}")
        broker.stop()

        # 2. a stray segment file with a lower base offset
        shutil.rmtree(part)
        shutil.copytree(pristine, part)
        stray = os.path.join(part, "00000000000000000007.log")
        shutil.copyfile(os.path.join(part, segs[3]), stray)
        before = listing(part)
        broker.start()
        with lib.Conn(broker.port) as c:
            err, _, _ = c.fetch(TOPIC, 0, 0)
            check(err == 56, f"fetch from the partition with a stray segment answered {err}, want 56")
        other = consume(broker, "other", 0)
        check(len(other) == 100, f"the other topic in the same directory served {len(other)} of 100")
        produce(broker, "other", 100, 1)
        check(len(consume(broker, "other", 100)) == 1, "the other topic does not take writes")
        check(listing(part) == before, f"the offline partition's files changed: {before} -> {listing(part)}")
        with open(broker.logfile, errors="replace") as f:
            blog = f.read()
        check("00000000000000000007.log" in blog and "is offline until a restart" in blog,
              "the log does not name the stray file")
        check(broker.alive(), "broker died")
        log("stray segment: partition offline (56), its files untouched, the other topic serves")
        broker.stop()


if __name__ == "__main__":
    if lib.TARGET != "sluice":
        lib.skip("checks Sluice's own recovery")
    lib.main(test)
