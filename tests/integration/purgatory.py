#!/usr/bin/env python3
"""Requests that wait for the other replicas, and their timeouts (issue 13; Kafka's
purgatory: DelayedProduce, DelayedDeleteRecords): three controllers and three brokers
through deploy/local-cluster.sh, topic `acks` (one partition, replicas 1, 2, 3,
min.insync.replicas=2) and topic `pair` (one partition, replicas 1 and 2), both led by
broker 1. replica.lag.time.max.ms and broker.session.timeout.ms are 20 s, so a follower
stopped with SIGSTOP for a few seconds stays in the ISR and registered: the leader must
wait for it.

Proves, in order:
- DeleteRecords (raw v1, TimeoutMs 15 s) with every replica running is answered only once
  both followers have moved their log start to the offset (their
  sluice-log-start-offset files say so when the answer comes: followers move theirs
  from their next Fetch answer and report it in the Fetch after), with LowWatermark the
  offset, the least log start over the replicas (Kafka's lowWatermarkIfLeader);
- with broker 3 stopped (SIGSTOP, in the ISR):
  - an acks=all Produce (raw v8) with TimeoutMs 1000 is answered REQUEST_TIMED_OUT (7)
    after 1 s (not before, and not never), with the offset its records were appended at,
    as Kafka answers;
  - one Produce naming `acks` and `pair` (broker 3 holds no replica of `pair`): answered
    after 1 s, `pair` acknowledged (NONE, its offset), `acks` REQUEST_TIMED_OUT: each
    partition keeps its own answer;
  - TimeoutMs 0: REQUEST_TIMED_OUT at once (Kafka's delayed operation expires when
    created);
  - an idempotent batch (InitProducerId) times out the same way;
  - DeleteRecords with TimeoutMs 1000: REQUEST_TIMED_OUT after 1 s, LowWatermark the low
    watermark at the deletion (the followers' previous log start), as Kafka answers;
- broker 3 continued (SIGCONT): it catches up and stays in the ISR; every record of the
  timed-out produces is served at the offset its answer named (they stayed appended);
  the idempotent batch sent again is a duplicate answered NONE with its original offset;
  broker 3's log start follows the timed-out deletion; the three replicas' logs are
  identical on disk;
- kafka-delete-records.sh (Kafka's DeleteRecordsCommand, the 4.1 jars) against the
  cluster: "low_watermark: N" for the offset asked, and both followers' log start there
  when it returns.

Ports 22800-22802 (brokers) and 22900-22905 (controllers) on 127.0.0.1.
"""
import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

BASE_PORT = 22800
ACKS, PAIR = "acks", "pair"
STALL_MS = 20000  # replica.lag.time.max.ms and broker.session.timeout.ms
SETS = ["--set", f"broker.session.timeout.ms={STALL_MS}",
        "--set", f"broker.heartbeat.interval.ms={fl.HEARTBEAT_MS}",
        "--set-controller", f"controller.quorum.election.timeout.ms={fl.ELECTION_MS}",
        "--set-broker", f"replica.lag.time.max.ms={STALL_MS}"]
TIMEOUT_MS = 1000  # the requests' TimeoutMs while broker 3 is stopped
# Answered within this after the timeout (a loaded 2-core machine; the storage core's
# timer itself is exact to a millisecond).
SLACK_S = 1.5
DELETE_RECORDS_CMD = "org.apache.kafka.tools.DeleteRecordsCommand"
times = {}


def produce_multi(conn, parts, timeout_ms, acks=-1):
    """One Produce v8 naming every (topic, partition, blob) of parts:
    {(topic, partition): (error, base offset)}."""
    by_topic = {}
    for t, p, blob in parts:
        by_topic.setdefault(t, []).append((p, blob))
    e = Enc().string(None).i16(acks).i32(timeout_ms).array_len(len(by_topic))
    for t, entries in by_topic.items():
        e.string(t).array_len(len(entries))
        for p, blob in entries:
            e.i32(p).bytes_(blob)
    d = conn.request(0, 8, e.done())
    out = {}
    for _ in range(d.array_len()):
        t = d.string()
        for _ in range(d.array_len()):
            p, err, base = d.i32(), d.i16(), d.i64()
            d.i64()  # LogAppendTimeMs
            d.i64()  # LogStartOffset
            for _ in range(d.array_len()):
                d.i32()
                d.string()
            d.string()  # ErrorMessage
            out[(t, p)] = (err, base)
    d.i32()  # ThrottleTimeMs
    return out


def batch(prefix, n):
    values = [f"{prefix}-{i}" for i in range(n)]
    return values, lib.record_batch([(None, v.encode(), []) for v in values])


def delete_records(port, topic, p, offset, timeout_ms):
    """DeleteRecords v1 on its own connection (it may wait): (error, low watermark, seconds)."""
    t0 = time.monotonic()
    with lib.Conn(port, timeout=timeout_ms / 1000 + 10) as c:
        err, low = clu.delete_records(port, topic, p, offset, timeout_ms, conn=c)
        took = time.monotonic() - t0
    return err, low, took


def log_start_file(cl, broker, topic):
    try:
        with open(os.path.join(cl.data_dir(broker, topic, 0), "sluice-log-start-offset")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # no file: the log starts where its first segment does (0 here)


def timed_out(what, took, err, want_err=fl.REQUEST_TIMED_OUT, at_least=TIMEOUT_MS / 1000):
    check(err == want_err, f"{what}: error {err}, want {want_err}")
    check(took >= at_least - 0.005, f"{what}: answered after {took:.3f}s, before the {at_least:.1f}s timeout")
    check(took < at_least + SLACK_S, f"{what}: answered after {took:.3f}s, timeout {at_least:.1f}s")


def step_delete_waits_for_followers(cl, end):
    cut = end // 2
    err, low, took = delete_records(cl.port(1), ACKS, 0, cut, 15000)
    starts = {b: log_start_file(cl, b, ACKS) for b in (2, 3)}
    check(err == fl.NONE and low == cut, f"DeleteRecords to {cut}: error {err}, low watermark {low}")
    check(all(v == cut for v in starts.values()),
          f"DeleteRecords answered while the followers' log starts were {starts}, not {cut}")
    times["DeleteRecords, followers moved"] = took
    log(f"DeleteRecords to {cut} answered after {took:.3f}s with low watermark {low}; the followers' log "
        f"starts were already {starts}")
    return cut


def step_stopped_follower(cl, end, pair_end, cut1):
    """Broker 3 stopped: the timeouts. Returns what the timed-out produces appended
    ({offset: value}), the idempotent batch with its producer, and the new cut."""
    appended = {}
    os.kill(cl.pid(3), signal.SIGSTOP)
    try:
        with lib.Conn(cl.port(1), timeout=10) as c:
            values, blob = batch("late", 10)
            t0 = time.monotonic()
            err, base, _msg = c.produce(ACKS, 0, blob, version=8, acks=-1, timeout_ms=TIMEOUT_MS)
            took = time.monotonic() - t0
            timed_out("acks=all Produce", took, err)
            check(base == end, f"the timed-out Produce names base offset {base}, its records went to {end}")
            appended.update({base + i: v for i, v in enumerate(values)})
            times["Produce timed out"] = took
            log(f"acks=all Produce with TimeoutMs {TIMEOUT_MS}: REQUEST_TIMED_OUT after {took:.3f}s, base offset "
                f"{base}")

            v_acks, b_acks = batch("both-acks", 5)
            v_pair, b_pair = batch("both-pair", 5)
            t0 = time.monotonic()
            res = produce_multi(c, [(ACKS, 0, b_acks), (PAIR, 0, b_pair)], TIMEOUT_MS)
            took = time.monotonic() - t0
            timed_out("Produce to acks and pair", took, res[(ACKS, 0)][0])
            check(res[(ACKS, 0)][1] == end + 10, f"acks-0 in the two-topic Produce: {res[(ACKS, 0)]}")
            check(res[(PAIR, 0)] == (fl.NONE, pair_end), f"pair-0 in the two-topic Produce: {res[(PAIR, 0)]}, "
                  f"want acknowledged at {pair_end}")
            appended.update({end + 10 + i: v for i, v in enumerate(v_acks)})
            times["two-topic Produce answered"] = took
            log(f"one Produce to acks-0 and pair-0: answered after {took:.3f}s, pair-0 acknowledged at "
                f"{pair_end}, acks-0 REQUEST_TIMED_OUT at {end + 10}")

            values, blob = batch("zero", 3)
            t0 = time.monotonic()
            err, base, _msg = c.produce(ACKS, 0, blob, version=8, acks=-1, timeout_ms=0)
            took = time.monotonic() - t0
            timed_out("acks=all Produce with TimeoutMs 0", took, err, at_least=0)
            check(base == end + 15, f"TimeoutMs 0: base offset {base}, want {end + 15}")
            appended.update({base + i: v for i, v in enumerate(values)})
            times["TimeoutMs 0 answered"] = took
            log(f"TimeoutMs 0: REQUEST_TIMED_OUT after {took:.3f}s")

        pid, epoch = fl.init_producer_id(cl.port(1))
        values = [f"idem-{i}" for i in range(4)]
        idem = fl.idempotent_batch(values, pid, epoch, 0)
        with lib.Conn(cl.port(1), timeout=10) as c:
            t0 = time.monotonic()
            err, idem_base, _msg = c.produce(ACKS, 0, idem, version=8, acks=-1, timeout_ms=TIMEOUT_MS)
            timed_out("idempotent Produce", time.monotonic() - t0, err)
        check(idem_base == end + 18, f"idempotent batch at {idem_base}, want {end + 18}")
        appended.update({idem_base + i: v for i, v in enumerate(values)})

        cut2 = end  # below the high watermark, which broker 3 holds at `end`
        err, low, took = delete_records(cl.port(1), ACKS, 0, cut2, TIMEOUT_MS)
        timed_out("DeleteRecords", took, err)
        check(low == cut1, f"the timed-out DeleteRecords names low watermark {low}, want {cut1} (the followers' "
              f"log start at the deletion)")
        times["DeleteRecords timed out"] = took
        log(f"DeleteRecords to {cut2} with TimeoutMs {TIMEOUT_MS}: REQUEST_TIMED_OUT after {took:.3f}s, low "
            f"watermark {low}")
    finally:
        os.kill(cl.pid(3), signal.SIGCONT)
    return appended, (idem, idem_base), cut2


def step_consistent(cl, end, appended, idem, cut2):
    new_end = max(appended) + 1
    t0 = time.monotonic()
    clu.wait_for("the high watermark past the timed-out records",
                 lambda: fl.high_watermark(cl.port(1), ACKS, 0, cut2) >= new_end, 20)
    times["caught up after SIGCONT"] = time.monotonic() - t0
    st = fl.md_any(cl, ACKS, 0)
    check(st and st[1] == 1 and sorted(st[4]) == [1, 2, 3], f"acks-0 after SIGCONT: {st}")
    served = dict(fl.read_values(cl.port(1), ACKS, 0, start=cut2))
    for off, v in appended.items():
        check(served.get(off) == v, f"offset {off}: served {served.get(off)!r}, the timed-out answer named {v!r}")
    blob, base = idem
    err, again, _msg = fl.produce(cl.port(1), ACKS, 0, blob)
    check(err == fl.NONE and again == base, f"the idempotent batch again: error {err} at {again}, want NONE at "
          f"{base} (a duplicate)")
    check(fl.high_watermark(cl.port(1), ACKS, 0, cut2) == new_end, "the duplicate was appended again")
    clu.wait_for("broker 3's log start at the timed-out deletion", lambda: log_start_file(cl, 3, ACKS) == cut2, 15)
    clu.wait_for("identical logs on the three brokers", lambda: fl.log_records(cl, 1, ACKS, 0) ==
                 fl.log_records(cl, 2, ACKS, 0) == fl.log_records(cl, 3, ACKS, 0), 15)
    log(f"broker 3 caught up in {times['caught up after SIGCONT']:.2f}s and stayed in the ISR; {len(appended)} "
        f"timed-out records served where their answers said; the idempotent retry answered with its original "
        f"offset {base}; broker 3's log start at {cut2}; the three logs identical")
    return new_end


def step_delete_records_tool(cl, new_end):
    java = clients.Java()
    cut = new_end - 2
    path = os.path.join(cl.dir, "delete.json")
    with open(path, "w") as f:
        json.dump({"partitions": [{"topic": ACKS, "partition": 0, "offset": cut}], "version": 1}, f)
    bootstrap = ",".join(f"127.0.0.1:{cl.port(b)}" for b in cl.brokers)
    log(f"$ kafka-delete-records --bootstrap-server {bootstrap} --offset-json-file {path}")
    t0 = time.monotonic()
    r = java.run(DELETE_RECORDS_CMD, "--bootstrap-server", bootstrap, "--offset-json-file", path, timeout=120,
                 heap="-Xmx256m")
    times["kafka-delete-records"] = time.monotonic() - t0
    starts = {b: log_start_file(cl, b, ACKS) for b in (2, 3)}
    print("\n".join("    " + ln for ln in r.stdout.strip().splitlines()), flush=True)
    check(r.returncode == 0, f"kafka-delete-records exited {r.returncode}:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}")
    check(re.search(rf"partition: {ACKS}-0\s+low_watermark: {cut}\b", r.stdout),
          f"kafka-delete-records printed {r.stdout!r}, want low_watermark: {cut}")
    check(all(v == cut for v in starts.values()), f"kafka-delete-records returned with followers at {starts}")
    log(f"kafka-delete-records: low_watermark {cut}, followers' log starts {starts} ({times['kafka-delete-records']:.1f}s "
        f"with the JVM)")


def main():
    with clu.temp_cluster("sluice-purgatory-", lambda root: fl.Cluster(root, BASE_PORT, sets=SETS)) as cl:
        cl.up_timed(times)
        fl.create_topic(cl.port(1), ACKS, 1, assignment=[[1, 2, 3]], configs=[("min.insync.replicas", "2")])
        fl.create_topic(cl.port(1), PAIR, 1, assignment=[[1, 2]], configs=[("min.insync.replicas", "2")])
        for t, isr in ((ACKS, [1, 2, 3]), (PAIR, [1, 2])):
            clu.wait_for(f"{t}-0 led by broker 1 with ISR {isr}", lambda: (
                lambda s: s and s[0] == fl.NONE and s[1] == 1 and sorted(s[4]) == isr)(fl.md_any(cl, t, 0)), 30)
        end = 0
        for i in range(10):
            _v, blob = batch(f"a{i}", 20)
            err, base, msg = fl.produce(cl.port(1), ACKS, 0, blob)
            check(err == fl.NONE and base == end, f"produce {i}: error {err} {msg} at {base}")
            end += 20
        _v, blob = batch("p", 7)
        err, base, msg = fl.produce(cl.port(1), PAIR, 0, blob)
        check(err == fl.NONE and base == 0, f"produce to pair: error {err} {msg} at {base}")
        # Let the followers' fetches settle (parked, idle) before the deletion.
        clu.wait_for("the followers holding every record",
                     lambda: all(len(fl.log_records(cl, b, ACKS, 0)) == end for b in (2, 3)), 15)
        time.sleep(0.6)
        cut1 = step_delete_waits_for_followers(cl, end)
        appended, idem, cut2 = step_stopped_follower(cl, end, 7, cut1)
        new_end = step_consistent(cl, end, appended, idem, cut2)
        step_delete_records_tool(cl, new_end)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
