#!/usr/bin/env python3
"""kill -9 in a loop during sustained acks=all produce with fdatasync per group
commit (log.flush.interval.messages=1): no acknowledged record is lost.

Each round produces up to 200,000 records to its own topic (3 partitions) with
sluice-rdk-client (acks=all, idempotent, --acked-log), SIGKILLs the broker at a
random moment, restarts it on the same data directory, lets the producer finish,
then the next round starts. At the end every round's acknowledged records are
verified: present at their acked offsets, byte for byte, offsets contiguous.
Rounds: SLUICE_CRASH_ROUNDS (default 4); the seed: SLUICE_TEST_SEED.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

ROUNDS = int(os.environ.get("SLUICE_CRASH_ROUNDS", "4"))
N = int(os.environ.get("SLUICE_CRASH_RECORDS", "200000"))


def lines_in(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test():
    client = lib.rdk_client_path()
    rnd = lib.rng()
    props = {"num.partitions": 3, "log.flush.interval.messages": 1, "log.segment.bytes": 4 << 20}
    with lib.Broker("crashloop", props) as broker:
        logs = []
        for rnd_i in range(ROUNDS):
            topic = f"crash{rnd_i}"
            acked = os.path.join(broker.tmp, f"acked{rnd_i}.log")
            logs.append((topic, acked))
            out = open(os.path.join(broker.tmp, f"producer{rnd_i}.out"), "w+")
            prod = subprocess.Popen([client, "produce", "--bootstrap", broker.bootstrap, "--topic", topic,
                                     "--count", str(N), "--acks", "all", "--size", "100", "--acked-log", acked,
                                     "--timeout-ms", "120000"], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            target = int(N * rnd.uniform(0.1, 0.8))
            deadline = time.monotonic() + 180
            while lines_in(acked) < target and prod.poll() is None:
                check(time.monotonic() < deadline, f"round {rnd_i}: producer stalled")
                time.sleep(0.01)
            time.sleep(rnd.uniform(0, 0.1))
            at = lines_in(acked)
            broker.kill9()
            log(f"round {rnd_i}: killed with {at} records acked")
            time.sleep(rnd.uniform(0.1, 0.8))
            broker.restart()
            try:
                rc = prod.wait(timeout=300)
            except subprocess.TimeoutExpired:
                prod.kill()
                prod.wait()
                raise lib.TestFailure(f"round {rnd_i}: producer did not finish")
            out.seek(0)
            text = out.read()
            out.close()
            check(rc == 0, f"round {rnd_i}: producer exited {rc}: {text[-2000:]}")
        for topic, acked in logs:
            r = lib.run([client, "verify-acked", "--bootstrap", broker.bootstrap, "--topic", topic,
                         "--acked-log", acked, "--run-timeout", "150"], timeout=200)
            sys.stdout.write(r.stdout)
            check(r.returncode == 0, f"verify-acked {topic} failed: {r.stderr[-2000:]}")
        broker.stop()


if __name__ == "__main__":
    if lib.TARGET != "sluice":
        lib.skip("log.flush.interval.messages semantics are Sluice's here")
    lib.main(test)
