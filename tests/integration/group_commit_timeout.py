#!/usr/bin/env python3
"""offsets.commit.timeout.ms: a group coordinator's write to __consumer_offsets that
the ISR does not take within it is answered as failed, as Kafka 4's coordinator answers
it (its runtime times the write out with REQUEST_TIMED_OUT, which
GroupCoordinatorService turns into COORDINATOR_NOT_AVAILABLE, 15), instead of waiting
as long as the ISR does. Three controllers and three brokers through
deploy/local-cluster.sh, __consumer_offsets with one partition and three replicas
(min.insync.replicas 1, the default), offsets.commit.timeout.ms=1000;
replica.lag.time.max.ms and broker.session.timeout.ms are 20 s, so a follower stopped
with SIGSTOP for a few seconds stays in the ISR and registered: the high watermark
cannot pass what the coordinator appends meanwhile.

Proves, in order:
- with every broker running, a standalone OffsetCommit is acknowledged (NONE) and
  OffsetFetch answers it;
- with a follower of __consumer_offsets-0 stopped (SIGSTOP, in the ISR):
  - an OffsetCommit is answered COORDINATOR_NOT_AVAILABLE after about 1 s (not
    before, and not never), and OffsetFetch still answers the previous commit (what
    was not committed is not visible);
  - a one-member group's leader SyncGroup (its group record waits the same way) is
    answered COORDINATOR_NOT_AVAILABLE after about 1 s, and the group rebalances
    (Heartbeat: REBALANCE_IN_PROGRESS), handing out no assignment nobody stored;
  - the coordinator keeps answering meanwhile (Metadata, OffsetFetch);
- the follower continued (SIGCONT): the records of the timed-out writes stayed in the
  log and become committed (the partition's high watermark passes them); a new commit
  is acknowledged at once and OffsetFetch answers it.

Without the timeout the stopped follower held the commit for as long as it stayed in
the ISR (here 20 s: the client's 10 s socket timeout fails the test).

Ports 26000-26002 (brokers) and 26100-26105 (controllers) on 127.0.0.1.
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BASE_PORT = 26000
STALL_MS = 20000  # replica.lag.time.max.ms and broker.session.timeout.ms
COMMIT_TIMEOUT_MS = 1000
SETS = ["--set", f"broker.session.timeout.ms={STALL_MS}",
        "--set", f"broker.heartbeat.interval.ms={fl.HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={fl.ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={STALL_MS}",
        "--set-broker", "offsets.topic.num.partitions=1",
        "--set-broker", "group.initial.rebalance.delay.ms=0",
        "--set-broker", f"offsets.commit.timeout.ms={COMMIT_TIMEOUT_MS}"]
OFFSETS = "__consumer_offsets"
TOPIC = "events"
GROUP, MEMBERS_GROUP = "commit-timeout-group", "sync-timeout-group"
COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 15, 27, 79
# Answered within this after the timeout (a loaded 2-core machine; the storage core's
# timer itself is exact to a millisecond).
SLACK_S = 3.0
times = {}


def commit(port, offset, group=GROUP):
    """A standalone OffsetCommit v7 of TOPIC-0 on its own connection (it may wait):
    (error, seconds)."""
    t0 = time.monotonic()
    with lib.Conn(port, timeout=10) as c:
        d = c.request(8, 7, lib.offset_commit_body(group, {TOPIC: [(0, offset, "m")]}))
        took = time.monotonic() - t0
    res = lib.offset_commit_decode(d)
    check(list(res) == [(TOPIC.encode(), 0)], f"OffsetCommit answered {res}")
    return res[(TOPIC.encode(), 0)], took


def fetched(port, group=GROUP):
    d = clu.call(port, lambda c: c.request(9, 5, lib.offset_fetch_body(group, {TOPIC: [0]})))
    out, err = lib.offset_fetch_decode(d)
    check(err == fl.NONE, f"OffsetFetch: group error {err}")
    off, _meta, perr = out[(TOPIC.encode(), 0)]
    check(perr == fl.NONE, f"OffsetFetch: partition error {perr}")
    return off


def timed_out(what, took, err):
    check(err == COORDINATOR_NOT_AVAILABLE, f"{what}: error {err}, want COORDINATOR_NOT_AVAILABLE (15)")
    at_least = COMMIT_TIMEOUT_MS / 1000
    check(took >= at_least - 0.005, f"{what}: answered after {took:.3f}s, before the {at_least:.1f}s timeout")
    check(took < at_least + SLACK_S, f"{what}: answered after {took:.3f}s, timeout {at_least:.1f}s")


def joined_leader(port):
    """One member of MEMBERS_GROUP through JoinGroup v5 (an id first, KIP-394): (member
    id, generation); it leads the group, now CompletingRebalance."""
    with lib.Conn(port, timeout=10) as c:
        r = lib.join_group_decode(c.request(11, 5, lib.join_group_body(MEMBERS_GROUP, "")))
        check(r["error"] == MEMBER_ID_REQUIRED, f"JoinGroup without an id: {r['error']}")
        mid = r["member_id"]
        r = lib.join_group_decode(c.request(11, 5, lib.join_group_body(MEMBERS_GROUP, mid)))
    check(r["error"] == fl.NONE and r["leader"] == mid, f"JoinGroup: {r}")
    return mid, r["generation"]


def heartbeat(port, gen, mid):
    d = clu.call(port, lambda c: c.request(12, 3, lib.heartbeat_body(MEMBERS_GROUP, gen, mid)))
    d.i32()
    return d.i16()


def step_stopped_follower(cl, coord, follower, hw0, mid, gen):
    """The follower stopped: both writes time out; the coordinator stays responsive."""
    port = cl.port(coord)
    os.kill(cl.pid(follower), signal.SIGSTOP)
    try:
        err, took = commit(port, 10)
        timed_out("OffsetCommit", took, err)
        times["OffsetCommit timed out"] = took
        check(fetched(port) == 5, "OffsetFetch after the timed-out commit does not answer the last acknowledged one")
        log(f"OffsetCommit with broker {follower} stopped: COORDINATOR_NOT_AVAILABLE after {took:.3f}s; "
            f"OffsetFetch still answers 5")

        t0 = time.monotonic()
        with lib.Conn(port, timeout=10) as c:
            d = c.request(14, 3, lib.sync_group_body(MEMBERS_GROUP, gen, mid, [(mid, b"assigned")]))
            took = time.monotonic() - t0
        serr, assignment = lib.sync_group_decode(d)
        timed_out("the leader's SyncGroup", took, serr)
        check(not assignment, f"the timed-out SyncGroup handed out an assignment: {assignment!r}")
        times["SyncGroup timed out"] = took
        herr = heartbeat(port, gen, mid)
        check(herr == REBALANCE_IN_PROGRESS, f"Heartbeat after the timed-out SyncGroup: {herr}, want 27")
        log(f"SyncGroup with broker {follower} stopped: COORDINATOR_NOT_AVAILABLE after {took:.3f}s; the "
            f"group rebalances (Heartbeat: REBALANCE_IN_PROGRESS)")

        md = clu.md_partition(port, OFFSETS, 0)
        check(md and md[1] == coord and sorted(md[4]) == [1, 2, 3],
              f"{OFFSETS}-0 while broker {follower} is stopped: {md}")
        hw = fl.high_watermark(port, OFFSETS, 0)
        check(hw == hw0, f"{OFFSETS}-0's high watermark moved to {hw} from {hw0} with a follower stopped")
    finally:
        os.kill(cl.pid(follower), signal.SIGCONT)


def main():
    with clu.temp_cluster("sluice-commit-timeout-", lambda root: fl.Cluster(root, BASE_PORT, sets=SETS)) as cl:
        cl.up_timed(times)
        st = clu.wait_for(f"{OFFSETS}-0 with an ISR of three", lambda: (
            lambda s: s if s and s[0] == fl.NONE and s[1] >= 0 and len(s[4]) == 3 else None)(
                fl.md_any(cl, OFFSETS, 0)), 60)
        coord = st[1]
        follower = [b for b in st[3] if b != coord][0]
        fl.create_topic(cl.port(coord), TOPIC, 1, assignment=[[coord]])
        clu.wait_for(f"{TOPIC} known to broker {coord}",
                     lambda: clu.md_partition(cl.port(coord), TOPIC, 0) is not None, 30)
        port = cl.port(coord)
        err, took = commit(port, 5)
        check(err == fl.NONE, f"OffsetCommit with every broker running: error {err}")
        check(fetched(port) == 5, "OffsetFetch does not answer the acknowledged commit")
        times["OffsetCommit acknowledged"] = took
        log(f"broker {coord} coordinates (leads {OFFSETS}-0); a commit is acknowledged in {took:.3f}s")
        mid, gen = joined_leader(port)
        # Both followers hold every record (the high watermark is the log end).
        hw0 = clu.wait_for(f"{OFFSETS}-0's high watermark settled", lambda: (
            lambda h: h if h > 0 and h == fl.high_watermark(port, OFFSETS, 0) else None)(
                fl.high_watermark(port, OFFSETS, 0)), 15, step=0.3)

        step_stopped_follower(cl, coord, follower, hw0, mid, gen)

        t0 = time.monotonic()
        hw = clu.wait_for("the timed-out records committed after SIGCONT",
                          lambda: (lambda h: h if h >= hw0 + 2 else None)(fl.high_watermark(port, OFFSETS, 0)),
                          20)
        times["committed after SIGCONT"] = time.monotonic() - t0
        err, took = commit(port, 20)
        check(err == fl.NONE and took < SLACK_S, f"OffsetCommit after SIGCONT: error {err} after {took:.3f}s")
        check(fetched(port) == 20, "OffsetFetch does not answer the commit made after SIGCONT")
        log(f"broker {follower} continued: {OFFSETS}-0's high watermark {hw0} -> {hw} (the timed-out records "
            f"stayed in the log); a commit is acknowledged in {took:.3f}s")
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
