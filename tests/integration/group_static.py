#!/usr/bin/env python3
"""Static group membership (KIP-345, group.instance.id) with librdkafka members:
a member that crashes and comes back under the same instance id within its
session timeout gets its partitions back without a rebalance, and the others
are not disturbed.

Two kcat members (group.instance.id a and b, session.timeout.ms 30000) share a
6-partition topic. Once both are assigned, member b is killed with kill -9 and
started again with instance id b. Checks: member a sees no further rebalance,
the restarted b gets an assignment (the one it had) and consumes records
produced afterwards, and every one of those records is consumed exactly once
across a and b.
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402


def member(kcat, broker, inst, out, err):
    return subprocess.Popen([kcat, "-b", broker.bootstrap, "-G", "static", "st", "-u", "-f", "%p %s\\n",
                             "-X", f"group.instance.id={inst}", "-X", "session.timeout.ms=30000",
                             "-X", "heartbeat.interval.ms=1000", "-X", "auto.offset.reset=latest"],
                            stdout=out, stderr=err, stdin=subprocess.DEVNULL)


def assignments(path):
    with open(path, errors="replace") as f:
        return [ln for ln in f.read().splitlines() if "assigned:" in ln]


def wait_for(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise lib.TestFailure(f"timed out waiting for {what}")


def test():
    kcat = lib.kcat_path()
    props = {"num.partitions": 6, "group.initial.rebalance.delay.ms": 0}
    with lib.Broker("gstatic", props) as broker:
        subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "st"], input=b"warm\n", capture_output=True,
                       timeout=60)
        files = {k: (os.path.join(broker.tmp, f"{k}.out"), os.path.join(broker.tmp, f"{k}.err"))
                 for k in ("a", "b1", "b2")}
        fa = [open(p, "w") for p in files["a"]]
        fb = [open(p, "w") for p in files["b1"]]
        # a first, so a leads the group: the member restarted below is a follower
        # (a returning static leader makes Sluice, like Kafka before KIP-814, rebalance)
        a = member(kcat, broker, "a", *fa)
        procs = [a]
        try:
            wait_for("a assigned alone", lambda: assignments(files["a"][1]))
            b = member(kcat, broker, "b", *fb)
            procs.append(b)
            def parts(path):
                got = assignments(path)
                return set(re.findall(r"st \[(\d+)\]", got[-1].split("assigned:")[1])) if got else set()

            def settled():
                pa, pb = parts(files["a"][1]), parts(files["b1"][1])
                return len(pa) == 3 and len(pb) == 3 and not (pa & pb)

            # one generation with both members: disjoint halves of the 6 partitions
            wait_for("both members assigned in one generation", settled)
            time.sleep(2)
            before_a = len(assignments(files["a"][1]))
            got_b = assignments(files["b1"][1])[-1]
            log(f"a: {assignments(files['a'][1])[-1].split('assigned:')[1].strip()}; "
                f"b: {got_b.split('assigned:')[1].strip()}")
            b.kill()
            b.wait()
            log("member b killed (kill -9); restarting it as instance b")
            fb2 = [open(p, "w") for p in files["b2"]]
            b2 = member(kcat, broker, "b", *fb2)
            procs.append(b2)
            wait_for("the restarted b to get an assignment", lambda: assignments(files["b2"][1]), 30)
            got_b2 = assignments(files["b2"][1])[-1]
            check(got_b2.split("assigned:")[1].strip() == got_b.split("assigned:")[1].strip(),
                  f"b came back with different partitions: {got_b2} vs {got_b}")
            time.sleep(3)
            # records after the rejoin, one per partition round
            lines = b"".join(b"s%d\n" % i for i in range(600))
            r = subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "st", "-X", "sticky.partitioning.linger.ms=0"],
                               input=lines, capture_output=True, timeout=60)
            check(r.returncode == 0, "produce failed")

            def consumed():
                seen = []
                for path in (files["a"][0], files["b2"][0]):
                    with open(path, errors="replace") as f:
                        seen += [ln.split(" ", 1)[1] for ln in f.read().splitlines() if " s" in ln]
                return seen
            wait_for("all 600 records consumed", lambda: len(consumed()) >= 600, 30)
            time.sleep(1)
            seen = consumed()
            check(len(seen) == 600 and len(set(seen)) == 600, f"{len(seen)} deliveries, {len(set(seen))} distinct")
            after_a = len(assignments(files["a"][1]))
            check(after_a == before_a, f"member a was rebalanced ({before_a} -> {after_a} assignments)")
            log("static rejoin: same partitions for b, no rebalance for a, 600 records exactly once")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
