#!/usr/bin/env python3
"""A topic deleted and created again under its name at once, on a running cluster,
loses none of the new topic's acknowledged records (issue 13).

Three brokers and three controllers (deploy/local-cluster.sh). Each round deletes the
topic `again` (6 partitions, RF=3) and creates it again, then a confluent-kafka producer
(acks=1, so that a record is acknowledged by its leader alone) writes to every
partition for 2 s; after a pause every acknowledged value must be read back from the
new topic, and no value of an earlier round may show. Before the fix, a broker still
holding the deleted topic's log (its deleted-topic sweep runs about once a second) let
the new topic's leadership and records into it, then removed it: thousands of
acknowledged records per round were lost. Ports 27600-27602, 27700-27705; ~60 s.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402

clients.reexec_in_venv()

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BASE_PORT = 27600
TOPIC, PARTITIONS, ROUNDS = "again", 6, 3
WRITE_S = 2.0
times = {}


def admin_wait(futures, what):
    for name, f in futures.items():
        try:
            f.result(30)
        except ck.KafkaException as e:
            raise AssertionError(f"{what} {name}: {e}") from e


def recreate(admin, first):
    if not first:
        admin_wait(admin.delete_topics([TOPIC], operation_timeout=30), "DeleteTopics")
    admin_wait(admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30), "CreateTopics")


def write(bootstrap, rnd):
    acked, failed = {}, []

    def done(err, m):
        if err is None:
            acked[m.value().decode()] = (m.partition(), m.offset())
        else:
            failed.append(str(err))

    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "message.timeout.ms": 30000,
                     "topic.metadata.refresh.interval.ms": 200, "allow.auto.create.topics": False})
    n, end = 0, time.monotonic() + WRITE_S
    while time.monotonic() < end:
        for q in range(PARTITIONS):
            try:
                p.produce(TOPIC, value=f"{rnd}.{n}".encode(), partition=q, on_delivery=done)
                n += 1
            except BufferError:
                break
        p.poll(0.01)
    left = p.flush(60)
    check(left == 0, f"round {rnd}: {left} values still unanswered after 60 s")
    return n, acked, failed


def read_all(bootstrap, rnd):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"recreate-{rnd}", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(TOPIC, q, ck.OFFSET_BEGINNING) for q in range(PARTITIONS)])
    got, quiet = {}, time.monotonic()
    while time.monotonic() - quiet < 3:
        for m in c.consume(1000, 0.5):
            if m.error():
                continue
            got[m.value().decode()] = (m.partition(), m.offset())
            quiet = time.monotonic()
    c.close()
    return got


def main():
    with clu.temp_cluster("sluice-recreate-", lambda root: fl.Cluster(root, BASE_PORT)) as cl:
        cl.up_timed(times)
        bootstrap = ",".join(f"127.0.0.1:{cl.port(b)}" for b in cl.brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for rnd in range(ROUNDS):
            recreate(admin, rnd == 0)
            sent, acked, failed = write(bootstrap, rnd)
            time.sleep(2.5)  # past the deleted-topic sweep of every broker
            got = read_all(bootstrap, rnd)
            lost = [v for v in acked if v not in got]
            older = [v for v in got if not v.startswith(f"{rnd}.")]
            log(f"round {rnd}: {sent} sent, {len(acked)} acknowledged, {len(failed)} failed, {len(got)} read back, "
                f"{len(lost)} lost, {len(older)} of an earlier topic")
            check(len(acked) > 0, f"round {rnd}: nothing acknowledged ({failed[:3]})")
            check(not lost, f"round {rnd}: {len(lost)} acknowledged values lost, e.g. "
                  f"{[(v, acked[v]) for v in lost[:5]]}")
            check(not older, f"round {rnd}: values of an earlier topic read from the new one: {older[:5]}")
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
