#!/usr/bin/env python3
"""Consumer-group benchmark (issue 6), Sluice and Apache Kafka side by side in one run.

1. Rebalance time: a 100-partition topic; three librdkafka members (kcat -G, range
   assignor, session 10 s) start at the same moment; the figure is the time from their
   start until all three have printed their assignment (median of 3 rounds, each a
   fresh group). The broker runs with group.initial.rebalance.delay.ms=0 (Kafka's
   test setting; its production default 3000 would add 3 s to both).
2. Commit throughput: 100 "members" (100 connections, one group each, standalone
   commits with generation -1 as assign()-mode consumers send them) commit 10
   partitions per OffsetCommit v2 request in a loop for 10 s; the figure is
   partition-offsets committed per second, as acknowledged by the broker. The
   client is Python, so this measures a loaded client too: compare the two
   brokers, not the absolute number.
Prints a table and writes JSON to --json FILE. Usage:
  perf/groups/bench-groups.py [--targets sluice,kafka] [--json FILE]
Needs kcat; the Kafka target needs java and the jars tests/reference/kafka-ref.sh fetches.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))


def rebalance_round(lib, broker, kcat, group):
    procs, errs = [], []
    t0 = time.monotonic()
    for i in range(3):
        e = open(os.path.join(broker.tmp, f"{group}-{i}.err"), "w+")
        errs.append(e)
        procs.append(subprocess.Popen([kcat, "-b", broker.bootstrap, "-G", group, "bench100", "-u", "-f", "",
                                       "-X", "session.timeout.ms=10000", "-X", "partition.assignment.strategy=range"],
                                      stdout=subprocess.DEVNULL, stderr=e, stdin=subprocess.DEVNULL))
    done = None
    while time.monotonic() - t0 < 120:
        n = 0
        for e in errs:
            e.flush()
            with open(e.name) as f:
                n += "assigned:" in f.read()
        if n == 3:
            done = time.monotonic() - t0
            break
        time.sleep(0.02)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
    return done


def commit_worker(lib, port, group, stop, counts, idx):
    n = 0
    try:
        with lib.Conn(port, timeout=30) as c:
            body_parts = lib.Enc().string(group).i32(-1).string("").i64(-1).i32(1).string("bench100").i32(10)
            for p in range(10):
                body_parts.i32(p).i64(12345).string("")
            body = body_parts.done()
            while not stop.is_set():
                d = c.request(8, 2, body)
                for _ in range(d.i32()):
                    d.string()
                    for _ in range(d.i32()):
                        d.i32()
                        if d.i16() == 0:
                            n += 1
    except Exception as e:  # noqa: BLE001 - reported as a lower count
        print(f"worker {idx}: {e}", file=sys.stderr)
    counts[idx] = n


def commit_rate(lib, broker, seconds=10):
    stop = threading.Event()
    counts = [0] * 100
    threads = [threading.Thread(target=commit_worker, args=(lib, broker.port, f"cgroup{i}", stop, counts, i))
               for i in range(100)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    return sum(counts) / (time.monotonic() - t0)


def run_target(target):
    os.environ["SLUICE_TEST_TARGET"] = target
    import importlib
    import lib
    importlib.reload(lib)
    kcat = lib.kcat_path()
    props = {"num.partitions": 100, "group.initial.rebalance.delay.ms": 0}
    with lib.Broker(f"bench-groups-{target}", props) as broker:
        subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "bench100"], input=b"x\n", capture_output=True,
                       timeout=120)
        rebalance_round(lib, broker, kcat, "warm")  # creates __consumer_offsets, warms the JVM
        rounds = [rebalance_round(lib, broker, kcat, f"rb{i}") for i in range(3)]
        rate = commit_rate(lib, broker)
        version = "sluice" if target == "sluice" else "Apache Kafka " + os.environ.get("KAFKA_VERSION", "4.4.0")
        broker.stop()
    ok = [r for r in rounds if r is not None]
    return {"target": target, "version": version,
            "rebalance_s_median": statistics.median(ok) if ok else None, "rebalance_s_rounds": rounds,
            "commits_per_s": rate}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default="sluice,kafka")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = [run_target(t) for t in a.targets.split(",")]
    print("\n| broker | 3 members join a 100-partition topic: s (median of 3) | partition offsets committed/s (100 members) |")
    print("|---|---|---|")
    for r in res:
        rb = "%.2f" % r["rebalance_s_median"] if r["rebalance_s_median"] is not None else "did not settle"
        print(f"| {r['version']} | {rb} | {r['commits_per_s']:,.0f} |")
    if len(res) == 2 and res[1]["commits_per_s"]:
        print(f"\nratio sluice/kafka: commits {res[0]['commits_per_s'] / res[1]['commits_per_s']:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
