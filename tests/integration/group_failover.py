#!/usr/bin/env python3
"""Replicated __consumer_offsets (issue 13): consumer groups and their committed
offsets survive the loss of the broker that coordinates them. Three controllers and
three brokers through deploy/local-cluster.sh, offsets.topic.replication.factor=3 (the
default), a real kafka-python consumer group.

Proves, in order:
- a first start with one broker of three (local-cluster.sh up --stopped 2 --stopped 3):
  __consumer_offsets is not created (the controller cannot place 3 replicas; the
  broker's log says so), and FindCoordinator, OffsetFetch and JoinGroup all answer
  COORDINATOR_NOT_AVAILABLE; still so with two brokers; once the third is up, the topic
  exists with three replicas (an ISR of three) on every partition and FindCoordinator
  names a coordinator: groups work;
- a kafka-python consumer of group G reads half of an RF=3 topic and commits
  (synchronously: acknowledged only once every ISR member has the record); OffsetFetch
  answers exactly what it committed; the coordinator FindCoordinator names is the
  leader of G's __consumer_offsets partition (Java's hash of the group id);
- kill -9 of that broker: FindCoordinator (asked of a surviving broker) names another
  broker, the partition's new leader, within the session timeout and a little;
  OffsetFetch from it answers the offsets committed and acknowledged before the kill;
- the same consumer goes on without a rebalance (its membership was stored with its
  generation and is loaded by the new coordinator: its rebalance listener sees no new
  assignment), reads the rest of the topic, every record exactly once across the
  failover, and commits again through the new coordinator; closed, a new member of G
  resumes from the committed offsets (reads only records produced after them);
- the killed broker restarted rejoins as a follower: back in the ISR of every
  __consumer_offsets partition it replicates, its log says it follows; leadership
  may come back to it (preferred leaders), and whoever coordinates G then has read the
  partition afresh: OffsetFetch answers the last commit (made while it was away), and
  a commit through it works;
- a second kill -9 of the coordinator: the broker that takes over (typically the one
  that coordinated G after the first kill, and has not since: it left the group's
  state behind at an older leader epoch) answers the commit made in between, not what
  it had.

- and throughout, the leaders ask the controller for ISR changes a few times only: none
  for a killed follower the controller has fenced (Kafka's isReplicaIsrEligible), which
  an idle partition otherwise asked for at every fetch of its other followers until
  replica.lag.time.max.ms (30 s, left at its default here) had passed.

Short timeouts through local-cluster.sh's --set: broker.session.timeout.ms=4000,
broker.heartbeat.interval.ms=500, controller.quorum.election.timeout.ms=1000;
group.initial.rebalance.delay.ms=0 and
offsets.topic.num.partitions=10 for speed. Ports 22000-22105 on 127.0.0.1 (brokers
22000-22002, controllers 22100/22102/22104 and their Raft ports + 1).
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402

clients.reexec_in_venv()

import cluster as clu  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.consumer.subscription_state import ConsumerRebalanceListener  # noqa: E402

BASE_PORT = 22000
SESSION_MS, HEARTBEAT_MS, ELECTION_MS = 4000, 500, 1000
OFFSETS_PARTITIONS = 10
SETS = ["--set", f"broker.session.timeout.ms={SESSION_MS}",
        "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={ELECTION_MS}",
        "--set-broker", "group.initial.rebalance.delay.ms=0",
        "--set-broker", f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}"]
OFFSETS = "__consumer_offsets"
GROUP, TOPIC, PARTS = "failover-group", "events", 3
# records per partition before the kill, after it, and for the new member
PER_PART, AFTER, LATER = 200, 50, 20
NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 15, 16
PAUSED_GROUP = "paused-coordinator-group"
ISR_REQUESTS_MAX = 200  # AlterPartition requests of all brokers over the whole test (~15 needed)
times = {}


def offsets_partition(group):
    """The __consumer_offsets partition of a group: abs(Java hashCode) % partitions."""
    h = 0
    for ch in group.encode():
        h = (31 * h + ch) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % OFFSETS_PARTITIONS


def find_coordinator(port, group=GROUP):
    """FindCoordinator v1 for a group, asked of port: (error, node id)."""
    body = Enc().string(group).i8(0).done()
    d = clu.call(port, lambda c: c.request(10, 1, body))
    d.i32()
    err = d.i16()
    d.string()
    node = d.i32()
    return err, node


def offset_fetch(port, topics, group=GROUP):
    """OffsetFetch v5 asked of port: ({(topic, partition): offset}, group error)."""
    d = clu.call(port, lambda c: c.request(9, 5, lib.offset_fetch_body(group, topics)))
    out, err = lib.offset_fetch_decode(d)
    return {(t.decode(), p): v[0] for (t, p), v in out.items()}, err


def join_error(port, group=GROUP):
    """A JoinGroup v5 of a new member: its error."""
    d = clu.call(port, lambda c: c.request(11, 5, lib.join_group_body(group, "")))
    return lib.join_group_decode(d)["error"]


def offsets_topic(port):
    """__consumer_offsets' {partition: (leader, replicas, isr)} as port's Metadata has it, or None."""
    try:
        topics = clu.metadata(port)[3]
    except (OSError, lib.ProtocolError):
        return None
    t = topics.get(OFFSETS)
    return {p: (v[1], v[3], v[4]) for p, v in t[3].items()} if t else None


def live_port(cl, avoid=()):
    return next(cl.port(b) for b in cl.brokers if b not in avoid and cl.running(b))


def coordinator(cl, avoid=()):
    """(node) FindCoordinator names, asked of a running broker, once it names a running one."""
    def ask():
        try:
            err, node = find_coordinator(live_port(cl, avoid))
        except (OSError, lib.ProtocolError):
            return None
        return node if err == NONE and node not in avoid and cl.running(node) else None
    return ask()


def committed_from(cl, node, tps):
    """OffsetFetch of G's partitions tps from coordinator node, retried while it is loading."""
    def ask():
        try:
            got, err = offset_fetch(cl.port(node), {TOPIC: [p for _t, p in tps]})
        except (OSError, lib.ProtocolError):
            return None
        return got if err == NONE else None
    return clu.wait_for(f"OffsetFetch from broker {node}", ask, 20)


# ----------------------------------------------------------------- the steps

def step_first_start(cl):
    """One broker of three, then two: no __consumer_offsets, COORDINATOR_NOT_AVAILABLE;
    the third: the topic with RF 3, and a coordinator."""
    t0 = time.monotonic()
    cl.up("--stopped", "2", "--stopped", "3")
    times["up (1 broker)"] = time.monotonic() - t0
    check(cl.brokers == [1, 2, 3] and cl.running(1) and not cl.running(2) and not cl.running(3),
          f"cluster.env: brokers {cl.brokers}, running {[b for b in cl.brokers if cl.running(b)]}")
    p1 = cl.port(1)
    for alive in (1, 2):
        for attempt in range(2):  # twice: the second after the broker's retry interval
            check(offsets_topic(p1) is None, f"{alive} broker(s) up: {OFFSETS} exists")
            err, node = find_coordinator(p1)
            check(err == COORDINATOR_NOT_AVAILABLE, f"{alive} broker(s): FindCoordinator answered {err}, node {node}")
            _got, ferr = offset_fetch(p1, {TOPIC: [0]})
            check(ferr == COORDINATOR_NOT_AVAILABLE, f"{alive} broker(s): OffsetFetch answered {ferr}")
            jerr = join_error(p1)
            check(jerr == COORDINATOR_NOT_AVAILABLE, f"{alive} broker(s): JoinGroup answered {jerr}")
            if attempt == 0:
                time.sleep(1.2)
        log(f"{alive} broker(s) of 3 up: no {OFFSETS}; FindCoordinator, OffsetFetch and JoinGroup answer "
            f"COORDINATOR_NOT_AVAILABLE")
        if alive == 1:
            with open(cl.out_log(1), errors="replace") as f:
                text = f.read()
            check(re.search(rf"cannot create {OFFSETS} .*replication factor of 3.*only 1 broker", text),
                  f"broker 1 did not log why {OFFSETS} could not be created:\n{cl.tail(1)}")
        cl.start(alive + 1)
    t0 = time.monotonic()
    node = clu.wait_for("a coordinator once 3 brokers are up", lambda: coordinator(cl), 30)
    times["coordinator after the 3rd broker"] = time.monotonic() - t0
    parts = clu.wait_for(f"{OFFSETS} with an ISR of 3 everywhere",
                         lambda: (lambda t: t if t and len(t) == OFFSETS_PARTITIONS and
                              all(len(r) == 3 and sorted(i) == [1, 2, 3] for _l, r, i in t.values()) else None)(
                         offsets_topic(p1)), 30)
    log(f"3 brokers up: {OFFSETS} created with {len(parts)} partitions of 3 replicas, ISR of 3; FindCoordinator "
        f"names broker {node} after {times['coordinator after the 3rd broker']:.2f}s")


def produce(bootstrap, start, count):
    """count records to each partition, values 'p<partition>-<i>' for i from start; acks=all."""
    prod = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10, linger_ms=5)
    try:
        futs = [prod.send(TOPIC, value=f"p{p}-{i}".encode(), partition=p)
                for p in range(PARTS) for i in range(start, start + count)]
        prod.flush(timeout=60)
        for f in futs:
            f.get(timeout=60)
    finally:
        prod.close(timeout=10)


class Listener(ConsumerRebalanceListener):
    def __init__(self):
        self.assigned = 0

    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        self.assigned += 1


def consumer(bootstrap, client_id, listener):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, client_id=client_id,
                      enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=25,
                      session_timeout_ms=10000, heartbeat_interval_ms=1000, request_timeout_ms=15000,
                      retry_backoff_ms=100)
    c.subscribe([TOPIC], listener=listener)
    return c


def consume(c, want, got, timeout):
    """Poll c until got (a list of values) holds want values more."""
    target = len(got) + want
    deadline = time.monotonic() + timeout
    while len(got) < target:
        check(time.monotonic() < deadline, f"consumed {len(got)} of {target} records within {timeout}s")
        for recs in c.poll(timeout_ms=500, max_records=target - len(got)).values():
            got += [r.value.decode() for r in recs]
    return got


def step_commit_and_kill(cl):
    bootstrap = cl.env["BOOTSTRAP"].split(",")
    KafkaAdminClient(bootstrap_servers=bootstrap).create_topics([NewTopic(TOPIC, PARTS, 3)])
    produce(bootstrap, 0, PER_PART)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    listener = Listener()
    a = consumer(bootstrap, "member-a", listener)
    got = consume(a, PER_PART * PARTS // 2, [], 60)
    a.commit()  # synchronous: returns once acknowledged
    assignments = listener.assigned  # (a first one may come before the topic's metadata)
    committed = {(TOPIC, tp.partition): a.position(tp) for tp in tps}
    check(sum(committed.values()) == len(got), f"committed {committed} for {len(got)} records read")
    node = clu.wait_for("the coordinator", lambda: coordinator(cl), 10)
    got_off = committed_from(cl, node, committed)
    check(got_off == committed, f"OffsetFetch answered {got_off}, committed {committed}")
    p = offsets_partition(GROUP)
    leader = offsets_topic(cl.port(node))[p][0]
    check(leader == node, f"FindCoordinator names broker {node}, {OFFSETS}-{p} is led by {leader}")
    log(f"member-a read {len(got)} records and committed {committed}; coordinator: broker {node}, leader of "
        f"{OFFSETS}-{p}")

    cl.kill(node)
    t0 = time.monotonic()
    new = clu.wait_for("FindCoordinator naming another broker", lambda: coordinator(cl, avoid=(node,)), 30)
    times["coordinator moved"] = time.monotonic() - t0
    new_leader = offsets_topic(cl.port(new))[p][0]
    check(new_leader == new, f"FindCoordinator names broker {new}, {OFFSETS}-{p} is led by {new_leader}")
    got_off = committed_from(cl, new, committed)
    check(got_off == committed, f"after the kill OffsetFetch from broker {new} answered {got_off}, "
          f"committed before it {committed}")
    log(f"broker {node} killed (-9): FindCoordinator names broker {new} after {times['coordinator moved']:.2f}s; "
        f"OffsetFetch there answers the committed offsets {got_off}")

    t0 = time.monotonic()
    produce(bootstrap, PER_PART, AFTER)
    consume(a, (PER_PART + AFTER) * PARTS - len(got), got, 60)
    times["rest read"] = time.monotonic() - t0
    want = sorted(f"p{q}-{i}" for q in range(PARTS) for i in range(PER_PART + AFTER))
    check(sorted(got) == want, f"member-a read {len(got)} records ({len(set(got))} distinct) across the failover, "
          f"want each of {len(want)} once")
    check(listener.assigned == assignments, f"member-a was assigned partitions {listener.assigned - assignments} "
          f"more time(s) across the failover: it rebalanced")
    a.commit()
    ends = {(TOPIC, q): PER_PART + AFTER for q in range(PARTS)}
    now = coordinator(cl, avoid=(node,)) or new
    got_off = committed_from(cl, now, ends)
    check(got_off == ends, f"after the second commit OffsetFetch answered {got_off}, want {ends}")
    a.close()
    log(f"member-a went on without a rebalance (no new assignment): every record exactly once across the failover "
        f"(the rest, with {AFTER * PARTS} produced after the kill, in {times['rest read']:.2f}s), and committed "
        f"{ends} through broker {now}")

    produce(bootstrap, PER_PART + AFTER, LATER)
    lb = Listener()
    b = consumer(bootstrap, "member-b", lb)
    newer = consume(b, LATER * PARTS, [], 60)
    want = sorted(f"p{q}-{i}" for q in range(PARTS) for i in range(PER_PART + AFTER, PER_PART + AFTER + LATER))
    check(sorted(newer) == want, f"member-b read {sorted(newer)[:6]}... ({len(newer)}), want only the "
          f"{len(want)} records after the committed offsets")
    time.sleep(1)
    check(not b.poll(timeout_ms=500), "member-b read more than the records after the committed offsets")
    b.commit()
    log(f"member-b (new) resumed from the committed offsets: exactly the {len(newer)} records produced after them")
    return node, b, p, new


def step_rejoin(cl, killed, b, p, node_before):
    t0 = time.monotonic()
    cl.start(killed)

    def back():
        t = offsets_topic(live_port(cl))
        if not t:
            return None
        mine = [q for q, (_l, r, _i) in t.items() if killed in r]
        return t if mine and all(killed in t[q][2] for q in mine) else None

    parts = clu.wait_for(f"broker {killed} back in the ISR of every {OFFSETS} partition it replicates", back, 60)
    times["rejoined"] = time.monotonic() - t0
    with open(cl.out_log(killed), errors="replace") as f:
        text = f.read().split("local-cluster: starting")[-1]
    followed = set(int(m) for m in re.findall(rf"{OFFSETS}-(\d+): follower of broker", text))
    mine = {q for q, (_l, r, _i) in parts.items() if killed in r}
    check(mine <= followed, f"broker {killed} restarted did not log following {OFFSETS} partitions "
          f"{sorted(mine - followed)}")
    log(f"broker {killed} restarted: a follower of its {len(mine)} {OFFSETS} partitions, back in their ISR after "
        f"{times['rejoined']:.2f}s")

    # Whoever leads G's partition now (the restarted broker, once preferred leaders are
    # restored, or the one that took over) has the last commit, made while it was away.
    first = {node_before}
    end = PER_PART + AFTER + LATER
    time.sleep(1)
    for round_ in (1, 2):
        node = clu.wait_for("the coordinator", lambda: coordinator(cl), 20)
        want = {(TOPIC, q): end for q in range(PARTS)}
        got_off = committed_from(cl, node, want)
        check(got_off == want, f"OffsetFetch from broker {node} answered {got_off}, want {want}")
        produce(cl.env["BOOTSTRAP"].split(","), end, 1)
        more = consume(b, PARTS, [], 60)
        check(sorted(more) == sorted(f"p{q}-{end}" for q in range(PARTS)), f"member-b then read {more}")
        b.commit()
        end += 1
        leader = offsets_topic(cl.port(node))[p][0]
        if round_ == 1:
            log(f"{OFFSETS}-{p} is led by broker {leader} (the restarted one: {leader == killed}); the coordinator "
                f"there answered the commits made while broker {killed} was away, and took a new one")
            # The second failover: the broker that takes over may have coordinated G
            # before, at an older leader epoch; it reads the partition afresh.
            cl.kill(node)
            t0 = time.monotonic()
            clu.wait_for("FindCoordinator naming another broker", lambda: coordinator(cl, avoid=(node,)), 30)
            times["coordinator moved again"] = time.monotonic() - t0
        else:
            log(f"broker {node} took over after {times['coordinator moved again']:.2f}s (it coordinated G before, at "
                f"an older epoch: {node in first}) and answered the commit made since, then took a new one")
    b.close()


def step_paused_coordinator(cl):
    """The coordinator of a group is paused past its session (SIGSTOP): another broker takes
    the group over and takes a newer commit. An OffsetFetch the paused broker finds waiting
    when it runs again gets NOT_COORDINATOR (its lease from the controller expired while it
    was stopped) or the new offset, never the one it held before the pause: that answer
    would show a committed offset going back (the fault campaign found it so)."""
    group = PAUSED_GROUP

    def coordinator_of(avoid=()):
        try:
            err, node = find_coordinator(live_port(cl, avoid), group)
        except (OSError, lib.ProtocolError):
            return None
        return node if err == NONE and node not in avoid and cl.running(node) else None

    def commit(node, offset):
        try:
            d = clu.call(cl.port(node), lambda c: c.request(8, 7, lib.offset_commit_body(
                group, {TOPIC: [(0, offset, "")]})))
            return all(e == NONE for e in lib.offset_commit_decode(d).values())
        except (OSError, lib.ProtocolError):
            return False

    old = clu.wait_for(f"a coordinator for {group}", coordinator_of, 30)
    clu.wait_for(f"commit 100 at broker {old}", lambda: commit(old, 100), 20)
    pid = cl.pid(old)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    conn = None
    try:
        new = clu.wait_for(f"another coordinator for {group} while broker {old} is stopped",
                           lambda: coordinator_of(avoid=(old,)), 40)
        clu.wait_for(f"commit 200 at broker {new}", lambda: commit(new, 200), 20)
        conn = lib.Conn(cl.port(old), timeout=30)  # the kernel accepts while the broker is stopped
        conn.send(lib.frame(lib.request_header(9, 5, 1) + lib.offset_fetch_body(group, {TOPIC: [0]})))
        times["coordinator replaced while paused"] = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        d = lib.Dec(conn.recv_frame())
        check(d.i32() == 1, "OffsetFetch answer: correlation id")
        got, err = lib.offset_fetch_decode(d)
    finally:
        conn.close()
    offset = got.get((TOPIC.encode(), 0), (None,))[0]
    check(err == NOT_COORDINATOR or (err == NONE and offset == 200),
          f"OffsetFetch read by broker {old} as it ran again after its pause: error {err}, offset {offset} "
          f"(broker {new} coordinates {group} and has 200; 100 would be the committed offset going back)")
    log(f"paused coordinator {old}, replaced by {new}: the OffsetFetch waiting for it got "
        f"{'NOT_COORDINATOR' if err else 'the new offset'}")
    check(committed_from(cl, new, [(TOPIC, 0)]) is not None, "the new coordinator answers")
    clu.wait_for(f"broker {old} unfenced again", lambda: coordinator_of() is not None and cl.running(old), 40)


def check_isr_requests(cl):
    """The leaders asked the controller for ISR changes a bounded number of times: an idle
    partition (most of __consumer_offsets) whose killed follower was still caught up by
    the rule (replica.lag.time.max.ms, 30 s) asked again at every fetch of its other
    followers once the controller had fenced it, tens of thousands of refused requests."""
    asked = {}
    for b in cl.brokers:
        with open(cl.out_log(b), errors="replace") as f:
            asked[b] = sum(1 for ln in f if "asking the controller for ISR" in ln)
    check(sum(asked.values()) <= ISR_REQUESTS_MAX, f"ISR changes asked of the controller per broker: {asked} "
          f"(at most {ISR_REQUESTS_MAX} in all expected)")
    log(f"ISR changes asked of the controller: {asked} (the killed brokers, fenced, were not asked for)")


def main():
    with clu.temp_cluster("sluice-group-failover-", lambda root: clu.Cluster(root, BASE_PORT, SETS)) as cl:
        step_first_start(cl)
        killed, b, p, took_over = step_commit_and_kill(cl)
        step_rejoin(cl, killed, b, p, took_over)
        step_paused_coordinator(cl)
        check_isr_requests(cl)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
