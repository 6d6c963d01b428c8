#!/usr/bin/env python3
"""confluent-kafka-python (its wheel bundles a recent librdkafka) and kafka-python 3.x,
both from PyPI (installed into <cache>/venv on first use; this script re-executes
itself there), against one broker:

For each client:
  admin   create a 3-partition topic with retention.ms set (and a validate-only
          create that must not create anything), list and describe it, describe
          its configs (value and source), alter configs incrementally
          (IncrementalAlterConfigs) and, confluent only, with the legacy
          AlterConfigs (which resets every key it does not name, as Kafka does),
          add partitions, describe the cluster, delete the topic
  produce idempotent producer (enable.idempotence=True) sends 20,000 keyed records
          with explicit, distinct timestamps; every delivery acknowledged
  consume no group joined: assign partitions from the beginning and read all back
          (each exactly once, in order), seek to an offset and read from there,
          offsets_for_times for a timestamp in the middle, before the first record
          and after the last, and the watermark / beginning / end offsets
"""
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402

clients.reexec_in_venv()
warnings.filterwarnings("ignore", category=DeprecationWarning)  # legacy alter_configs on purpose

import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = int(os.environ.get("SLUICE_PY_RECORDS", "20000"))
PARTITIONS = 3
# Timestamps well in the past (Kafka accepts any past timestamp by default) and
# 10 ms apart, so each record has its own.
BASE_TS = (int(time.time() * 1000) - 24 * 3600 * 1000) // 1000 * 1000
STEP = 10


def ts_of(i):
    return BASE_TS + i * STEP


def check_consumed(name, rows, n=N):
    """rows: [(partition, offset, key, value, timestamp)] -> per-partition lists."""
    seen = set()
    per = {}
    for p, off, k, v, ts in rows:
        check(k.startswith(b"k-"), f"{name}: bad key {k!r}")
        i = int(k[2:])
        check(0 <= i < n, f"{name}: unknown key {k!r}")
        check(i not in seen, f"{name}: key {k!r} consumed twice")
        seen.add(i)
        check(v == b"value-%d" % i, f"{name}: value of {k!r} is {v[:40]!r}")
        check(ts == ts_of(i), f"{name}: timestamp of {k!r} is {ts}, want {ts_of(i)}")
        per.setdefault(p, []).append((off, i, ts))
    check(len(seen) == n, f"{name}: consumed {len(seen)} distinct records, want {n}")
    for p, lst in per.items():
        check([o for o, _, _ in lst] == list(range(len(lst))),
              f"{name}: partition {p} offsets not contiguous from 0")
        check(all(a[1] < b[1] for a, b in zip(lst, lst[1:])), f"{name}: partition {p} out of order")
    check(sorted(per) == list(range(PARTITIONS)), f"{name}: records in partitions {sorted(per)}")
    return per


def expected_offset_for_time(per, p, t):
    for off, _, ts in per[p]:
        if ts >= t:
            return off
    return None


def check_idempotent_batches(name, broker, topic):
    """The stored batches carry a producer id: the producer really was idempotent."""
    with lib.Conn(broker.port) as c:
        err, hw, blob = c.fetch(topic, 0, 0, max_bytes=64 << 10)
    check(err == 0, f"{name}: raw fetch of {topic}[0]: error {err}")
    pids = {b["producer_id"] for b in lib.parse_batches(blob)}
    check(pids and all(p >= 0 for p in pids), f"{name}: stored batches have producer ids {pids}, "
          "want a real one (enable.idempotence)")


def wait_until(what, fn, timeout=30):
    deadline = time.monotonic() + timeout
    while not fn():
        check(time.monotonic() < deadline, f"timed out waiting until {what}")
        time.sleep(0.2)


# --------------------------------------------------------------------- confluent-kafka

def confluent(broker):
    import confluent_kafka as ck
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       NewPartitions, NewTopic, ConfigSource)
    ver = ck.version()
    log(f"confluent-kafka {ver[0] if isinstance(ver, tuple) else ver}, librdkafka {ck.libversion()[0]}")
    conf = {"bootstrap.servers": broker.bootstrap}
    admin = AdminClient(conf)
    topic, data = "ck-admin", "ck-data"
    R = ConfigResource.Type.TOPIC if hasattr(ConfigResource, "Type") else "topic"

    def result(fs, what):
        out = {}
        for k, f in fs.items():
            try:
                out[k] = f.result(timeout=30)
            except KafkaException as e:
                raise lib.TestFailure(f"confluent {what} {k}: {e.args[0]}") from e
        return out

    def topic_configs(name):
        res = result(admin.describe_configs([ConfigResource(R, name)]), "describe_configs")
        return next(iter(res.values()))

    def configs_once(name, key, value):
        """Kafka applies an alter through its metadata log: wait until describe shows it."""
        wait_until(f"{key}={value} is described",
                   lambda: topic_configs(name)[key].value == value, timeout=15)
        return topic_configs(name)

    # validate-only create: nothing is created.
    result(admin.create_topics([NewTopic("ck-validate", PARTITIONS, 1)], validate_only=True),
           "create_topics(validate_only)")
    result(admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"retention.ms": "3600000"}),
                                NewTopic(data, PARTITIONS, 1)]), "create_topics")
    wait_until(f"{topic} is listed", lambda: topic in admin.list_topics(timeout=10).topics)
    md = admin.list_topics(timeout=10)
    check("ck-validate" not in md.topics, "confluent: validate_only create_topics created the topic")
    check(len(md.topics[topic].partitions) == PARTITIONS,
          f"confluent list_topics: {len(md.topics[topic].partitions)} partitions")
    desc = result(admin.describe_topics(ck.TopicCollection([topic])), "describe_topics")[topic]
    check(len(desc.partitions) == PARTITIONS and all(p.leader is not None and p.leader.id == 1
                                                     for p in desc.partitions),
          f"confluent describe_topics: {desc.partitions}")
    check(desc.topic_id is not None and str(desc.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA"),
          f"confluent describe_topics: topic id {desc.topic_id}")

    defaults = topic_configs(data)  # no overrides: the broker's defaults
    cfg = topic_configs(topic)
    check(cfg["retention.ms"].value == "3600000"
          and cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
          f"confluent describe_configs retention.ms: {cfg['retention.ms']}")
    check(cfg["cleanup.policy"].value == "delete", f"cleanup.policy {cfg['cleanup.policy'].value}")
    check(cfg["max.message.bytes"].value == "1048588", f"max.message.bytes {cfg['max.message.bytes'].value}")
    check(cfg["segment.bytes"].value == defaults["segment.bytes"].value
          and defaults["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value,
          f"segment.bytes {cfg['segment.bytes']}, default {defaults['segment.bytes']}")

    # IncrementalAlterConfigs: SET one key, the other stays.
    res = ConfigResource(R, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "10485760", incremental_operation=AlterConfigOpType.SET)])
    result(admin.incremental_alter_configs([res]), "incremental_alter_configs")
    cfg = configs_once(topic, "segment.bytes", "10485760")
    check(cfg["segment.bytes"].value == "10485760", f"segment.bytes after incremental alter: {cfg['segment.bytes']}")
    check(cfg["retention.ms"].value == "3600000", f"incremental alter changed retention.ms: {cfg['retention.ms']}")
    res = ConfigResource(R, topic, incremental_configs=[
        ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    result(admin.incremental_alter_configs([res]), "incremental_alter_configs(DELETE)")
    cfg = configs_once(topic, "segment.bytes", defaults["segment.bytes"].value)
    check( cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value,
          f"segment.bytes after DELETE: {cfg['segment.bytes']}")
    # Legacy AlterConfigs replaces the whole set: retention.ms goes back to default.
    res = ConfigResource(R, topic, set_config={"max.message.bytes": "2000000"})
    result(admin.alter_configs([res]), "alter_configs")
    cfg = configs_once(topic, "max.message.bytes", "2000000")
    check(cfg["max.message.bytes"].value == "2000000", f"max.message.bytes after alter_configs: {cfg['max.message.bytes']}")
    check(cfg["retention.ms"].value == defaults["retention.ms"].value
          and cfg["retention.ms"].source == defaults["retention.ms"].source,
          f"legacy alter_configs must reset retention.ms to the default: {cfg['retention.ms']}")

    result(admin.create_partitions([NewPartitions(topic, 5)]), "create_partitions")
    wait_until(f"{topic} has 5 partitions",
               lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5)
    cl = admin.describe_cluster().result(timeout=30)
    check(len(cl.nodes) == 1 and cl.nodes[0].id == 1 and cl.nodes[0].port == broker.port
          and cl.controller is not None and cl.cluster_id,
          f"confluent describe_cluster: nodes {cl.nodes}, controller {cl.controller}, id {cl.cluster_id}")
    result(admin.delete_topics([topic]), "delete_topics")
    wait_until(f"{topic} is gone", lambda: topic not in admin.list_topics(timeout=10).topics)
    log("confluent admin: create/validate/list/describe/configs/alter/partitions/cluster/delete ok")

    # Idempotent producer.
    p = Producer({**conf, "enable.idempotence": True, "linger.ms": 5})
    acked, errors = [], []

    def dr(err, msg):
        (errors if err else acked).append((err, msg.partition(), msg.offset()))
    t0 = time.monotonic()
    for i in range(N):
        while True:
            try:
                p.produce(data, key=b"k-%06d" % i, value=b"value-%d" % i, timestamp=ts_of(i), on_delivery=dr)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    check(left == 0, f"confluent producer: {left} messages not delivered after flush")
    check(not errors, f"confluent producer: {len(errors)} delivery errors, first {errors[:1]}")
    check(len(acked) == N, f"confluent producer: {len(acked)} acks")
    check(len({(a[1], a[2]) for a in acked}) == N, "confluent producer: two acks with the same offset")
    check_idempotent_batches("confluent", broker, data)
    log(f"confluent idempotent producer: {N} acked in {time.monotonic() - t0:.1f}s")

    # Consumer: group.id is mandatory in confluent-kafka, but assign() joins no group.
    c = Consumer({**conf, "group.id": "sluice-ck-assign", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(data, i, ck.OFFSET_BEGINNING) for i in range(PARTITIONS)])
        rows, eof = [], set()
        deadline = time.monotonic() + 60
        while len(eof) < PARTITIONS:
            check(time.monotonic() < deadline, f"confluent consumer: {len(rows)} records after 60 s")
            for m in c.consume(1000, timeout=1):
                if m.error():
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise lib.TestFailure(f"confluent consumer error: {m.error()}")
                rows.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
                check(m.timestamp()[0] == ck.TIMESTAMP_CREATE_TIME, "timestamp type is not CreateTime")
        per = check_consumed("confluent", rows)

        lo, hi = c.get_watermark_offsets(TopicPartition(data, 0), timeout=10)
        check(lo == 0 and hi == len(per[0]), f"confluent watermarks of partition 0: {lo}, {hi}")

        # seek into the middle of partition 1
        mid = len(per[1]) // 2
        c.seek(TopicPartition(data, 1, mid))
        m = None
        deadline = time.monotonic() + 30
        while m is None or m.error() or m.partition() != 1:
            check(time.monotonic() < deadline, "confluent consumer: nothing after seek")
            m = c.poll(1)
        check(m.offset() == mid and int(m.key()[2:]) == per[1][mid][1],
              f"confluent seek to {mid}: got offset {m.offset()} key {m.key()!r}")

        # offsets_for_times: middle, before the first and after the last record
        t_mid = ts_of(N // 2) + 1
        tps = [TopicPartition(data, i, t_mid) for i in range(PARTITIONS)]
        got = c.offsets_for_times(tps, timeout=10)
        for tp in got:
            want = expected_offset_for_time(per, tp.partition, t_mid)
            check(tp.error is None and tp.offset == (want if want is not None else -1),
                  f"confluent offsets_for_times({t_mid}) partition {tp.partition}: {tp.offset}, want {want}")
        got = c.offsets_for_times([TopicPartition(data, 0, BASE_TS - 1000)], timeout=10)
        check(got[0].offset == 0, f"confluent offsets_for_times(before first): {got[0].offset}")
        got = c.offsets_for_times([TopicPartition(data, 0, ts_of(N) + 1000)], timeout=10)
        check(got[0].offset == -1, f"confluent offsets_for_times(after last): {got[0].offset}, want -1 (end)")
    finally:
        c.close()
    log("confluent consumer: assign/seek/offsets_for_times/watermarks ok")
    log_append_time(broker, conf, admin, result)


def log_append_time(broker, conf, admin, result):
    """message.timestamp.type=LogAppendTime: the broker stamps each batch with its own
    clock, whatever the producer set; the producer's delivery report and the consumer
    both see that time with type LogAppendTime (the same checks pass against Kafka)."""
    import confluent_kafka as ck
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic
    topic = "ck-log-append-time"
    result(admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})]),
           "create_topics(LogAppendTime)")
    wait_until(f"{topic} is listed", lambda: topic in admin.list_topics(timeout=10).topics)
    p = Producer({**conf, "linger.ms": 5, "compression.type": "lz4"})
    reports = []
    before = int(time.time() * 1000)
    for i in range(50):
        p.produce(topic, key=b"lat-%d" % i, value=b"v" * 100, timestamp=BASE_TS,
                  on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
    check(p.flush(30) == 0 and len(reports) == 50, f"LogAppendTime producer: {len(reports)} reports")
    after = int(time.time() * 1000)
    for err, (ttype, ts) in reports:
        check(err is None, f"LogAppendTime produce error {err}")
        check(ttype == ck.TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000,
              f"delivery report timestamp ({ttype}, {ts}), want LogAppendTime in [{before}, {after}]")
    c = Consumer({**conf, "group.id": "sluice-ck-lat", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 50:
            check(time.monotonic() < deadline, f"LogAppendTime consumer: {len(got)} records")
            for m in c.consume(100, timeout=1):
                if not m.error():
                    got.append(m.timestamp())
        check(all(t == ck.TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000 for t, ts in got),
              f"consumed timestamps {got[:3]}: want LogAppendTime in [{before}, {after}], not {BASE_TS}")
        # offsets_for_times follows the broker's time, not the producer's
        tp = c.offsets_for_times([TopicPartition(topic, 0, before - 1000)], timeout=10)[0]
        check(tp.offset == 0, f"offsets_for_times(before the appends): {tp.offset}")
        tp = c.offsets_for_times([TopicPartition(topic, 0, BASE_TS)], timeout=10)[0]
        check(tp.offset == 0, f"offsets_for_times(producer's old timestamp): {tp.offset}")
    finally:
        c.close()
    log("confluent: LogAppendTime topic stamps batches with the broker's time")


# --------------------------------------------------------------------- kafka-python

def kafka_python(broker):
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    log(f"kafka-python {kafka.__version__}")
    topic, data = "kp-admin", "kp-data"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        log(f"kafka-python infers broker version {admin.get_broker_version_data(1)} from ApiVersions")
        r = admin.create_topics({"kp-validate": {"num_partitions": PARTITIONS, "replication_factor": 1}},
                                validate_only=True)
        r = admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1,
                                         "configs": {"retention.ms": "3600000"}},
                                 data: {"num_partitions": PARTITIONS, "replication_factor": 1}})
        check(all(t["error_code"] == 0 for t in r["topics"]), f"kafka-python create_topics: {r}")
        admin.wait_for_topics([topic, data], timeout_ms=30000)
        names = admin.list_topics()
        check(topic in names and data in names and "kp-validate" not in names,
              f"kafka-python list_topics: {names}")
        d = admin.describe_topics([topic])
        check(len(d) == 1 and d[0]["error_code"] == 0 and len(d[0]["partitions"]) == PARTITIONS
              and all(p["leader_id"] == 1 for p in d[0]["partitions"]),
              f"kafka-python describe_topics: {d}")

        def topic_configs(name=topic):
            res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)],
                                         config_filter="all")
            return res["topic"][name]

        def configs_once(key, value):
            wait_until(f"{key}={value} is described", lambda: topic_configs()[key]["value"] == value, timeout=15)
            return topic_configs()
        defaults = topic_configs(data)
        cfg = topic_configs()
        check(cfg["retention.ms"]["value"] == "3600000" and cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG",
              f"kafka-python describe_configs retention.ms: {cfg.get('retention.ms')}")
        check(cfg["cleanup.policy"]["value"] == "delete", f"cleanup.policy: {cfg.get('cleanup.policy')}")
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                            configs={"retention.ms": "7200000"})])
        cfg = configs_once("retention.ms", "7200000")
        check(cfg["retention.ms"]["value"] == "7200000", f"kafka-python after alter_configs: {cfg['retention.ms']}")
        admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=["retention.ms"])])
        cfg = configs_once("retention.ms", defaults["retention.ms"]["value"])
        check(cfg["retention.ms"]["config_source"] == defaults["retention.ms"]["config_source"],
              f"kafka-python after reset_configs: {cfg['retention.ms']}")
        admin.create_partitions({topic: 4})
        wait_until(f"{topic} has 4 partitions",
                   lambda: len(admin.describe_topics([topic])[0]["partitions"]) == 4)
        cl = admin.describe_cluster()
        check(len(cl["brokers"]) == 1 and cl["brokers"][0]["broker_id"] == 1
              and cl["brokers"][0]["port"] == broker.port and cl.get("cluster_id"),
              f"kafka-python describe_cluster: {cl}")
        r = admin.delete_topics([topic])
        wait_until(f"{topic} is gone", lambda: topic not in admin.list_topics())
        log("kafka-python admin: create/validate/list/describe/configs/alter/reset/partitions/cluster/delete ok")
    finally:
        admin.close()

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=5)
    t0 = time.monotonic()
    futs = [p.send(data, key=b"k-%06d" % i, value=b"value-%d" % i, timestamp_ms=ts_of(i)) for i in range(N)]
    p.flush(timeout=60)
    mds = [f.get(timeout=30) for f in futs]
    p.close(timeout=10)
    check(len({(m.partition, m.offset) for m in mds}) == N, "kafka-python producer: two acks with the same offset")
    check_idempotent_batches("kafka-python", broker, data)
    log(f"kafka-python idempotent producer: {N} acked in {time.monotonic() - t0:.1f}s")

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(data, i) for i in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        begins = c.beginning_offsets(tps)
        check(all(v == 0 for v in begins.values()) and sum(ends.values()) == N,
              f"kafka-python beginning/end offsets: {begins} {ends}")
        rows = []
        deadline = time.monotonic() + 60
        while any(c.position(tp) < ends[tp] for tp in tps):
            check(time.monotonic() < deadline, f"kafka-python consumer: {len(rows)} records after 60 s")
            for tp, msgs in c.poll(timeout_ms=1000, max_records=5000).items():
                rows += [(m.partition, m.offset, m.key, m.value, m.timestamp) for m in msgs]
        per = check_consumed("kafka-python", rows)

        mid = len(per[2]) // 2
        c.seek(tps[2], mid)
        got = []
        deadline = time.monotonic() + 30
        while not got:
            check(time.monotonic() < deadline, "kafka-python consumer: nothing after seek")
            got = c.poll(timeout_ms=1000, max_records=1).get(tps[2], [])
        check(got[0].offset == mid and int(got[0].key[2:]) == per[2][mid][1],
              f"kafka-python seek to {mid}: got offset {got[0].offset}")

        t_mid = ts_of(N // 3) + 1
        res = c.offsets_for_times({tp: t_mid for tp in tps})
        for tp in tps:
            want = expected_offset_for_time(per, tp.partition, t_mid)
            got_off = res[tp].offset if res[tp] is not None else None
            check(got_off == want, f"kafka-python offsets_for_times({t_mid}) partition {tp.partition}: "
                  f"{res[tp]}, want offset {want}")
            check(res[tp] is None or res[tp].timestamp >= t_mid, f"kafka-python offsets_for_times timestamp {res[tp]}")
        res = c.offsets_for_times({tps[0]: ts_of(N) + 1000})
        check(res[tps[0]] is None, f"kafka-python offsets_for_times(after last): {res[tps[0]]}, want None")
    finally:
        c.close()
    log("kafka-python consumer: assign/seek/offsets_for_times/beginning/end offsets ok")


def test():
    with lib.Broker("python-clients") as broker:
        confluent(broker)
        kafka_python(broker)


if __name__ == "__main__":
    lib.main(test)
