#!/usr/bin/env python3
"""Crash test: kill -9 the broker while a producer is writing with acks=all.

Starts a broker (3 partitions, 16 MiB segments so the log spans several segments),
runs `sluice-rdk-client produce` for 1,000,000 records (acks=all, idempotent
producer, 100-byte values) with --acked-log, and SIGKILLs the broker at a random
moment during production (when a random 5-60% of the records have been acked, plus
a random 0-200 ms). The producer must survive. After a random 0.2-1.5 s pause the
broker restarts on the same port and data directory; the producer finishes (or
gives up on what timed out) and then `verify-acked` reads every partition from the
start and checks that every acknowledged record is at its acked offset with the
right key and value, offsets are contiguous and no index appears twice. Finally the
broker is stopped cleanly (SIGTERM), started again, and verified once more.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = int(os.environ.get("SLUICE_KILL9_RECORDS", "1000000"))


def count_lines(path, state):
    """Counts newlines appended to path since the last call (state: [offset, count])."""
    try:
        with open(path, "rb") as f:
            f.seek(state[0])
            data = f.read()
    except FileNotFoundError:
        return state[1]
    state[0] += len(data)
    state[1] += data.count(b"\n")
    return state[1]


def verify(client, broker, acked_log, what):
    r = lib.run([client, "verify-acked", "--bootstrap", broker.bootstrap, "--topic", "kill9",
                 "--acked-log", acked_log, "--run-timeout", "150"], timeout=200)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stdout.write(r.stderr[-4000:])
    check(r.returncode == 0, f"verify-acked {what} exited {r.returncode}")


def test():
    client = lib.rdk_client_path()
    rnd = lib.rng()
    frac = rnd.uniform(0.05, 0.60)
    extra = rnd.uniform(0.0, 0.2)
    pause = rnd.uniform(0.2, 1.5)
    props = {"num.partitions": 3, "log.segment.bytes": 16 << 20}
    with lib.Broker("kill9", props) as broker:
        acked_log = os.path.join(broker.tmp, "acked.log")
        prod_out = open(os.path.join(broker.tmp, "producer.out"), "w+")
        cmd = [client, "produce", "--bootstrap", broker.bootstrap, "--topic", "kill9",
               "--count", str(N), "--acks", "all", "--size", "100", "--acked-log", acked_log,
               "--timeout-ms", "120000"]
        log(f"producing {N} records; kill -9 after {frac:.0%} acked + {extra * 1000:.0f} ms")
        t0 = time.monotonic()
        prod = subprocess.Popen(cmd, stdout=prod_out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            state = [0, 0]
            threshold = int(N * frac)
            deadline = time.monotonic() + 240
            while count_lines(acked_log, state) < threshold and prod.poll() is None:
                check(time.monotonic() < deadline, "producer made no progress for 240 s")
                time.sleep(0.01)
            if prod.poll() is not None and prod.returncode != 0:
                prod_out.seek(0)
                raise lib.TestFailure(f"producer exited {prod.returncode} before the kill: "
                                      f"{prod_out.read()[-3000:]}")
            time.sleep(extra)
            mid = prod.poll() is None
            at_kill = count_lines(acked_log, state)
            broker.kill9()
            log(f"killed at {time.monotonic() - t0:.2f}s with {at_kill} records acked"
                f"{'' if mid else ' (WARNING: the producer had already finished)'}")
            time.sleep(pause)
            if prod.poll() is not None:
                check(prod.returncode == 0, f"the producer died with the broker (exit {prod.returncode})")
            broker.restart()
            try:
                rc = prod.wait(timeout=300)
            except subprocess.TimeoutExpired:
                prod.kill()
                prod.wait()
                raise lib.TestFailure("producer did not finish within 300 s of the restart")
        finally:
            if prod.poll() is None:
                prod.kill()
                prod.wait()
        prod_out.seek(0)
        out = prod_out.read()
        prod_out.close()
        summary = [ln for ln in out.splitlines() if ln.startswith("produce:")]
        log(f"producer exited {rc} after {time.monotonic() - t0:.1f}s: "
            f"{summary[-1] if summary else out[-2000:]}")
        check(rc == 0, f"producer exited {rc}: {out[-3000:]}")
        acked = count_lines(acked_log, state)
        check(acked >= at_kill, "acked log shrank")
        check(acked > 0, "nothing was acked")

        verify(client, broker, acked_log, "after kill -9 and restart")
        log("clean stop (SIGTERM), start again, verify again")
        broker.stop()
        broker.start()
        verify(client, broker, acked_log, "after a clean restart")
        check(broker.alive(), "broker died")
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
