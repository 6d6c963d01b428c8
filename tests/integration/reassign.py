#!/usr/bin/env python3
"""Partition reassignment (KIP-455) and replication throttles with Kafka's own
kafka-reassign-partitions.sh (ReassignPartitionsCommand, Kafka 4.1 jars), on three
controllers and three brokers started through deploy/local-cluster.sh.

Proves, in order:
- a topic placed on broker 1 alone (kafka-topics --replica-assignment 1) takes N records
  (acks=all, raw Produce v3, so every offset is known), and DeleteRecords moves its log
  start past the first of them (the new replicas must start there);
- kafka-reassign-partitions --execute --throttle R moves it to [2,3]: the tool reports
  the throttle set and the reassignment started; the topic gets Kafka's throttled
  replica lists (leader.replication.throttled.replicas=0:1,
  follower.replication.throttled.replicas=0:2,0:3, kafka-configs --describe);
- while it runs, ListPartitionReassignments (raw, through a broker, and
  kafka-reassign-partitions --list) shows replicas [2,3,1], adding [2,3], removing [1],
  and --verify says it is still in progress without clearing the throttles;
- the throttle holds the move back: it takes at least the time the rate allows for the
  bytes the leader serves its two new followers (measured and printed; without the
  throttle the move takes well under a second);
- --verify then reports completion and clears the throttles (kafka-configs --describe
  shows none left on the topic);
- kafka-topics --describe shows Replicas 2,3 and ISR 2,3, led by one of them; the new
  replicas hold byte-identical batches, the very batches broker 1 held from its log start
  on (same offsets, bytes and CRCs); broker 1 no longer leads it and its copy is removed (provably
  garbage: docs/operations.md); Kafka's console consumer reads every record back from
  the new leader, and the raw fetch from the leader returns each at its offset;
- a second move ([1] -> [2], throttled hard) is listed while it runs, then
  kafka-reassign-partitions --cancel reverts it: back to Replicas 1, ISR 1, nothing
  listed, broker 2's partial copy removed, every record still on broker 1;
- AlterPartitionReassignments refusals, raw, with Kafka's errors: an unknown topic
  (UNKNOWN_TOPIC_OR_PARTITION), an unregistered broker (INVALID_REPLICA_ASSIGNMENT),
  a cancel with nothing in progress (NO_REASSIGNMENT_IN_PROGRESS), v1 with
  AllowReplicationFactorChange false and another factor (INVALID_REPLICATION_FACTOR);
  asked directly, only the active controller answers ListPartitionReassignments, the
  others NOT_CONTROLLER.

Short timeouts through local-cluster.sh's --set. Ports 23000-23105 on 127.0.0.1
(brokers 23000-23002, controllers 23100/23102/23104 and their Raft ports + 1).
"""
import json
import os
import re
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import cluster as clu  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

BASE_PORT = 23000
SESSION_MS, HEARTBEAT_MS, ELECTION_MS, LAG_MS, FETCH_BYTES = 4000, 500, 1000, 3000, 65536
SETS = ["--set", f"broker.session.timeout.ms={SESSION_MS}",
        "--set", f"broker.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={LAG_MS}",
        # small fetches, so that the throttles meter the move in fine steps
        "--set-broker", f"replica.fetch.max.bytes={FETCH_BYTES}"]
TOPICS = "org.apache.kafka.tools.TopicCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
CONFIGS = "kafka.admin.ConfigCommand"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
MOVED, CANCELLED = "moved", "cancelled"
N, PER_BATCH, VALUE_BYTES = 2000, 50, 1000
LOG_START = 500          # DeleteRecords moves the first topic's log start here before it moves
THROTTLE = 300000        # B/s, the first move
CANCEL_THROTTLE = 20000  # B/s, the second: slow enough to cancel it midway
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER = 0, 3, 41
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS = 38, 39, 85
times = {}


def ids(text):
    return [int(x) for x in text.split(",") if x]


class Tools(clu.Tools):
    def __init__(self, java, bootstrap):
        super().__init__(java)
        self.b = bootstrap

    def describe(self, topic):
        out = self.run("topics", TOPICS, "--bootstrap-server", self.b, "--describe", "--topic", topic)
        m = re.search(r"Partition:\s*0\s+Leader:\s*(-?\d+)\s+Replicas:\s*([\d,]*)\s+Isr:\s*([\d,]*)", out)
        check(m, f"kafka-topics --describe {topic}: no partition 0 in {out!r}")
        return int(m.group(1)), ids(m.group(2)), ids(m.group(3))

    def reassign(self, json_path, *args):
        return self.run("reassign-partitions", REASSIGN, "--bootstrap-server", self.b,
                        "--reassignment-json-file", json_path, *args)

    def list(self):
        return self.run("reassign-partitions", REASSIGN, "--bootstrap-server", self.b, "--list")

    def configs(self, entity_type, name):
        """{key: value} of kafka-configs --describe (dynamic overrides)."""
        out = self.run("configs", CONFIGS, "--bootstrap-server", self.b, "--describe", "--entity-type",
                       entity_type, "--entity-name", name)
        return dict(re.findall(r"^\s+([a-z.]+)=(\S*) ", out, re.M))


def move_json(root, name, topic, replicas):
    path = os.path.join(root, name)
    with open(path, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}, f)
    return path


def produce_all(port, topic):
    """N records of VALUE_BYTES, acks=all, to topic-0 at port: {offset: value}."""
    acked = {}
    for i in range(0, N, PER_BATCH):
        values = [f"{topic}-{j:06d}-".encode() + b"v" * (VALUE_BYTES - 14) for j in range(i, i + PER_BATCH)]
        blob = lib.record_batch([(None, v, []) for v in values])
        err, base, msg = clu.call(port, lambda c: c.produce(topic, 0, blob, version=3, acks=-1))
        check(err == NONE, f"produce to {topic}-0: error {err} {msg}")
        for k, v in enumerate(values):
            acked[base + k] = v
    return acked


def delete_records(port, topic, offset):
    """Raw DeleteRecords v1 of topic-0 up to offset at port: its new log start."""
    err, low = clu.delete_records(port, topic, 0, offset, 30000)
    check(err == NONE, f"DeleteRecords {topic}-0 to {offset}: error {err}")
    return low


def read_all(port, topic, start=0):
    """{offset: value} of topic-0 from start at port (its leader), and the raw batches."""
    got, batches, offset = {}, [], start
    with lib.Conn(port, timeout=10) as c:
        while True:
            err, hw, blob = c.fetch(topic, 0, offset, max_wait_ms=0)
            check(err == NONE, f"fetch {topic}-0 at {offset} from {port}: error {err}")
            for b in lib.parse_batches(blob):
                check(b["crc_ok"], f"{topic}-0: batch at {b['base_offset']} has a bad CRC")
                batches.append(b["raw"])
                for off, _k, v, _h in lib.decode_records(b["raw"]):
                    got[off] = v
                offset = b["base_offset"] + b["last_offset_delta"] + 1
            if offset >= hw:
                return got, batches


def disk_batches(cl, broker, topic):
    """The batches of topic-0's .log files on broker (offset order), or None without them."""
    files = cl.segments(broker, topic, 0)
    if not files:
        return None
    blob = b"".join(open(f, "rb").read() for f in files)
    out = []
    for b in lib.parse_batches(blob):
        if b["magic"] != 2 or b["length"] < 49 or not b["crc_ok"]:
            break  # the end of what is written (a preallocated or partial tail)
        out.append(b["raw"])
    return out


def list_reassignments(port, topics=None):
    """Raw ListPartitionReassignments v0 through port: {(topic, p): (replicas, adding, removing)}."""
    e = Enc().i32(30000)
    if topics is None:
        e.array_len(None, True)
    else:
        e.array_len(len(topics), True)
        for t, parts in topics:
            e.string(t, True).array_len(len(parts), True)
            for p in parts:
                e.i32(p)
            e.tags()
    e.tags()
    d = clu.call(port, lambda c: c.request(46, 0, e.done(), flexible_req=True))
    d.i32()
    err, msg = d.i16(), d.string(True)
    check(err == NONE, f"ListPartitionReassignments through {port}: error {err} {msg}")
    out = {}
    for _ in range(d.array_len(True)):
        t = d.string(True)
        for _ in range(d.array_len(True)):
            p = d.i32()
            lists = [[d.i32() for _ in range(max(d.array_len(True), 0))] for _ in range(3)]
            d.tags()
            out[(t, p)] = tuple(lists)
        d.tags()
    d.tags()
    return out


def alter_reassignments(port, moves, version=0, allow_rf=True):
    """Raw AlterPartitionReassignments: moves [(topic, p, replicas or None)];
    returns {(topic, p): (error, message)}."""
    e = Enc().i32(30000)
    if version >= 1:
        e.i8(1 if allow_rf else 0)
    e.array_len(len(moves), True)
    for t, p, reps in moves:
        e.string(t, True).array_len(1, True).i32(p).array_len(None if reps is None else len(reps), True)
        for r in reps or []:
            e.i32(r)
        e.tags().tags()
    e.tags()
    d = clu.call(port, lambda c: c.request(45, version, e.done(), flexible_req=True))
    d.i32()
    if version >= 1:
        d.i8()
    top, _msg = d.i16(), d.string(True)
    check(top == NONE, f"AlterPartitionReassignments: top-level error {top}")
    out = {}
    for _ in range(d.array_len(True)):
        t = d.string(True)
        for _ in range(d.array_len(True)):
            p, err, msg = d.i32(), d.i16(), d.string(True)
            d.tags()
            out[(t, p)] = (err, msg)
        d.tags()
    d.tags()
    return out


# ----------------------------------------------------------------- steps

def step_move(cl, tools, root):
    port1 = cl.port(1)
    tools.run("topics", TOPICS, "--bootstrap-server", tools.b, "--create", "--topic", MOVED,
              "--replica-assignment", "1")
    acked = produce_all(port1, MOVED)
    before = clu.wait_for("broker 1's batches on disk", lambda: (
        lambda b: b if b and len(b) == N // PER_BATCH else None)(disk_batches(cl, 1, MOVED)), 20)
    check(delete_records(port1, MOVED, LOG_START) == LOG_START, "DeleteRecords")
    before = [b for b in before if struct.unpack_from(">q", b)[0] >= LOG_START]  # what the leader still serves
    total = sum(len(b) for b in before)
    log(f"{MOVED}-0 on broker 1: {N} records in {N // PER_BATCH} batches, log start {LOG_START}: "
        f"{len(before)} batches, {total} bytes from there")
    plan = move_json(root, "move.json", MOVED, [2, 3])
    t0 = time.monotonic()
    out = tools.reassign(plan, "--execute", "--throttle", str(THROTTLE))
    check(f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out, f"--execute: {out!r}")
    check(f"Successfully started partition reassignment for {MOVED}-0" in out, f"--execute: {out!r}")
    listed = list_reassignments(port1)
    log(f"ListPartitionReassignments right after --execute: {listed}")
    check(listed.get((MOVED, 0)) == ([2, 3, 1], [2, 3], [1]),
          f"{MOVED}-0 not listed as replicas [2,3,1], adding [2,3], removing [1]: {listed}")
    check(list_reassignments(port1, [(MOVED, [0, 5]), ("nope", [0])]) == {(MOVED, 0): ([2, 3, 1], [2, 3], [1])},
          "ListPartitionReassignments of named partitions")
    out = tools.reassign(plan, "--verify")
    check(f"Reassignment of partition {MOVED}-0 is still in progress." in out, f"--verify while moving: {out!r}")
    check("Clearing" not in out, f"--verify cleared the throttles of a move in progress: {out!r}")
    out = tools.list()
    check(f"{MOVED}-0: replicas: 2,3,1. adding: 2,3. removing: 1." in out, f"--list: {out!r}")
    topic_cfg = tools.configs("topics", MOVED)
    check(topic_cfg.get("leader.replication.throttled.replicas") == "0:1" and
          topic_cfg.get("follower.replication.throttled.replicas") == "0:2,0:3",
          f"the topic's throttled replica lists: {topic_cfg}")
    clu.wait_for(f"{MOVED}-0's reassignment to complete", lambda: not list_reassignments(port1), 60, step=0.2)
    took = time.monotonic() - t0
    times["throttled move"] = took
    # Each new follower fetches the partition's bytes under its broker's follower
    # rate: it fetches a whole chunk (replica.fetch.max.bytes, and at most one
    # batch more) whenever the rate over the window is not above THROTTLE, so its
    # last chunk starts no earlier than (total - 2 chunks) / THROTTLE after the first.
    floor = (total - 2 * (FETCH_BYTES + PER_BATCH * VALUE_BYTES)) / THROTTLE * 0.8
    log(f"the move took {took:.2f}s for {total} bytes to each of 2 replicas at {THROTTLE} B/s "
        f"(at least {floor:.2f}s expected)")
    check(took >= floor, f"the move took {took:.2f}s: the throttle did not hold it to {THROTTLE} B/s")
    out = tools.reassign(plan, "--verify")
    check(f"Reassignment of partition {MOVED}-0 is completed." in out, f"--verify: {out!r}")
    check("Clearing broker-level throttles" in out and "Clearing topic-level throttles" in out, f"--verify: {out!r}")
    topic_cfg = tools.configs("topics", MOVED)
    check("leader.replication.throttled.replicas" not in topic_cfg and
          "follower.replication.throttled.replicas" not in topic_cfg, f"throttles left on the topic: {topic_cfg}")
    return acked, before


def step_data_followed(cl, tools, acked, before):
    leader, replicas, isr = clu.wait_for(f"{MOVED}: replicas and ISR [2,3]",
                                         lambda: (lambda d: d if sorted(d[1]) == [2, 3] and sorted(d[2]) == [2, 3]
                                              and d[0] in (2, 3) else None)(tools.describe(MOVED)), 20)
    log(f"kafka-topics --describe {MOVED}: leader {leader}, replicas {replicas}, ISR {isr}")
    for b in (2, 3):
        got = clu.wait_for(f"broker {b}'s batches of {MOVED}-0", lambda: (lambda x: x if x and len(x) >= len(before)
                                                                      else None)(disk_batches(cl, b, MOVED)), 20)
        check(got == before, f"broker {b}'s batches of {MOVED}-0 differ from broker 1's")
    log(f"brokers 2 and 3 hold broker 1's {len(before)} batches from its log start on, byte for byte")
    clu.wait_for(f"broker 1's copy of {MOVED}-0 removed",
                 lambda: not os.path.exists(os.path.join(cl.dir, "broker-1", "data", f"{MOVED}-0")), 20)
    got, batches = read_all(cl.port(leader), MOVED, LOG_START)
    kept = {o: v for o, v in acked.items() if o >= LOG_START}
    check(got == kept, f"the new leader serves {len(got)} records, {len(kept)} acknowledged from the log start")
    check(batches == before, "the new leader's fetched batches differ from broker 1's")
    r = tools.java.run(CONSUMER, "--bootstrap-server", f"127.0.0.1:{cl.port(leader)}", "--topic", MOVED,
                       "--partition", "0", "--offset", "earliest", "--max-messages", str(len(kept)),
                       "--timeout-ms", "30000", timeout=90, heap="-Xmx256m")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and lines == [kept[o].decode() for o in sorted(kept)],
          f"kafka-console-consumer read {len(lines)} records from broker {leader}, {len(kept)} expected: "
          f"{r.stderr[-800:]}")
    log(f"kafka-console-consumer read all {len(kept)} records (offsets {LOG_START}-{N - 1}) from the new leader, "
        f"broker {leader}")


def step_cancel(cl, tools, root):
    port1 = cl.port(1)
    tools.run("topics", TOPICS, "--bootstrap-server", tools.b, "--create", "--topic", CANCELLED,
              "--replica-assignment", "1")
    acked = produce_all(port1, CANCELLED)
    plan = move_json(root, "cancel.json", CANCELLED, [2])
    out = tools.reassign(plan, "--execute", "--throttle", str(CANCEL_THROTTLE))
    check(f"Successfully started partition reassignment for {CANCELLED}-0" in out, f"--execute: {out!r}")
    check(list_reassignments(port1).get((CANCELLED, 0)) == ([2, 1], [2], [1]), f"{CANCELLED}-0 not listed")
    clu.wait_for(f"broker 2 fetching {CANCELLED}-0", lambda: os.path.exists(
        os.path.join(cl.dir, "broker-2", "data", f"{CANCELLED}-0")), 20)
    out = tools.reassign(plan, "--cancel")
    check(f"Successfully cancelled partition reassignment for: {CANCELLED}-0" in out, f"--cancel: {out!r}")
    check(not list_reassignments(port1), "a reassignment still listed after --cancel")
    leader, replicas, isr = tools.describe(CANCELLED)
    check((leader, replicas, isr) == (1, [1], [1]), f"{CANCELLED} after --cancel: {leader} {replicas} {isr}")
    clu.wait_for(f"broker 2's partial copy of {CANCELLED}-0 removed", lambda: not os.path.exists(
        os.path.join(cl.dir, "broker-2", "data", f"{CANCELLED}-0")), 20)
    got, _ = read_all(port1, CANCELLED)
    check(got == acked, f"broker 1 serves {len(got)} records of {CANCELLED} after the cancel, {len(acked)} acknowledged")
    log(f"--cancel reverted {CANCELLED}-0 to [1]; broker 2's copy removed; every record on broker 1")


def step_refusals(cl):
    port = cl.port(2)
    res = alter_reassignments(port, [("nope", 0, [1]), (MOVED, 0, [1, 9]), (CANCELLED, 0, None)])
    check(res[("nope", 0)][0] == UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic: {res}")
    check(res[(MOVED, 0)] == (INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes broker 9, but "
                                                         "no such broker is registered."), f"unregistered broker: {res}")
    check(res[(CANCELLED, 0)] == (NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
          f"cancel with nothing in progress: {res}")
    res = alter_reassignments(port, [(MOVED, 0, [1, 2, 3])], version=1, allow_rf=False)
    check(res[(MOVED, 0)] == (INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3"),
          f"AllowReplicationFactorChange false: {res}")
    check(not list_reassignments(port), "a refused reassignment is listed")
    log("AlterPartitionReassignments refusals: Kafka's errors and messages")
    # Asked directly, only the active controller answers; the others say NOT_CONTROLLER.
    body = Enc().i32(30000).array_len(None, True).tags().done()
    answers = {}
    for ctl in cl.controllers:
        d = clu.call(cl.port(ctl), lambda c: c.request(46, 0, body, flexible_req=True))
        d.i32()
        answers[ctl] = d.i16()
    check(sorted(answers.values()) == [NONE, NOT_CONTROLLER, NOT_CONTROLLER],
          f"ListPartitionReassignments from the controllers: {answers}")
    log(f"ListPartitionReassignments from the controllers themselves: {answers}")


def main():
    java = clients.Java()
    with clu.temp_cluster("sluice-reassign-", lambda root: clu.Cluster(root, BASE_PORT, SETS)) as cl:
        t0 = time.monotonic()
        cl.up_timed(times, brokers=[1, 2, 3])
        tools = Tools(java, cl.env["BOOTSTRAP"])
        acked, before = step_move(cl, tools, cl.root)
        step_data_followed(cl, tools, acked, before)
        step_cancel(cl, tools, cl.root)
        step_refusals(cl)
        cl.down()
        times["total"] = time.monotonic() - t0
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
