#!/usr/bin/env python3
"""kill -9 while compaction runs: a compacted topic loses no key's newest
acknowledged value and never serves a broken log.

Topic `cc` (1 partition, cleanup.policy=compact, segment.bytes=1 MiB,
delete.retention.ms=100) on a broker whose cleaner looks every 100 ms. Each
round: kcat produces 6,000 keyed records (200 keys, ~600-byte values) and exits
once all are acknowledged (acks=all); a second kcat then produces more while the
broker is killed with SIGKILL at a random moment, so kills land during group
commits, segment rolls and the cleaner's passes (reads, `.cleaned` files, the
swap). After the restart, a full read of the partition must show, for every key,
a value at least as new as the last acknowledged one, offsets strictly
increasing, every batch's CRC valid (kcat refuses others), and no `*.cleaned`
file left behind. Rounds: SLUICE_CRASH_ROUNDS (default 5); seed SLUICE_TEST_SEED.
Sluice-only where it looks at the partition directory.
"""
import glob
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "5"))
KEYS = 200
PER_ROUND = 6000
PAD = "p" * 560
TOPIC = "cc"


def create_topic(port):
    configs = {"cleanup.policy": "compact", "segment.bytes": 1048576, "delete.retention.ms": 100}
    e = lib.Enc().array_len(1).string(TOPIC).i32(1).i16(1).array_len(0)
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


def lines(start, n):
    # value: "<sequence>-<padding>"; the key cycles over KEYS
    return "".join(f"k{i % KEYS}:{i}-{PAD}\n" for i in range(start, start + n))


def produce(broker, start, n):
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-P", "-t", TOPIC, "-K:", "-p", "0",
                        "-X", "linger.ms=5", "-X", "acks=all"], input=lines(start, n).encode(),
                       capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat produce failed: {r.stderr[-800:]}")


def read_all(broker):
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-C", "-t", TOPIC, "-p", "0", "-o", "beginning",
                        "-e", "-q", "-f", "%o\t%k\t%s\\n"], capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat consume failed: {r.stderr.decode()[-800:]}")
    out = []
    for ln in r.stdout.decode(errors="replace").splitlines():
        off, key, val = (ln.split("\t", 2) + ["", ""])[:3]
        out.append((int(off), key, val))
    return out


def verify(broker, acked_upto, rnd_i):
    rows = read_all(broker)
    offs = [o for o, _, _ in rows]
    check(all(a < b for a, b in zip(offs, offs[1:])), f"round {rnd_i}: offsets not increasing")
    newest = {}
    for _, k, v in rows:
        if v:  # tombstones are not produced here; a value is "<seq>-<pad>"
            seq = int(v.split("-", 1)[0])
            check(v == f"{seq}-{PAD}", f"round {rnd_i}: value of {k} damaged: {v[:40]!r}")
            newest[k] = max(newest.get(k, -1), seq)
    last_acked = {}
    for i in range(acked_upto):
        last_acked[f"k{i % KEYS}"] = i
    lost = [k for k, i in last_acked.items() if newest.get(k, -1) < i]
    check(not lost, f"round {rnd_i}: {len(lost)} keys lost their newest acknowledged value, e.g. "
          f"{lost[:3]} (want >= {[last_acked[k] for k in lost[:3]]}, got {[newest.get(k) for k in lost[:3]]})")
    return len(rows)


def test():
    rnd = lib.rng()
    props = {"log.cleaner.backoff.ms": 100, "num.partitions": 1}
    with lib.Broker("compaction-crash", props) as broker:
        check(create_topic(broker.port) == 0, "CreateTopics cc failed")
        acked = 0
        for rnd_i in range(ROUNDS):
            produce(broker, acked, PER_ROUND)
            acked += PER_ROUND
            # more load while the cleaner works, then kill -9 at a random moment
            bg = subprocess.Popen([lib.kcat_path(), "-b", broker.bootstrap, "-P", "-t", TOPIC, "-K:", "-p", "0",
                                   "-X", "linger.ms=5"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            try:
                bg.stdin.write(lines(10_000_000 + rnd_i * 100_000, 20000).encode())
                bg.stdin.flush()
            except BrokenPipeError:
                pass
            time.sleep(rnd.uniform(0.05, 1.2))
            broker.kill9()
            bg.kill()
            bg.wait()
            broker.start()
            n = verify(broker, acked, rnd_i)
            left = glob.glob(os.path.join(broker.datadir, f"{TOPIC}-0", "*.cleaned"))
            check(not left, f"round {rnd_i}: left behind after restart: {left}")
            segs = len(glob.glob(os.path.join(broker.datadir, f"{TOPIC}-0", "*.log")))
            log(f"round {rnd_i}: killed, restarted: {n} records readable in {segs} segment(s), "
                f"every key's newest acknowledged value present")
        with open(broker.logfile, errors="replace") as f:
            blog = f.read()
        passes = blog.count("compaction removed")
        log(f"compaction passes that removed data: {passes}")
        check(passes > 0, "the cleaner never removed anything: the test did not exercise compaction")
        check("corrupt batch" not in blog, "the broker reported a corrupt batch")
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
