#!/usr/bin/env python3
"""Retention and compaction as a real client sees them, and Kafka's own
DumpLogSegments reading Sluice's segments.

Broker: retention checked every 500 ms, cleaner every 500 ms.
1. Time retention: topic `ret` (retention.ms=3000, segment.bytes=1 MiB) gets
   30,000 records with kcat; within seconds of the retention time the old
   segments vanish from the partition directory and the earliest offset (Kafka's
   GetOffsetShell --time -2, i.e. ListOffsets) moves up to the end of the log.
2. Size retention: topic `retb` (retention.bytes=2 MiB) keeps at most about
   retention.bytes plus one segment, and its earliest offset moves above 0.
3. DeleteRecords via Kafka's kafka-delete-records tool moves the earliest offset.
4. Compaction: topic `cmp` (cleanup.policy=compact, delete.retention.ms=1000)
   gets 100 keys x 300 versions; after the cleaner runs, kcat reads at most the
   active segment's records plus one record per key from the closed segments,
   and for every key the last value read is the newest one produced. A
   tombstone for one key, once past delete.retention.ms and in a closed segment,
   is gone with every older value of that key.
5. Kafka's DumpLogSegments (kafka.tools.DumpLogSegments, kafka_2.13 4.1.1) reads
   every closed segment of a partition with --deep-iteration and finds every
   batch valid, and --verify-index-only reports no index mismatch.
Sluice-only where it reads the partition directories; the client-visible
checks match Kafka's behaviour.
"""
import glob
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402


def produce(broker, topic, lines, extra=()):
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-p", "0",
                        "-X", "linger.ms=20", *extra], input=lines.encode(), capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat produce to {topic} failed: {r.stderr[-1000:]}")


def consume(broker, topic):
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                        "-e", "-q", "-f", "%o\t%k\t%S\t%s\\n"], capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat consume {topic} failed: {r.stderr.decode()[-1000:]}")
    out = []
    for ln in r.stdout.decode(errors="replace").splitlines():
        off, key, size, val = (ln.split("\t", 3) + ["", "", ""])[:4]
        out.append((int(off), key, int(size), val))
    return out


def offset(java, broker, topic, t):
    r = java.run("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", broker.bootstrap,
                 "--topic", topic, "--time", str(t), timeout=120)
    check(r.returncode == 0, f"GetOffsetShell failed: {r.stderr[-800:]}")
    for ln in r.stdout.splitlines():
        if ln.startswith(f"{topic}:0:"):
            return int(ln.split(":")[2])
    raise lib.TestFailure(f"GetOffsetShell printed no offset for {topic}: {r.stdout}")


def create(java, broker, topic, *configs):
    args = ["--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions", "1"]
    for c in configs:
        args += ["--config", c]
    r = java.run("org.apache.kafka.tools.TopicCommand", *args, timeout=120)
    check(r.returncode == 0, f"create {topic} failed: {r.stdout}{r.stderr[-800:]}")


def segs(broker, topic):
    return sorted(glob.glob(os.path.join(broker.datadir, f"{topic}-0", "*.log")))


def wait_for(what, cond, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise lib.TestFailure(f"timed out waiting for {what}")


def test():
    lib.kcat_path()
    java = clients.Java()
    pad = "x" * 100
    props = {"log.retention.check.interval.ms": 500, "log.cleaner.backoff.ms": 500}
    with lib.Broker("retention", props) as broker:
        # 1. time retention
        create(java, broker, "ret", "retention.ms=3000", "segment.bytes=1048576")
        produce(broker, "ret", "".join(f"k{i}:v{i}-{pad}\n" for i in range(30000)))
        check(len(segs(broker, "ret")) >= 3, f"expected several segments, got {segs(broker, 'ret')}")
        check(offset(java, broker, "ret", -2) == 0, "earliest offset should start at 0")
        wait_for("time retention to delete the old segments", lambda: len(segs(broker, "ret")) == 1, 30)
        early, late = offset(java, broker, "ret", -2), offset(java, broker, "ret", -1)
        log(f"time retention: earliest {early}, latest {late}, segments {len(segs(broker, 'ret'))}")
        check(early == late == 30000, f"earliest {early} latest {late}, want 30000/30000")

        # 2. size retention
        create(java, broker, "retb", "retention.bytes=2097152", "segment.bytes=1048576")
        produce(broker, "retb", "".join(f"k{i}:v{i}-{pad}\n" for i in range(60000)))
        wait_for("size retention", lambda: offset(java, broker, "retb", -2) > 0, 30)
        total = sum(os.path.getsize(p) for p in segs(broker, "retb"))
        log(f"size retention: earliest {offset(java, broker, 'retb', -2)}, {total} bytes on disk")
        check(total <= 2097152 + 1048576 + 65536, f"{total} bytes kept, retention.bytes is 2 MiB")
        rest = consume(broker, "retb")
        check(rest and rest[-1][0] == 59999, "the newest records must remain")

        # 3. DeleteRecords
        create(java, broker, "delrec")
        produce(broker, "delrec", "".join(f"k{i}:v{i}\n" for i in range(1000)))
        spec = os.path.join(broker.tmp, "delete.json")
        with open(spec, "w") as f:
            f.write('{"partitions":[{"topic":"delrec","partition":0,"offset":600}],"version":1}')
        r = java.run("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", broker.bootstrap,
                     "--offset-json-file", spec, timeout=120)
        check(r.returncode == 0 and "low_watermark: 600" in r.stdout, f"delete-records: {r.stdout}{r.stderr[-500:]}")
        got = consume(broker, "delrec")
        check(got and got[0][0] == 600 and len(got) == 400, f"after DeleteRecords read {len(got)} from {got[:1]}")

        # 4. compaction
        create(java, broker, "cmp", "cleanup.policy=compact", "segment.bytes=1048576", "delete.retention.ms=1000")
        lines = []
        for v in range(300):
            for k in range(100):
                lines.append(f"key{k:03d}:value-{v:03d}-{pad}\n")
        produce(broker, "cmp", "".join(lines))
        produce(broker, "cmp", "key007:\n", extra=("-Z",))  # tombstone for key007
        # more data so the tombstone's segment closes
        produce(broker, "cmp", "".join(f"filler{i % 10}:f-{i}-{pad}\n" for i in range(12000)))
        nseg = len(segs(broker, "cmp"))
        check(nseg >= 3, f"compaction test needs closed segments, got {nseg}")
        time.sleep(2.5)  # > delete.retention.ms, cleaner every 500 ms

        def compacted():
            return len(consume(broker, "cmp")) < 30000
        wait_for("the cleaner to compact `cmp`", compacted, 30)
        time.sleep(1.5)
        recs = consume(broker, "cmp")
        last = {}
        for off, key, size, val in recs:
            last[key] = (off, size, val)
        for k in range(100):
            key = f"key{k:03d}"
            if k == 7:
                check(key not in last or last[key][1] == -1,
                      f"{key}: an old value survived its tombstone: {last.get(key)}")
                continue
            check(key in last and last[key][2] == f"value-299-{pad}", f"{key}: newest value missing: {last.get(key)}")
        offs = [r[0] for r in recs]
        check(offs == sorted(offs) and len(set(offs)) == len(offs), "offsets not increasing after compaction")
        log(f"compaction: {len(recs)} records read back of {30000 + 1 + 12000} produced")

        # 5. Kafka's DumpLogSegments on closed segments
        broker.stop()
        for topic in ("cmp", "retb"):
            files = segs(broker, topic)[:-1] or segs(broker, topic)
            r = java.run("kafka.tools.DumpLogSegments", "--files", ",".join(files), "--deep-iteration",
                         timeout=300, heap="-Xmx1g")
            valid = r.stdout.count("isvalid: true")
            invalid = r.stdout.count("isvalid: false")
            check(r.returncode == 0 and valid > 0 and invalid == 0,
                  f"DumpLogSegments {topic}: {valid} valid, {invalid} invalid batches; {r.stderr[-500:]}")
            idx = [f[:-4] + ".index" for f in files] + [f[:-4] + ".timeindex" for f in files]
            r = java.run("kafka.tools.DumpLogSegments", "--files", ",".join(idx), "--verify-index-only",
                         timeout=300)
            bad = [ln for ln in r.stdout.splitlines() if "Mismatch" in ln or "found log offset" in ln]
            check(r.returncode == 0 and not bad, f"DumpLogSegments --verify-index-only {topic}: {bad[:5]}")
            log(f"DumpLogSegments {topic}: {valid} batches valid, indexes consistent")


if __name__ == "__main__":
    if lib.TARGET != "sluice":
        lib.skip("reads Sluice's partition directories")
    lib.main(test)
