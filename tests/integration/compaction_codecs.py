#!/usr/bin/env python3
"""Compaction keeps each batch's compression codec, as Kafka's cleaner does.
For each of gzip, snappy, lz4 and zstd, kcat produces to a compacted topic
(1 MiB segments) 60 versions of 40 keys, 2 KB values that compress to about
half, compressed with that codec; once the cleaner has run (every 200 ms
here), this proves:

- every batch in the partition's segment files still carries the codec
  (read from the files: the cleaner used to rewrite them uncompressed, a few
  KB of such batches growing to gigabytes);
- the segment files take no more space than before the pass;
- kcat (librdkafka, CRC checks on) reads every key's newest value back.
"""
import glob
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KEYS = 40
ROUNDS = 60


def create_topic(port, name):
    # min.compaction.lag.ms: the batches are counted as produced before the first pass
    configs = {"cleanup.policy": "compact", "segment.bytes": 1048576, "min.cleanable.dirty.ratio": "0.01",
               "min.compaction.lag.ms": 4000}
    e = lib.Enc().array_len(1).string(name).i32(1).i16(1).array_len(0)
    e.array_len(len(configs))
    for k, v in configs.items():
        e.string(k).string(str(v))
    e.i32(30000).i8(0)
    with lib.Conn(port, timeout=40) as c:
        d = c.request(19, 4, e.done())
        d.i32()
        d.array_len()
        d.string()
        return d.i16()


def log_files(datadir, topic):
    return sorted(glob.glob(os.path.join(datadir, f"{topic}-0", "*.log")))


def batches(datadir, topic):
    """Every batch of the partition's segments. The cleaner may replace or remove a
    segment between the listing and its read: the whole read then starts over."""
    for _ in range(50):
        out = []
        try:
            for f in log_files(datadir, topic):
                with open(f, "rb") as fh:
                    for x in lib.parse_batches(fh.read()):
                        if x["length"] < 49:
                            break  # zeros preallocated past the data of the active segment
                        out.append(x)
            return out
        except FileNotFoundError:
            time.sleep(0.1)
    raise RuntimeError(f"{topic}: the segments kept changing under 50 reads")


def batch_bytes(got):
    return sum(12 + x["length"] for x in got)


def test():
    if lib.TARGET != "sluice":
        lib.skip("reads Sluice's segment files")
    kcat = lib.kcat_path()
    with lib.Broker("compaction-codecs", {"log.cleaner.backoff.ms": 200}) as b:
        for name, codec in CODECS.items():
            topic = f"c-{name}"
            check(create_topic(b.port, topic) == 0, f"CreateTopics {topic} failed")
            rnd = random.Random(codec)
            values = [f"{i}-" + "".join(rnd.choice("abcdefghijklmnop") for _ in range(2000))
                      for i in range(KEYS * ROUNDS)]
            lines = "".join(f"k{i % KEYS}:{v}\n" for i, v in enumerate(values))
            r = subprocess.run([kcat, "-b", b.bootstrap, "-P", "-t", topic, "-K:", "-p", "0", "-z", name,
                                "-X", "linger.ms=5", "-X", "batch.num.messages=50"],
                               input=lines.encode(), capture_output=True, timeout=120)
            check(r.returncode == 0, f"kcat produce ({name}) failed: {r.stderr[-800:]}")
            before_batches = batches(b.datadir, topic)
            check(before_batches and all(x["codec"] == codec for x in before_batches),
                  f"{name}: produced batches are not all {name}")
            before = batch_bytes(before_batches)
            # the active segment stays; wait until the closed ones are compacted
            deadline = time.monotonic() + 60
            while True:
                n = len(log_files(b.datadir, topic))
                got = batches(b.datadir, topic)
                records = sum(x["count"] for x in got)
                if records < KEYS * ROUNDS // 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            after = batch_bytes(got)
            codecs = {x["codec"] for x in got}
            log(f"{name}: {len(before_batches)} batches, {before} bytes before; after compaction "
                f"{len(got)} batches, {records} records, {after} bytes in {n} segment(s), codecs {codecs}")
            check(records < KEYS * ROUNDS // 2, f"{name}: no compaction happened")
            check(codecs == {codec}, f"{name}: batches with codecs {codecs} after compaction")
            check(all(x["crc_ok"] for x in got), f"{name}: a batch fails its CRC")
            check(after <= before, f"{name}: {after} bytes of batches after compaction, {before} before")
            r = subprocess.run([kcat, "-b", b.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                                "-q", "-X", "check.crcs=true", "-f", "%k\t%s\\n"], capture_output=True, timeout=120)
            check(r.returncode == 0, f"kcat consume ({name}) failed: {r.stderr[-800:]}")
            newest = {}
            for ln in r.stdout.decode().splitlines():
                k, v = ln.split("\t", 1)
                newest[k] = v
            want = {f"k{k}": values[KEYS * (ROUNDS - 1) + k] for k in range(KEYS)}
            check(newest == want, f"{name}: newest values differ: "
                  f"{[(k, newest.get(k, '')[:12]) for k in want if newest.get(k) != want[k]][:5]}")


if __name__ == "__main__":
    lib.main(test)
