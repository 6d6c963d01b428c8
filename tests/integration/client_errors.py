#!/usr/bin/env python3
"""Every client against a bad configuration gets the error Apache Kafka sends.

Broker: auto.create.topics.enable=false, message.max.bytes=100000; topic `errs`
(1 partition, created with CreateTopics) holds 10 records (offsets 0-9); topic
`errs-small` has the topic config max.message.bytes=20000.

Protocol level first (raw requests, as Kafka answers them):
  Metadata for an unknown topic           UNKNOWN_TOPIC_OR_PARTITION (3)
  Produce of a 200,000-byte batch         MESSAGE_TOO_LARGE (10)
  Produce of 30,000 bytes to errs-small   MESSAGE_TOO_LARGE (10); to errs: accepted
  Fetch at offset 1000                    OFFSET_OUT_OF_RANGE (1)

Then each client, with what it shows its user for the same three situations:
  Java (kafka-clients 4.1)   producer to an unknown topic: TimeoutException "not present
                             in metadata" after logging UNKNOWN_TOPIC_OR_PARTITION;
                             Admin.describeTopics: UnknownTopicOrPartitionException;
                             200 kB record (30 kB to errs-small):
                             RecordTooLargeException; consumer
                             assign+seek(1000): auto.offset.reset=none throws
                             OffsetOutOfRangeException, earliest restarts at 0,
                             latest at 10
  franz-go                   UNKNOWN_TOPIC_OR_PARTITION (produce and kadm),
                             MESSAGE_TOO_LARGE (also 30 kB to errs-small),
                             OFFSET_OUT_OF_RANGE with
                             NoResetOffset, offset 0 with reset AtStart
  confluent-kafka            delivery report / admin error UNKNOWN_TOPIC_OR_PART,
                             MSG_SIZE_TOO_LARGE, consumer error _AUTO_OFFSET_RESET
                             "Offset out of range" with auto.offset.reset=error,
                             offset 0 with earliest
  kafka-python               KafkaTimeoutError (metadata) for the unknown topic,
                             UnknownTopicOrPartitionError from the admin client,
                             MessageSizeTooLargeError, OffsetOutOfRangeError with
                             auto_offset_reset=none, offset 0 with earliest

Every check runs and the failures are listed together at the end. A client that
cannot be installed is skipped (the test skips only if none can be).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import log  # noqa: E402

TOPIC = "errs"
SMALL_TOPIC = "errs-small"  # topic-level max.message.bytes=SMALL_MAX
SMALL_MAX = 20000
MID = 30000  # fits message.max.bytes, not the topic's max.message.bytes
UNKNOWN = "no-such-topic"
MAX = 100000
BIG = 200000
RECORDS = 10
END = RECORDS + 1  # raw_checks appends one more record to errs
FAR = 1000

results = []  # (client, what, ok, detail)


def record(client, what, ok, detail=""):
    results.append((client, what, ok, detail))
    log(f"{'ok  ' if ok else 'FAIL'} {client}: {what}" + ("" if ok else f" -- {detail}"))


# --------------------------------------------------------------------- raw protocol

def create_topic_raw(port, topic, partitions, configs=None):
    """CreateTopics v4 (non-flexible): returns the topic's error code."""
    e = lib.Enc().array_len(1).string(topic).i32(partitions).i16(1).array_len(0)
    e.array_len(len(configs or {}))
    for k, v in (configs or {}).items():
        e.string(k).string(str(v))
    e.i32(30000).i8(0)
    with lib.Conn(port, timeout=40) as c:
        d = c.request(19, 4, e.done())
        d.i32()
        err = None
        for _ in range(d.array_len()):
            d.string()
            err = d.i16()
            d.string()
    return err


def raw_checks(broker):
    c = "protocol"
    with lib.Conn(broker.port) as conn:
        _, topics = conn.metadata([UNKNOWN], auto_create=True)
        err = topics.get(UNKNOWN, (None,))[0]
        record(c, "Metadata v4 of an unknown topic (allow_auto_topic_creation=true, broker auto-create "
               "off) -> UNKNOWN_TOPIC_OR_PARTITION (3)", err == 3, f"error {err}")
        big = lib.record_batch([(b"k", os.urandom(BIG), [])])
        res = conn.produce(TOPIC, 0, big, version=7)
        record(c, f"Produce v7 of a {len(big)}-byte batch (message.max.bytes={MAX}) -> MESSAGE_TOO_LARGE (10)",
               res and res[0] == 10, f"result {res}")
        mid = lib.record_batch([(b"k", os.urandom(MID), [])])
        res = conn.produce(SMALL_TOPIC, 0, mid, version=7)
        record(c, f"Produce v7 of a {len(mid)}-byte batch to a topic with max.message.bytes={SMALL_MAX} "
               "-> MESSAGE_TOO_LARGE (10)", res and res[0] == 10, f"result {res}")
        res = conn.produce(TOPIC, 0, mid, version=7)
        record(c, "Produce v7 of the same batch to a topic without that override -> accepted",
               res and res[0] == 0, f"result {res}")
        res = conn.fetch(TOPIC, 0, FAR, version=4)
        record(c, f"Fetch v4 at offset {FAR} of {RECORDS} -> OFFSET_OUT_OF_RANGE (1)",
               res and res[0] == 1, f"error {res and res[0]}")
        res = conn.fetch(TOPIC, 0, END, version=4)
        record(c, f"Fetch v4 at the end offset {END} -> no error, no records",
               res and res[0] == 0 and not res[2], f"error {res and res[0]}, {len(res[2]) if res else 0} bytes")


# --------------------------------------------------------------------- Java

def java_checks(broker):
    c = "java"
    java = clients.Java()
    classes = java.test_client()
    log(f"Java client kafka-clients {java.version}")

    def run(*args):
        r = java.run("SluiceJavaClient", args[0], broker.bootstrap, *args[1:], classpath=[classes],
                     timeout=90, heap="-Xmx256m")
        return r.stdout.strip(), r.stderr

    out, err = run("produce-one", UNKNOWN, 10)
    record(c, "producer send to an unknown topic -> TimeoutException 'not present in metadata'",
           out.startswith("ERROR org.apache.kafka.common.errors.TimeoutException") and "not present in metadata" in out,
           out)
    record(c, "... and the client logged the broker's UNKNOWN_TOPIC_OR_PARTITION",
           "UNKNOWN_TOPIC_OR_PARTITION" in err, err[-500:])
    out, _ = run("describe", UNKNOWN)
    record(c, "Admin.describeTopics(unknown) -> UnknownTopicOrPartitionException",
           out.startswith("ERROR org.apache.kafka.common.errors.UnknownTopicOrPartitionException"), out)
    out, _ = run("produce-one", TOPIC, BIG)
    record(c, f"producer send of a {BIG}-byte record -> RecordTooLargeException",
           out.startswith("ERROR org.apache.kafka.common.errors.RecordTooLargeException"), out)
    out, _ = run("produce-one", SMALL_TOPIC, MID)
    record(c, f"producer send of a {MID}-byte record to a topic with max.message.bytes={SMALL_MAX} "
           "-> RecordTooLargeException", out.startswith("ERROR org.apache.kafka.common.errors.RecordTooLargeException"), out)
    out, _ = run("fetch-at", TOPIC, 0, FAR, "none")
    record(c, f"consumer assign+seek({FAR}), auto.offset.reset=none -> OffsetOutOfRangeException",
           out.startswith("ERROR org.apache.kafka.clients.consumer.OffsetOutOfRangeException"), out)
    out, _ = run("fetch-at", TOPIC, 0, FAR, "earliest")
    record(c, f"consumer assign+seek({FAR}), auto.offset.reset=earliest -> first record at offset 0",
           out == "OK first offset 0", out)
    out, _ = run("fetch-at", TOPIC, 0, FAR, "latest")
    record(c, f"consumer assign+seek({FAR}), auto.offset.reset=latest -> position {END}, no record",
           out == f"OK no record position {END}", out)


# --------------------------------------------------------------------- franz-go

def franzgo_checks(broker):
    c = "franz-go"
    exe = clients.franzgo()
    log(f"franz-go {clients.franzgo_versions()}")

    def run(*args):
        r = lib.run([exe, args[0], "-brokers", broker.bootstrap, *args[1:], "-timeout", "40s"], timeout=60)
        return r.stdout.strip()

    out = run("produce-one", "-topic", UNKNOWN, "-size", "10")
    record(c, "produce to an unknown topic -> UNKNOWN_TOPIC_OR_PARTITION",
           out.startswith("ERROR UNKNOWN_TOPIC_OR_PARTITION"), out)
    out = run("describe", "-topic", UNKNOWN)
    record(c, "kadm ListTopics(unknown) -> UNKNOWN_TOPIC_OR_PARTITION",
           out.startswith("ERROR UNKNOWN_TOPIC_OR_PARTITION"), out)
    out = run("produce-one", "-topic", TOPIC, "-size", str(BIG))
    record(c, f"produce a {BIG}-byte record -> MESSAGE_TOO_LARGE",
           out.startswith("ERROR MESSAGE_TOO_LARGE"), out)
    out = run("produce-one", "-topic", SMALL_TOPIC, "-size", str(MID))
    record(c, f"produce a {MID}-byte record to a topic with max.message.bytes={SMALL_MAX} -> MESSAGE_TOO_LARGE",
           out.startswith("ERROR MESSAGE_TOO_LARGE"), out)
    out = run("fetch-at", "-topic", TOPIC, "-offset", str(FAR), "-reset", "none")
    record(c, f"consume partition at {FAR} with NoResetOffset -> OFFSET_OUT_OF_RANGE",
           out.startswith("ERROR OFFSET_OUT_OF_RANGE"), out)
    out = run("fetch-at", "-topic", TOPIC, "-offset", str(FAR), "-reset", "start")
    record(c, f"consume partition at {FAR}, reset AtStart -> first record at offset 0",
           out.startswith("OK first offset 0 "), out)


# --------------------------------------------------------------------- Python clients

def python_checks(broker):
    py = clients.venv_python()
    r = lib.run([py, os.path.abspath(__file__), "--python-clients", broker.bootstrap], timeout=240)
    for ln in r.stdout.splitlines():
        if ln.startswith("RESULT\t"):
            _, client, what, ok, detail = ln.split("\t", 4)
            record(client, what, ok == "1", detail)
        else:
            print(ln, flush=True)
    if r.returncode != 0:
        record("python", "python client checks ran to the end", False,
               f"exit {r.returncode}: {r.stderr[-2000:]}")


def emit(client, what, ok, detail=""):
    print("RESULT\t%s\t%s\t%d\t%s" % (client, what, 1 if ok else 0, str(detail).replace("\n", " ")[:600]),
          flush=True)


def confluent_part(bootstrap):
    import confluent_kafka as ck
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    c = "confluent-kafka"
    print(f"confluent-kafka {ck.version()}, librdkafka {ck.libversion()[0]}", flush=True)
    conf = {"bootstrap.servers": bootstrap}

    def produce_one(topic, size):
        # librdkafka waits topic.metadata.propagation.max.ms (30 s by default) for a
        # topic the broker says does not exist before failing its messages.
        p = Producer({**conf, "message.timeout.ms": 20000, "topic.metadata.propagation.max.ms": 3000})
        res = []
        p.produce(topic, key=b"k", value=os.urandom(size), on_delivery=lambda e, m: res.append(e))
        p.flush(30)
        return res[0] if res else "no delivery report"

    e = produce_one(UNKNOWN, 10)
    emit(c, "produce to an unknown topic -> delivery error UNKNOWN_TOPIC_OR_PART",
         isinstance(e, ck.KafkaError) and e.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, e)
    admin = AdminClient(conf)
    try:
        admin.describe_topics(ck.TopicCollection([UNKNOWN]))[UNKNOWN].result(30)
        e = "no error"
    except KafkaException as ex:
        e = ex.args[0]
    emit(c, "AdminClient.describe_topics(unknown) -> UNKNOWN_TOPIC_OR_PART",
         isinstance(e, ck.KafkaError) and e.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, e)
    e = produce_one(TOPIC, BIG)
    emit(c, f"produce a {BIG}-byte record -> delivery error MSG_SIZE_TOO_LARGE",
         isinstance(e, ck.KafkaError) and e.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, e)

    def fetch_at(reset):
        cons = Consumer({**conf, "group.id": "sluice-errors", "enable.auto.commit": False,
                         "auto.offset.reset": reset})
        try:
            cons.assign([TopicPartition(TOPIC, 0, FAR)])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                m = cons.poll(1)
                if m is None:
                    continue
                if m.error():
                    return m.error()
                return m.offset()
            return "nothing"
        finally:
            cons.close()
    got = fetch_at("error")
    emit(c, f"consumer assign at {FAR}, auto.offset.reset=error -> error _AUTO_OFFSET_RESET 'Offset out of range'",
         isinstance(got, ck.KafkaError) and got.code() == ck.KafkaError._AUTO_OFFSET_RESET
         and "out of range" in got.str().lower(), got)
    got = fetch_at("earliest")
    emit(c, f"consumer assign at {FAR}, auto.offset.reset=earliest -> offset 0", got == 0, got)


def kafka_python_part(bootstrap):
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka import errors as KE
    from kafka.admin import KafkaAdminClient
    c = "kafka-python"
    print(f"kafka-python {kafka.__version__}", flush=True)

    def produce_one(topic, size):
        p = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=8000, request_timeout_ms=10000)
        try:
            p.send(topic, key=b"k", value=os.urandom(size)).get(timeout=20)
            return "no error"
        except Exception as ex:  # noqa: BLE001 - the error is the result
            return ex
        finally:
            p.close(timeout=5)
    e = produce_one(UNKNOWN, 10)
    emit(c, "send to an unknown topic -> KafkaTimeoutError (metadata)",
         isinstance(e, KE.KafkaTimeoutError), repr(e))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        try:
            d = admin.describe_topics([UNKNOWN])
            e = d[0]["error_code"] if d else "empty"
        except Exception as ex:  # noqa: BLE001
            e = ex
    finally:
        admin.close()
    emit(c, "KafkaAdminClient.describe_topics(unknown) -> UnknownTopicOrPartitionError / error code 3",
         isinstance(e, KE.UnknownTopicOrPartitionError) or e == 3, repr(e))
    e = produce_one(TOPIC, BIG)
    emit(c, f"send of a {BIG}-byte record -> MessageSizeTooLargeError",
         isinstance(e, KE.MessageSizeTooLargeError), repr(e))

    def fetch_at(reset):
        cons = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset=reset)
        try:
            tp = TopicPartition(TOPIC, 0)
            cons.assign([tp])
            cons.seek(tp, FAR)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got = cons.poll(timeout_ms=1000).get(tp)
                if got:
                    return got[0].offset
            return "nothing"
        except Exception as ex:  # noqa: BLE001
            return ex
        finally:
            cons.close()
    got = fetch_at("none")
    emit(c, f"consumer assign+seek({FAR}), auto_offset_reset=none -> OffsetOutOfRangeError",
         isinstance(got, KE.OffsetOutOfRangeError), repr(got))
    got = fetch_at("earliest")
    emit(c, f"consumer assign+seek({FAR}), auto_offset_reset=earliest -> offset 0", got == 0, repr(got))


def python_main(bootstrap):
    for part in (confluent_part, kafka_python_part):
        try:
            part(bootstrap)
        except Exception as ex:  # noqa: BLE001 - report and go on with the other client
            import traceback
            traceback.print_exc(file=sys.stdout)
            emit(part.__name__.replace("_part", ""), "checks ran to the end", False, repr(ex))


# --------------------------------------------------------------------- main

def test():
    props = {"auto.create.topics.enable": "false", "message.max.bytes": MAX}
    with lib.Broker("client-errors", props) as broker:
        err = create_topic_raw(broker.port, TOPIC, 1)
        lib.check(err == 0, f"CreateTopics {TOPIC}: error {err}")
        err = create_topic_raw(broker.port, SMALL_TOPIC, 1, {"max.message.bytes": SMALL_MAX})
        lib.check(err == 0, f"CreateTopics {SMALL_TOPIC}: error {err}")
        with lib.Conn(broker.port) as conn:
            conn.ensure_topic(TOPIC)
            conn.ensure_topic(SMALL_TOPIC)
            res = conn.produce(TOPIC, 0, lib.record_batch([(b"k%d" % i, b"v%d" % i, []) for i in range(RECORDS)]))
            lib.check(res and res[0] == 0, f"produce {RECORDS} records: {res}")
        ran = 0
        for name, fn in (("protocol", raw_checks), ("java", java_checks), ("franz-go", franzgo_checks),
                         ("python", python_checks)):
            t0 = time.monotonic()
            try:
                fn(broker)
                ran += 1
            except SystemExit as e:
                if e.code != lib.SKIP:
                    raise
                log(f"{name} checks skipped")
            except lib.TestFailure as e:
                record(name, "checks ran to the end", False, str(e))
                ran += 1
            log(f"{name} checks took {time.monotonic() - t0:.1f}s")
        if ran <= 1:
            lib.skip("no client could be installed")
        bad = [r for r in results if not r[2]]
        log(f"{len(results) - len(bad)} of {len(results)} error checks as Kafka does")
        if bad:
            raise lib.TestFailure(f"{len(bad)} error check(s) differ from Kafka:\n" + "\n".join(
                f"  {cl}: {what} -- got {detail}" for cl, what, _, detail in bad))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--python-clients":
        python_main(sys.argv[2])
    else:
        lib.main(test)
