#!/usr/bin/env python3
"""Fault injection on segment files, then restart: the broker starts, serves every
batch before the damage, reports what it dropped, and never serves corrupt data.

One partition with 1 MiB segments holds 30,000 records (keys carry the index, so
every value can be checked). For each kind of damage, on a fresh copy of the data:
  torn tail     - the active segment cut in the middle of its last batch (kill -9;
                  the data was synced by the template's clean stop, so recovery
                  keeps the cut file as damaged and continues at the old end)
  zeroed tail   - 8 KiB of zeros appended to the active segment (kill -9)
  flipped byte  - one byte flipped in the middle of a closed segment, then
                  (a) kill -9: the segment lies below the recovery point, so
                      recovery trusts it too and the read path refuses the batch
                      (nothing is truncated or dropped: recovery_damage.py);
                  (b) clean stop: recovery trusts the closed segment, so the CRC
                      check on the read path must refuse the damaged batch
  deleted index - a closed segment's .index removed: rebuilt, every offset served
  truncated index - a closed segment's .index cut to 5 bytes: rebuilt likewise
After each restart the test reads the partition from the start with kcat and
checks: offsets contiguous from 0, every value matches its offset, nothing after
the damage point is served in the flipped-byte cases, and the broker log says what
it dropped. Sluice-only: it depends on Sluice's recovery rules.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = 30000
TOPIC = "faults"


def produce(broker):
    lines = "".join(f"k{i}:value-{i:06d}-{'x' * 100}\n" for i in range(N))
    r = subprocess.run([lib.kcat_path(), "-b", broker.bootstrap, "-P", "-t", TOPIC, "-K:", "-p", "0",
                        "-X", "linger.ms=20"], input=lines.encode(), capture_output=True, timeout=120)
    check(r.returncode == 0, f"kcat produce failed: {r.stderr[-2000:]}")


def consume(broker, timeout=30):
    """Reads the partition from the start. A consumer stuck at a batch the broker
    refuses to serve never reaches the end: after timeout what it got is kept."""
    p = subprocess.Popen([lib.kcat_path(), "-b", broker.bootstrap, "-C", "-t", TOPIC, "-p", "0", "-o",
                          "beginning", "-e", "-q", "-f", "%o %k %s\\n", "-X", "check.crcs=true"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode, out.decode(errors="replace").splitlines(), err.decode(errors="replace")


def check_prefix(lines, what):
    """Offsets contiguous from 0 and every value right; returns how many."""
    for i, ln in enumerate(lines):
        off, key, val = ln.split(" ", 2)
        check(int(off) == i, f"{what}: offset {off} at position {i}")
        check(key == f"k{i}" and val == f"value-{i:06d}-{'x' * 100}", f"{what}: wrong record at offset {i}")
    return len(lines)


def segments(part_dir):
    return sorted(f for f in os.listdir(part_dir) if f.endswith(".log"))


def run_case(template, name, damage, clean_stop, expect_all, expect_log=None):
    with lib.Broker(f"fault-{name}", {"log.segment.bytes": 1 << 20}) as broker:
        broker.stop()
        shutil.rmtree(broker.datadir)
        shutil.copytree(template, broker.datadir)
        # Start once on the copy so the stop mode (clean or kill -9) is the one we want.
        broker.start()
        if clean_stop:
            broker.stop()
        else:
            broker.kill9()
        part = os.path.join(broker.datadir, f"{TOPIC}-0")
        detail = damage(part)
        log(f"{name}: {detail}")
        broker.start()
        rc, lines, err = consume(broker, timeout=60 if expect_all else 15)
        n = check_prefix(lines, name)
        with open(broker.logfile, errors="replace") as f:
            blog = f.read()
        if expect_all:
            check(n == N, f"{name}: {n} of {N} records served")
        else:
            check(n < N, f"{name}: damaged records were served ({n} of {N})")
            check(n > 0, f"{name}: nothing before the damage was served")
        if expect_log:
            check(re.search(expect_log, blog), f"{name}: broker log does not report the damage ({expect_log})")
        check(broker.alive(), f"{name}: broker died")
        log(f"{name}: {n} records served intact")
        broker.stop()


def test():
    lib.kcat_path()
    # Build the template log once.
    with lib.Broker("fault-template", {"log.segment.bytes": 1 << 20}) as broker:
        produce(broker)
        rc, lines, _ = consume(broker)
        check(check_prefix(lines, "template") == N, "template not complete")
        broker.stop()
        template = os.path.join(broker.tmp, "template")
        shutil.copytree(broker.datadir, template)
        segs = segments(os.path.join(template, f"{TOPIC}-0"))
        check(len(segs) >= 3, f"expected several segments, got {segs}")

        def torn(part):
            last = os.path.join(part, segments(part)[-1])
            size = os.path.getsize(last)
            os.truncate(last, size - 50)
            return f"cut {os.path.basename(last)} from {size} to {size - 50} bytes"

        def zero_tail(part):
            last = os.path.join(part, segments(part)[-1])
            with open(last, "ab") as f:
                f.write(b"\0" * 8192)
            return f"appended 8 KiB of zeros to {os.path.basename(last)}"

        def flip(part):
            seg = os.path.join(part, segments(part)[1])
            size = os.path.getsize(seg)
            with open(seg, "r+b") as f:
                f.seek(size // 2)
                b = f.read(1)
                f.seek(size // 2)
                f.write(bytes([b[0] ^ 0x5A]))
            return f"flipped the byte at {size // 2} of {os.path.basename(seg)}"

        def del_index(part):
            idx = os.path.join(part, segments(part)[0].replace(".log", ".index"))
            os.unlink(idx)
            return f"deleted {os.path.basename(idx)}"

        def trunc_index(part):
            idx = os.path.join(part, segments(part)[1].replace(".log", ".index"))
            os.truncate(idx, 5)
            return f"truncated {os.path.basename(idx)} to 5 bytes"

        run_case(template, "torn-tail", torn, False, False, r"is damaged at byte")
        run_case(template, "zeroed-tail", zero_tail, False, True, r"truncated from")
        run_case(template, "flipped-unclean", flip, False, False, r"corrupt batch")
        run_case(template, "flipped-clean", flip, True, False, r"corrupt batch")
        run_case(template, "deleted-index", del_index, True, True)
        run_case(template, "truncated-index", trunc_index, True, True)


if __name__ == "__main__":
    if lib.TARGET != "sluice":
        lib.skip("fault injection checks Sluice's own recovery")
    lib.main(test)
