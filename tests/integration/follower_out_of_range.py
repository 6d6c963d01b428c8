#!/usr/bin/env python3
"""A follower whose fetch position is out of the leader's range catches up (issue 13): three
controllers and three brokers through deploy/local-cluster.sh, one partition with
replication factor 3 led by broker 1.

Proves, in order:
- below the leader's log start: broker 3 stopped (SIGTERM) while the leader takes more
  records and DeleteRecords moves the leader's log start past broker 3's log end; started
  again, broker 3 gets OFFSET_OUT_OF_RANGE with the leader's log start, empties its log and
  starts over there (Kafka's truncateFullyAndStartAt), catches up and rejoins the ISR; its
  log then starts at the leader's log start and holds exactly the leader's records from
  there on;
- above the leader's log end, with no leader epoch to place the follower's log: broker 1
  (the leader) takes records its followers never fetch (acks=1, followers stopped), is
  killed (kill -9) and broker 2 leads; while broker 1 is down its log is made one without
  leader epochs (every batch's PartitionLeaderEpoch -1, the leader-epoch checkpoint
  removed: a log written before epochs existed), so its Fetch names no LastFetchedEpoch
  and a FetchOffset past the new leader's end, which the leader can only answer
  OFFSET_OUT_OF_RANGE. Started again, broker 1 must not retry that for ever (it did: it
  backed off and asked again): with no epoch to truncate by, it starts over at the
  leader's log start, rejoins the ISR, and its records are the leader's again (the
  unreplicated ones gone);
- followers move their log start with the leader's (from the Fetch answers, at most to
  their high watermark): broker 2 follows the DeleteRecords, and once it leads, the
  deleted records stay deleted (it answers OFFSET_OUT_OF_RANGE below the new start).
The epoch-walking branch (a follower whose last epoch the leader cannot place truncates
that epoch away and asks again with the one before) is proven by the unit test
partition.out_of_range_*.

Short timeouts through local-cluster.sh's --set (failover_lib.SETS). Ports 22520-22525,
22620-22625 on 127.0.0.1.
"""
import os
import re
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BASE_PORT = 22520
TOPIC = "oor"
PER_BATCH = 20
times = {}


def produce_values(cl, leader, prefix, n, acks=-1):
    """n records in batches of PER_BATCH to TOPIC-0 at leader: {offset: value}."""
    acked = {}
    for i in range(0, n, PER_BATCH):
        values = [f"{prefix}-{j}" for j in range(i, min(n, i + PER_BATCH))]
        blob = lib.record_batch([(None, v.encode(), []) for v in values])
        err, base, msg = fl.produce(cl.port(leader), TOPIC, 0, blob, acks=acks)
        check(err == fl.NONE, f"produce {prefix} {i}..: error {err} {msg}")
        acked.update({base + k: v for k, v in enumerate(values)})
    return acked


def isr_has(cl, broker, timeout):
    def ok():
        st = fl.md_any(cl, TOPIC, 0)
        return st if st and broker in st[4] else None
    return clu.wait_for(f"broker {broker} in {TOPIC}-0's ISR", ok, timeout)


def step_below_log_start(cl):
    n1, n2 = 400, 600
    acked = produce_values(cl, 1, "a", n1)
    clu.wait_for("every replica holding the first records",
                 lambda: all(len(fl.log_records(cl, b, TOPIC, 0)) == n1 for b in cl.brokers), 20)
    cl.kill(3, "TERM")
    acked.update(produce_values(cl, 1, "b", n2))
    cut = n1 + n2 // 2
    err, low = clu.delete_records(cl.port(1), TOPIC, 0, cut)
    check(err == fl.NONE and low == cut, f"DeleteRecords to {cut}: error {err}, low watermark {low}")
    log(f"broker 3 stopped at log end {n1}; {n2} more records on the leader; DeleteRecords moved the leader's "
        f"log start to {cut}, past broker 3's end")
    t0 = time.monotonic()
    cl.start(3)
    isr_has(cl, 3, 40)
    times["below log start: back in the ISR"] = time.monotonic() - t0
    disk = fl.log_records(cl, 3, TOPIC, 0)
    want = {o: v for o, v in acked.items() if o >= cut}
    check(min(disk) == cut and disk == want,
          f"broker 3's log: offsets {min(disk)}..{max(disk)} ({len(disk)} records), want the leader's {cut}.."
          f"{n1 + n2 - 1}")
    first = os.path.basename(cl.segments(3, TOPIC, 0)[0])
    check(first == f"{cut:020d}.log", f"broker 3's first segment is {first}, not at the leader's log start {cut}")
    with open(cl.out_log(3), errors="replace") as f:
        check(re.search(rf"{TOPIC}-0: the leader's log starts at {cut}, past this log's end {n1}", f.read()),
              f"broker 3 did not log starting over at {cut}")
    log(f"broker 3 started over at the leader's log start {cut} and rejoined the ISR after "
        f"{times['below log start: back in the ISR']:.2f}s; its log holds the leader's {len(want)} records from {cut}")
    # Broker 2, which followed all along, moved its log start with the leader's.
    clu.wait_for("broker 2's log start at the leader's", lambda: log_start_file(cl, 2) == cut, 10)
    return n1 + n2, cut


def log_start_file(cl, broker):
    try:
        with open(os.path.join(cl.data_dir(broker, TOPIC, 0), "sluice-log-start-offset")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1


def strip_epochs(cl, broker):
    """Every batch of broker's TOPIC-0 segments gets PartitionLeaderEpoch -1 (outside the
    CRC) and the leader-epoch checkpoint goes: the log of a writer without epochs."""
    n = 0
    for path in cl.segments(broker, TOPIC, 0):
        batches = fl.segment_batches(path)
        with open(path, "r+b") as f:
            for _base, _last, pos, _len, _e, _pid in batches:
                f.seek(pos + 12)
                f.write(struct.pack(">i", -1))
                n += 1
    d = cl.data_dir(broker, TOPIC, 0)
    for name in os.listdir(d):
        if "epoch" in name:
            os.unlink(os.path.join(d, name))
    return n


def step_above_log_end(cl, end, cut):
    followers = [2, 3]
    for b in followers:
        os.kill(cl.pid(b), signal.SIGSTOP)
    time.sleep(0.8)  # their parked fetches are answered empty and no new one comes
    try:
        extra = produce_values(cl, 1, "unreplicated", 60, acks=1)
        check(min(extra) == end, f"acks=1 records at {min(extra)}, not {end}")
        pid = cl.pid(1)
        os.kill(pid, signal.SIGKILL)
        clu.wait_for("broker 1 gone after SIGKILL", lambda: not cl.ours(pid), 30)
    finally:
        for b in followers:
            os.kill(cl.pid(b), signal.SIGCONT)
    st = clu.wait_for("a new leader of oor-0", lambda: (
        lambda s: s if s and s[0] == fl.NONE and s[1] in followers and 1 not in s[4] else None)(
        fl.md_any(cl, TOPIC, 0, skip=(1,))), fl.SESSION_MS / 1000 + 15)
    leader = st[1]
    clu.wait_for("the new leader's high watermark at the old end",
                 lambda: fl.high_watermark(cl.port(leader), TOPIC, 0, cut) >= end, 15)
    with lib.Conn(cl.port(leader), timeout=5) as c:
        err, _hw, _blob = c.fetch(TOPIC, 0, 0, max_wait_ms=0)
    check(err == fl.OFFSET_OUT_OF_RANGE, f"the new leader serves offset 0 (error {err}): DeleteRecords undone")
    n = strip_epochs(cl, 1)
    check(max(fl.log_records(cl, 1, TOPIC, 0)) == end + 59, "broker 1 does not hold its 60 unreplicated records")
    log(f"broker 1 (leader) took 60 records alone (acks=1) and was killed; broker {leader} leads at end {end}; "
        f"broker 1's {n} batches rewritten without leader epochs, its epoch checkpoint removed")
    t0 = time.monotonic()
    cl.start(1)
    isr_has(cl, 1, 40)
    times["above log end: back in the ISR"] = time.monotonic() - t0
    # Back in the ISR, broker 1 may lead again (it is the preferred replica).
    st = clu.wait_for("oor-0's leader", lambda: (lambda s: s if s and s[0] == fl.NONE and s[1] >= 0 else None)(
        fl.md_any(cl, TOPIC, 0)), 15)
    clu.wait_for(f"broker {st[1]}'s high watermark at the end",
                 lambda: fl.high_watermark(cl.port(st[1]), TOPIC, 0, cut) >= end, 15)
    want = dict(fl.read_values(cl.port(st[1]), TOPIC, 0, start=cut))
    check(min(want) == cut and len(want) == end - cut,
          f"the leader serves {len(want)} records from {min(want)}, {end - cut} were kept from {cut}")
    disk = fl.log_records(cl, 1, TOPIC, 0)
    check(not any(v.startswith("unreplicated") for v in disk.values()),
          "broker 1 still holds records only it had")
    check(disk == want, f"broker 1's log is not the leader's ({len(disk)} records, the leader {len(want)})")
    with open(cl.out_log(1), errors="replace") as f:
        text = f.read()
    check(re.search(rf"{TOPIC}-0: fetch at {end + 60} is out of the leader's range", text),
          "broker 1 did not log its out-of-range position")
    log(f"broker 1, out of range above the leader's end with no epoch to truncate by, started over at the "
        f"leader's log start and rejoined the ISR after {times['above log end: back in the ISR']:.2f}s; its log "
        f"is the leader's, the 60 unreplicated records gone")


def main():
    with clu.temp_cluster("sluice-oor-", lambda root: fl.Cluster(root, BASE_PORT)) as cl:
        cl.up_timed(times)
        fl.create_topic(cl.port(1), TOPIC, 1, assignment=[[1, 2, 3]], configs=[("min.insync.replicas", "1")])
        clu.wait_for("oor-0 led by broker 1 with an ISR of three", lambda: (
            lambda s: s and s[1] == 1 and sorted(s[4]) == [1, 2, 3])(fl.md_any(cl, TOPIC, 0)), 20)
        end, cut = step_below_log_start(cl)
        step_above_log_end(cl, end, cut)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
