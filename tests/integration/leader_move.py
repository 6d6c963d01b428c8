#!/usr/bin/env python3
"""A partition's leadership moving in a replicated cluster (issue 13, its failover
goals): three controllers and three brokers through deploy/local-cluster.sh, a topic of
3 partitions with replication factor 3, and the leader of partition 0 stopped with
SIGTERM (controlled shutdown).

Proves:
- acks=all writes to partition 0 work again at its new leader within a few seconds,
  although replica.fetch.wait.max.ms is 20 s here: the remaining follower had a fetch
  parked at the new leader (a write to every partition just before the SIGTERM starts
  every parked fetch afresh) when partition 0 joined that connection; it must start the
  connection over instead of waiting for that answer (dataplane/fetcher.c, conn_rejoin).
  Before, the write waited up to replica.fetch.wait.max.ms (by default 500 ms);
- the leaders do not flood the controller with AlterPartition requests it refuses: the
  stopping broker keeps fetching, caught up, while the controller calls it ineligible
  (INELIGIBLE_REPLICA); a leader asks for no replica the controller would refuse and
  waits after a refusal (storage_core.c). Without that, every follower fetch asked again
  (thousands of refusals a second, seen in the RF=3 failover benchmark).

Ports 24800-24905 on 127.0.0.1 (brokers 24800-24802, controllers 24900/24902/24904 and
their Raft ports + 1).
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clu  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

BASE_PORT = 24800
FETCH_WAIT_MS = 20000
SETS = ["--set-broker", f"replica.fetch.wait.max.ms={FETCH_WAIT_MS}"]
TOPIC, PARTITIONS = "moving", 3
NONE = 0
RESUME_MAX_S = 5.0       # with the fix: well under a second on an idle machine
REFUSALS_MAX = 300       # per broker in the few seconds after the SIGTERM; without the backoff: thousands
times = {}


def create_rf3(port):
    body = (Enc().array_len(1, True).string(TOPIC, True).i32(PARTITIONS).i16(3).array_len(0, True)
            .array_len(0, True).tags().i32(30000).i8(0).tags().done())
    d = clu.call(port, lambda c: c.request(19, 7, body, flexible_req=True))
    d.i32()
    for _ in range(d.array_len(True)):
        d.string(True), d._take(16)
        err, msg = d.i16(), d.string(True)
        check(err == NONE, f"CreateTopics {TOPIC}: error {err} {msg}")


def partitions(port):
    """{partition: (leader, replicas, isr)} of TOPIC as the broker at port sees it."""
    try:
        _b, _c, _ctl, topics = clu.metadata(port)
    except (OSError, lib.ProtocolError):
        return {}
    t = topics.get(TOPIC)
    return {p: (v[1], v[3], v[4]) for p, v in t[3].items()} if t else {}


def produce(port, p, value, timeout_ms=10000):
    """(error, base offset, message) of one acks=all Produce v3, on a connection of its own
    that waits as long as the request may (the kept ones give up after 5 s)."""
    blob = lib.record_batch([(None, value.encode(), [])])
    with lib.Conn(port, timeout=timeout_ms / 1000 + 10) as c:
        return c.produce(TOPIC, p, blob, version=3, acks=-1, timeout_ms=timeout_ms)


def refusals(cl, broker):
    with open(cl.out_log(broker), errors="replace") as f:
        return sum(1 for ln in f if re.search(r"the controller refused ISR .*INELIGIBLE_REPLICA", ln))


def run(cl):
    cl.up_timed(times)
    ports = {b: cl.port(b) for b in cl.brokers}
    create_rf3(ports[1])

    def replicated():
        views = [partitions(ports[b]) for b in cl.brokers]
        return views[0] if all(len(v) == PARTITIONS and all(ld >= 0 and len(isr) == 3 for ld, _r, isr in v.values())
                               for v in views) else None
    parts = clu.wait_for("every partition led, ISR of three on every broker", replicated, 60, step=0.05)
    victim = parts[0][0]
    survivors = [b for b in cl.brokers if b != victim]
    log(f"{TOPIC}: leaders {[parts[p][0] for p in range(PARTITIONS)]}; stopping broker {victim}, partition 0's leader")
    # A write to every partition: each follower's fetch is answered, and the next one
    # parks afresh (for replica.fetch.wait.max.ms) on every connection.
    for p in range(PARTITIONS):
        t = time.monotonic()
        err, _base, _msg = produce(ports[parts[p][0]], p, f"before-{p}")
        check(err == NONE, f"acks=all write to partition {p} at broker {parts[p][0]}: error {err}")
        log(f"  partition {p}: acks=all write answered in {time.monotonic() - t:.3f}s")
    time.sleep(0.5)
    before = {b: refusals(cl, b) for b in survivors}
    t_stop = time.monotonic()
    cl.kill(victim, "TERM")  # returns once the broker has exited (controlled shutdown done)
    times["controlled shutdown"] = time.monotonic() - t_stop

    def moved():
        v = partitions(ports[survivors[0]])
        return v if v.get(0, (-1,))[0] in survivors else None
    leader = clu.wait_for("partition 0 led by a survivor", moved, 30, step=0.05)[0][0]
    t = time.monotonic()
    err, base, msg = produce(ports[leader], 0, "after", timeout_ms=FETCH_WAIT_MS * 2)
    times["acks=all write at the new leader"] = time.monotonic() - t
    times["SIGTERM -> write answered"] = time.monotonic() - t_stop
    check(err == NONE, f"acks=all write to partition 0 at its new leader {leader}: error {err} {msg}")
    log(f"partition 0: new leader {leader}, acks=all write at offset {base} answered in "
        f"{times['acks=all write at the new leader']:.3f}s ({times['SIGTERM -> write answered']:.3f}s after the SIGTERM)")
    check(times["acks=all write at the new leader"] < RESUME_MAX_S,
          f"the write at the new leader took {times['acks=all write at the new leader']:.1f}s "
          f"(replica.fetch.wait.max.ms {FETCH_WAIT_MS}): the follower waited for its parked fetch")
    # The stopped broker is out of every ISR; ISR changes asked meanwhile were refused
    # now and then, not at every fetch.
    time.sleep(1.0)
    after = {b: refusals(cl, b) - before[b] for b in survivors}
    log(f"INELIGIBLE_REPLICA refusals logged by the survivors since the SIGTERM: {after}")
    for b, n in after.items():
        check(n <= REFUSALS_MAX, f"broker {b}: {n} refused ISR changes in a few seconds (at most {REFUSALS_MAX})")


def main():
    with clu.temp_cluster("sluice-leader-move-", lambda root: clu.Cluster(root, BASE_PORT, SETS)) as cl:
        run(cl)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
