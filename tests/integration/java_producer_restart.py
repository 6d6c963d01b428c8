#!/usr/bin/env python3
"""Apache Kafka Java producer (kafka-clients 4.1, default settings: acks=all,
enable.idempotence=true, retries until delivery.timeout.ms) sends 1,000,000 keyed
records (keys k-000000000.. carry the sequence number) to a 3-partition topic while
the broker is restarted once: SIGTERM, wait for it to exit, start it again on the same
port and data directory. The restart happens at a random moment between 20% and 60%
of the acknowledged records, while the producer is still sending.

Then a Java consumer (assign + seekToBeginning on every partition, no group) reads
everything back up to the end offsets: every sequence number exactly once (none lost,
none duplicated), in production order within a partition, values intact, and the
end offsets add up to exactly 1,000,000 (a retried batch was not appended twice).

SLUICE_JAVA_RECORDS overrides the record count.
"""
import os
import queue
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = int(os.environ.get("SLUICE_JAVA_RECORDS", "1000000"))
VALUE_SIZE = 100
TOPIC = "java-restart"
PRODUCE_TIMEOUT = 360


def reader(stream, q):
    for line in iter(stream.readline, ""):
        q.put(line.rstrip("\n"))
    q.put(None)


def test():
    java = clients.Java()
    classes = java.test_client()
    rnd = lib.rng()
    restart_at = int(N * rnd.uniform(0.2, 0.6))
    log(f"Java client kafka-clients {java.version}; {N} records, broker restart after {restart_at} acks")

    def client(*args, timeout=300):
        return java.run("SluiceJavaClient", *args, classpath=[classes], timeout=timeout, heap="-Xmx768m")

    with lib.Broker("java-restart") as broker:
        r = client("create-topic", broker.bootstrap, TOPIC, 3)
        check(r.returncode == 0 and f"created {TOPIC} partitions 3" in r.stdout,
              f"create-topic: {r.stdout}{r.stderr[-2000:]}")

        errlog = open(os.path.join(broker.tmp, "producer.stderr"), "w")
        prod = subprocess.Popen(java.cmd("SluiceJavaClient", "produce", broker.bootstrap, TOPIC, N, VALUE_SIZE,
                                         classpath=[classes], heap="-Xmx768m"),
                                stdout=subprocess.PIPE, stderr=errlog, text=True, start_new_session=True)
        q = queue.Queue()
        threading.Thread(target=reader, args=(prod.stdout, q), daemon=True).start()
        t0 = time.monotonic()
        deadline = t0 + PRODUCE_TIMEOUT
        restarted = False
        acked_at_stop = None
        lines = []
        try:
            while True:
                try:
                    line = q.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    raise lib.TestFailure(f"producer still running after {PRODUCE_TIMEOUT}s; "
                                          f"last output {lines[-3:]}")
                if line is None:
                    break
                lines.append(line)
                if line.startswith("progress ") and not restarted and int(line.split()[1]) >= restart_at:
                    acked_at_stop = int(line.split()[1])
                    check(prod.poll() is None, "producer finished before the restart")
                    log(f"{acked_at_stop} acked: SIGTERM the broker")
                    ts = time.monotonic()
                    broker.stop()
                    log(f"broker stopped in {time.monotonic() - ts:.1f}s; starting it again")
                    broker.start()
                    log(f"broker back after {time.monotonic() - ts:.1f}s")
                    restarted = True
            rc = prod.wait(timeout=30)
        finally:
            if prod.poll() is None:
                prod.kill()
                prod.wait()
            errlog.close()
        elapsed = time.monotonic() - t0
        summary = [ln for ln in lines if not ln.startswith("progress ")]
        log(f"producer exit {rc} after {elapsed:.1f}s: {' / '.join(summary)}")
        check(restarted, f"the producer finished before {restart_at} acks were reported: {lines[-3:]}")
        if rc != 0:
            with open(os.path.join(broker.tmp, "producer.stderr")) as f:
                tail = f.read()[-3000:]
            raise lib.TestFailure(f"producer failed (exit {rc}): {' / '.join(summary)}\n{tail}")
        check(f"produced acked {N} failed 0" in "\n".join(summary),
              f"producer did not get {N} acks: {summary}")
        last = [int(ln.split()[1]) for ln in lines if ln.startswith("progress ")]
        check(last and last[-1] == N and acked_at_stop < N,
              f"progress lines do not show the restart in mid-run ({acked_at_stop} at stop, last {last[-1:]})")

        log("verifying with a Java consumer (assign, seekToBeginning, no group)")
        r = client("verify", broker.bootstrap, TOPIC, N, timeout=300)
        log(r.stdout.strip())
        check(r.returncode == 0, f"verify exited {r.returncode}: {r.stdout}{r.stderr[-3000:]}")
        out = r.stdout.split()
        facts = dict(zip(out[1::2], out[2::2])) if out and out[0] == "verified" else {}
        check(facts, f"verify printed {r.stdout!r}")
        check(facts["missing"] == "0", f"{facts['missing']} records lost")
        check(facts["duplicated"] == "0", f"{facts['duplicated']} records duplicated")
        check(facts["bad"] == "0", f"{facts['bad']} records with a bad key or value")
        check(facts["out_of_order"] == "0", f"{facts['out_of_order']} records out of order in a partition")
        check(facts["records"] == str(N), f"{facts['records']} records in the log, want {N}")
        ends = [int(kv.split(":")[1]) for kv in facts["end_offsets"].strip(",").split(",")]
        check(sum(ends) == N, f"end offsets {facts['end_offsets']} add up to {sum(ends)}, want {N}")


if __name__ == "__main__":
    lib.main(test)
