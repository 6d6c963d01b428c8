#!/usr/bin/env python3
"""Manual replica assignments in a cluster, and the adoption of a single-node data
directory, with real processes: one sluice-controller (node 100) and sluice-brokers in
cluster mode (nodes 1 and 2), driven with Kafka's own kafka-topics and the raw protocol.

Proves:
- adoption: a broker that ran alone (no controller.quorum.voters) with a 3-partition
  topic and records in it, restarted in cluster mode on the same data directory, puts
  the topic into the cluster with the same topic id, every partition on itself
  (kafka-topics --describe: Leader 1, Replicas 1, Isr 1), and every record produced
  before reads back at its offset;
- kafka-topics --create --replica-assignment 2,1,2 places partitions 0..2 on brokers
  2, 1, 2 (kafka-topics --describe and Metadata from both brokers agree), and each
  leader takes and serves a record;
- kafka-topics --alter --partitions 5 --replica-assignment 2,1,2,1,1 puts the two new
  partitions on broker 1;
- CreateTopics through a broker with PartitionIndex out of order places by index;
  Kafka's refusals come back with Kafka's errors and messages: an unregistered broker
  (INVALID_REPLICA_ASSIGNMENT), a replication factor above the brokers registered
  (INVALID_REPLICATION_FACTOR), NumPartitions set beside an assignment (INVALID_REQUEST).

Ports 32000-32099 on 127.0.0.1.
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import controller_basic as cb  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

CONTROLLER_ID, CONTROLLER_PORT = 100, 32000  # its Raft port is the next one
BROKER_PORTS = {1: 32010, 2: 32011}
TOPICS = "org.apache.kafka.tools.TopicCommand"
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST = 38, 39, 42


def cluster_props(node_id):
    return {
        "node.id": node_id,
        "process.roles": "broker",
        "controller.quorum.voters": cb.voters_string([(CONTROLLER_ID, CONTROLLER_PORT)]),
        "cluster.id": cb.CLUSTER_ID,
        "sluice.controller.shutdown.wait.ms": 5000,
    }


def make_broker(name, node_id, props=None):
    b = lib.Broker(name, props)
    b.port = BROKER_PORTS[node_id]
    b.bootstrap = f"127.0.0.1:{b.port}"
    return b


def create_topics(port, topics, version=7):
    """Raw CreateTopics: topics [(name, partitions, rf, [(index, [brokers])])].
    Returns {name: (error, message, topic id)}."""
    flex = version >= 5
    e = Enc().array_len(len(topics), flex)
    for name, parts, rf, assignment in topics:
        e.string(name, flex).i32(parts).i16(rf).array_len(len(assignment), flex)
        for index, brokers in assignment:
            e.i32(index).array_len(len(brokers), flex)
            for b in brokers:
                e.i32(b)
            if flex:
                e.tags()
        e.array_len(0, flex)  # configs
        if flex:
            e.tags()
    e.i32(30000).i8(0)
    if flex:
        e.tags()
    with lib.Conn(port) as c:
        d = c.request(19, version, e.done(), flexible_req=flex)
    d.i32()
    out = {}
    for _ in range(d.array_len(flex)):
        name = d.string(flex)
        tid = d._take(16) if version >= 7 else None
        err, msg = d.i16(), d.string(flex)
        if version >= 5:
            d.i32(), d.i16()
            for _ in range(max(d.array_len(flex), 0)):
                d.string(flex), d.string(flex), d.i8(), d.i8(), d.i8()
                d.tags()
        if flex:
            d.tags()
        out[name] = (err, msg, tid)
    return out


def leaders(port, topic):
    """{partition: leader} from Metadata through the broker at port."""
    with lib.Conn(port) as c:
        _, topics = c.metadata([topic], auto_create=False)
    terr, parts = topics.get(topic, (-1, {}))
    check(terr == 0, f"Metadata of {topic} from {port}: error {terr}")
    return {p: leader for p, (perr, leader) in parts.items()}


def produce_values(port, topic, partition, values):
    with lib.Conn(port) as c:
        err, base, msg = c.produce(topic, partition, lib.record_batch([(None, v, []) for v in values]))
    check(err == 0, f"produce to {topic}-{partition} through {port}: error {err} {msg}")
    return base


def read_values(port, topic, partition):
    """Every value of the partition from offset 0, with its offset."""
    out, offset = [], 0
    with lib.Conn(port) as c:
        while True:
            err, hw, blob = c.fetch(topic, partition, offset)
            check(err == 0, f"fetch {topic}-{partition} at {offset} through {port}: error {err}")
            for batch in lib.parse_batches(blob):
                for off, _k, v, _h in lib.decode_records(batch["raw"]):
                    if off >= offset:
                        out.append((off, v))
                offset = batch["base_offset"] + batch["last_offset_delta"] + 1
            if offset >= hw:
                return out


class Tools:
    def __init__(self, java, port):
        self.java = java
        self.bootstrap = f"127.0.0.1:{port}"

    def run(self, *args, ok=True):
        log(f"$ kafka-topics {' '.join(args)}")
        r = self.java.run(TOPICS, "--bootstrap-server", self.bootstrap, *args, timeout=120, heap="-Xmx256m")
        out = (r.stdout.strip() + "\n" + r.stderr.strip()).strip()
        if out:
            print("\n".join("    " + ln for ln in out.splitlines()[:12]), flush=True)
        if ok:
            check(r.returncode == 0, f"kafka-topics {' '.join(args)} exited {r.returncode}:\n"
                  f"{r.stdout[-1500:]}\n{r.stderr[-3000:]}")
        return r

    def describe(self, topic):
        """(topic id, {partition: (leader, replicas, isr)})."""
        r = self.run("--describe", "--topic", topic)
        m = re.search(r"Topic: " + re.escape(topic) + r"\s+TopicId: (\S+)\s+PartitionCount: (\d+)", r.stdout)
        check(m, f"kafka-topics --describe: no summary line for {topic} in {r.stdout!r}")
        parts = {int(p): (int(leader), replicas, isr) for p, leader, replicas, isr in
                 re.findall(r"Partition: (\d+)\s+Leader: (-?\d+)\s+Replicas: (\S+)\s+Isr: (\S+)", r.stdout)}
        check(len(parts) == int(m.group(2)), f"kafka-topics --describe {topic}: {r.stdout!r}")
        return m.group(1), parts


def uuid_base64(raw):
    import base64
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def adoption(root, b1):
    """b1 runs alone, gets a topic with records, then joins the cluster on its data."""
    b1.start()
    res = create_topics(b1.port, [("legacy", 3, 1, [])])
    err, msg, tid = res["legacy"]
    check(err == 0, f"single-node CreateTopics legacy: {err} {msg}")
    written = {}
    for p in range(3):
        values = [f"legacy-{p}-{i}".encode() for i in range(20)]
        produce_values(b1.port, "legacy", p, values[:10])
        produce_values(b1.port, "legacy", p, values[10:])
        written[p] = list(enumerate(values))
    log(f"single-node broker: topic legacy ({uuid_base64(tid)}), 3 x 20 records")
    check(b1.stop() == 0, "single-node broker stop")

    ctl = cb.Controller(root, CONTROLLER_ID, CONTROLLER_PORT, cb.voters_string([(CONTROLLER_ID, CONTROLLER_PORT)]))
    ctl.start()
    cb.find_leader([CONTROLLER_PORT])
    b1.props.update(cluster_props(1))
    b1.start()
    check("adoption" in b1.log_tail(200), f"no adoption in the broker's log:\n{b1.log_tail()}")
    return ctl, tid, written


def check_adopted(tools, b1, tid, written):
    topic_id, parts = tools.describe("legacy")
    check(topic_id == uuid_base64(tid), f"adopted topic id {topic_id}, was {uuid_base64(tid)}")
    check(parts == {p: (1, "1", "1") for p in range(3)}, f"adopted partitions: {parts}")
    for p in range(3):
        got = read_values(b1.port, "legacy", p)
        check(got == written[p], f"legacy-{p} after adoption: {got[:3]}... ({len(got)} records), "
              f"want {len(written[p])}")
    log("adopted: same topic id, every partition on broker 1, all 60 records read back")


def assignments(tools, b1, b2):
    tools.run("--create", "--topic", "placed", "--replica-assignment", "2,1,2")
    _, parts = tools.describe("placed")
    want = {0: (2, "2", "2"), 1: (1, "1", "1"), 2: (2, "2", "2")}
    check(parts == want, f"kafka-topics --describe placed: {parts}, want {want}")
    for b in (b1, b2):
        got = leaders(b.port, "placed")
        check(got == {0: 2, 1: 1, 2: 2}, f"Metadata through broker {b.name}: leaders {got}")
    ports = {1: b1.port, 2: b2.port}
    for p, (leader, _, _) in want.items():
        base = produce_values(ports[leader], "placed", p, [f"placed-{p}".encode()])
        got = read_values(ports[leader], "placed", p)
        check(base == 0 and got == [(0, f"placed-{p}".encode())], f"placed-{p} on broker {leader}: {got}")
    log("--replica-assignment 2,1,2: partitions on 2, 1, 2; each leader serves its partition")

    tools.run("--alter", "--topic", "placed", "--partitions", "5", "--replica-assignment", "2,1,2,1,1")
    _, parts = tools.describe("placed")
    want.update({3: (1, "1", "1"), 4: (1, "1", "1")})
    check(parts == want, f"after --alter --partitions 5: {parts}, want {want}")
    log("--alter --partitions 5 --replica-assignment 2,1,2,1,1: new partitions on 1, 1")

    r = tools.run("--create", "--topic", "nowhere", "--replica-assignment", "1,9", ok=False)
    text = r.stdout + r.stderr
    check(r.returncode != 0 and "InvalidReplicaAssignmentException" in text
          and "no such broker is registered" in text, f"--replica-assignment 1,9: exit {r.returncode}\n{text[-2000:]}")
    r = tools.run("--create", "--topic", "thrice", "--partitions", "1", "--replication-factor", "3", ok=False)
    text = r.stdout + r.stderr
    check(r.returncode != 0 and "InvalidReplicationFactorException" in text
          and "only 2 broker(s) are registered" in text, f"--replication-factor 3: exit {r.returncode}\n"
          f"{text[-2000:]}")

    res = create_topics(b2.port, [("indexed", -1, -1, [(1, [1]), (0, [2])]),
                                  ("both", 2, -1, [(0, [1]), (1, [2])]),
                                  ("unknown", -1, -1, [(0, [1]), (1, [7])])])
    check(res["indexed"][0] == 0, f"CreateTopics indexed: {res['indexed']}")
    check(leaders(b1.port, "indexed") == {0: 2, 1: 1}, f"indexed: {leaders(b1.port, 'indexed')}")
    check(res["both"][0] == INVALID_REQUEST and "numPartitions" in (res["both"][1] or ""),
          f"CreateTopics with NumPartitions and an assignment: {res['both']}")
    check(res["unknown"][0] == INVALID_REPLICA_ASSIGNMENT and "broker 7" in (res["unknown"][1] or ""),
          f"CreateTopics naming broker 7: {res['unknown']}")
    log("raw CreateTopics: PartitionIndex order honoured; Kafka's refusals with Kafka's messages")


def test():
    if lib.TARGET != "sluice":
        lib.skip("a Sluice cluster (sluice-controller and brokers in cluster mode): nothing to run against "
                 "the single reference Kafka broker")
    java = clients.Java()
    root = tempfile.mkdtemp(prefix="sluice-it-cluster-assign-")
    b1 = make_broker("assign-b1", 1)
    b2 = make_broker("assign-b2", 2, cluster_props(2))
    ctl = None
    failed = True
    try:
        ctl, tid, written = adoption(root, b1)
        tools = Tools(java, b1.port)
        check_adopted(tools, b1, tid, written)
        b2.start()
        assignments(tools, b1, b2)
        check(b2.stop() == 0 and b1.stop() == 0, "brokers stop cleanly")
        check(ctl.stop() == 0, "controller stops cleanly")
        failed = False
    finally:
        if failed and ctl is not None:
            log(f"--- controller log ---\n{ctl.log_tail(40)}")
        b2.cleanup(failed)
        b1.cleanup(failed)
        cb._cleanup()
        if failed or os.environ.get("SLUICE_TEST_KEEP"):
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    lib.main(test)
