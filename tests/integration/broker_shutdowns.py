#!/usr/bin/env python3
"""What a clean and an unclean broker stop do to acknowledged records (issue 13,
docs/guarantees.md "Replication: what survives what"): three controllers and three brokers
through deploy/local-cluster.sh, replication factor 3, min.insync.replicas=2.

Proves, in order:
- controlled shutdown: broker 3, leader of cs-0, stopped with SIGTERM while a raw
  idempotent producer (acks=all, one request at a time) writes to cs-0 and a
  confluent-kafka idempotent producer writes to all of `cs`: leadership moves before the
  broker stops; the raw producer sees nothing but NOT_LEADER_OR_FOLLOWER (at most a few
  retries, each after a Metadata refresh) and writes again within one second; the
  confluent producer has no failed delivery; every acknowledged record is read back
  exactly once;
- an unclean shutdown that lost data never makes that broker leader while a replica
  with every acknowledged record exists (KIP-966: eligible leader replicas and
  clean-shutdown tracking). Topics `safe` and `unsafe` (the latter with
  unclean.leader.election.enable=true), both led by broker 1:
    1. records A acknowledged by all three; broker 3 is already stopped (cleanly, above):
       records B acknowledged by brokers 1 and 2 only;
    2. broker 2 killed (kill -9): the ISR is {1}, below min.insync.replicas, so acks=all
       is refused (NOT_ENOUGH_REPLICAS) and broker 2 is an eligible leader replica;
    3. broker 2's machine "loses power": its partition logs are cut where records B
       start (the page cache it had not flushed; the recovery point shows nothing past
       it was synced);
    4. broker 1 killed (kill -9): no live replica holds B;
    5. broker 2 restarted (its registration says it did not stop cleanly, so it leaves
       the eligible replicas) and broker 3 restarted (clean, but stale: never in the ISR
       since): `safe` stays offline (no leader, produce refused) for as long as broker
       1 is away, while `unsafe` elects broker 2 and so loses records B (what
       unclean.leader.election.enable trades for availability);
    6. broker 1 restarted: it leads `safe` again (the last known leader: no other replica
       has all the data) and every acknowledged record, A and B, is there; brokers 2 and
       3 catch up and rejoin the ISR with logs identical to the leader's. `unsafe` keeps
       broker 2's history: broker 1 truncates B away as it follows.

Short timeouts through local-cluster.sh's --set (failover_lib.SETS). Ports 22510-22515,
22610-22615 on 127.0.0.1.
"""
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402

clients.reexec_in_venv()

import confluent_kafka as ck  # noqa: E402

import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BASE_PORT = 22510
CS, SAFE, UNSAFE = "cs", "safe", "unsafe"
PER_BATCH = 20
times = {}


def leader_of(port, topic, p):
    """topic-p's leader from Metadata v4 through port (its own connection: threads)."""
    with lib.Conn(port, timeout=5) as c:
        _b, topics = c.metadata([topic], auto_create=False)
    err, parts = topics.get(topic, (-1, {}))
    return parts[p][1] if not err and p in parts and parts[p][0] == 0 else -1


class RawProducer(threading.Thread):
    """Idempotent batches of 10 to cs-0, acks=all, one at a time, each retried (same
    bytes) after a Metadata refresh until acknowledged. Keeps every error with its time
    and batch, and the time of every acknowledgement."""

    def __init__(self, cl):
        super().__init__(daemon=True)
        self.cl, self.stop, self.errors, self.acks, self.acked = cl, threading.Event(), [], [], {}
        self.pid, self.epoch = fl.init_producer_id(cl.port(1))
        self.failure = None

    def ports(self):
        return [self.cl.port(b) for b in self.cl.brokers if self.cl.running(b)]

    def find_leader(self):
        for port in self.ports():
            try:
                leader = leader_of(port, CS, 0)
            except (OSError, lib.ProtocolError):
                continue
            if leader >= 0:
                return leader
        return -1

    def run(self):
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.failure = e

    def loop(self):
        seq, conn, leader = 0, None, self.find_leader()
        while not self.stop.is_set():
            values = [f"raw-{seq + k}" for k in range(10)]
            blob = fl.idempotent_batch(values, self.pid, self.epoch, seq)
            tries = 0
            while True:
                tries += 1
                check(tries < 200, "a raw batch was never acknowledged")
                try:
                    conn = conn or lib.Conn(self.cl.port(leader), timeout=20)
                    err, base, _msg = fl.produce(0, CS, 0, blob, conn=conn)
                except (OSError, lib.ProtocolError, KeyError) as e:
                    err, base = f"connection: {e}", -1
                    if conn:
                        conn.close()
                    conn = None
                if err == fl.NONE:
                    break
                self.errors.append((time.monotonic(), err, seq))
                check(err in fl.RETRIABLE or isinstance(err, str), f"raw producer: error {err}, not retriable")
                time.sleep(0.05)
                new = self.find_leader()
                if new != leader and conn:
                    conn.close()
                    conn = None
                leader = new if new >= 0 else leader
            self.acks.append(time.monotonic())
            self.acked.update({base + k: v for k, v in enumerate(values)})
            seq += 10
        if conn:
            conn.close()


class KafkaProducer(threading.Thread):
    """confluent-kafka, idempotent, acks=all, 1,000 records a second over cs's partitions."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                              "linger.ms": 5, "message.timeout.ms": 120000, "compression.type": "none"})
        self.stop, self.sent, self.acked, self.errors = threading.Event(), 0, {}, []

    def on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.value().decode()] = (msg.partition(), msg.offset())

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            while self.sent < int((time.monotonic() - t0) * 1000):
                self.p.produce(CS, f"ck-{self.sent:07d}".encode(), partition=self.sent % 3,
                               on_delivery=self.on_delivery)
                self.sent += 1
            self.p.poll(0.01)

    def finish(self):
        self.stop.set()
        self.join(10)
        check(self.p.flush(120) == 0, "confluent-kafka: records unacknowledged after flush")


def wait_partition(cl, topic, p, cond, what, timeout, skip=()):
    return clu.wait_for(f"{topic}-{p}: {what}", lambda: (lambda st: st if st and cond(st) else None)(
        fl.md_any(cl, topic, p, skip=skip)), timeout)


def step_controlled_shutdown(cl):
    raw = RawProducer(cl)
    kp = KafkaProducer(cl.env["BOOTSTRAP"])
    raw.start()
    kp.start()
    time.sleep(2)
    check(raw.failure is None and not raw.errors, f"raw producer before the shutdown: {raw.failure} {raw.errors}")
    log_at = {b: os.path.getsize(cl.out_log(b)) for b in (1, 2)}
    t0 = time.monotonic()
    cl.kill(3, "TERM")
    times["SIGTERM: broker 3 gone"] = time.monotonic() - t0
    wait_partition(cl, CS, 0, lambda st: st[1] in (1, 2) and 3 not in st[4], "a new leader", 10, skip=(3,))
    time.sleep(2)
    raw.stop.set()
    raw.join(30)
    kp.finish()
    check(raw.failure is None, f"raw producer: {raw.failure}")
    errs = [e for _t, e, _s in raw.errors]
    check(all(e in (fl.NOT_LEADER_OR_FOLLOWER, fl.LEADER_NOT_AVAILABLE) or isinstance(e, str) for e in errs),
          f"raw producer errors: {errs}")
    per_batch = {}
    for _t, _e, s in raw.errors:
        per_batch[s] = per_batch.get(s, 0) + 1
    first_err = min((t for t, _e, _s in raw.errors), default=None)
    gap = 0.0
    if first_err is not None:
        before = max((t for t in raw.acks if t < first_err), default=t0)
        after = min(t for t in raw.acks if t > first_err)
        gap = after - before
    times["SIGTERM: raw write gap"] = gap
    check(gap < 1.0, f"no acks=all write acknowledged for {gap:.2f}s across the controlled shutdown")
    check(not kp.errors, f"confluent-kafka: {len(kp.errors)} failed deliveries, first {kp.errors[:3]}")
    # A leader never asks for the broker in controlled shutdown (still fetching, caught up)
    # to join an ISR: the controller would refuse it, after the high watermark had waited
    # for that broker (Kafka's isReplicaIsrEligible).
    for b, at in log_at.items():
        with open(cl.out_log(b), errors="replace") as f:
            f.seek(at)
            refused = [ln for ln in f if "INELIGIBLE_REPLICA" in ln]
        check(not refused, f"broker {b} asked for the stopping broker in an ISR: {refused[:2]}")
    check(len(kp.acked) == kp.sent, f"confluent-kafka: {len(kp.acked)} of {kp.sent} acknowledged")
    log(f"SIGTERM of broker 3 (leader of {CS}-0): raw acks=all producer saw {len(errs)} retriable errors "
        f"({sorted(set(map(str, errs)))}, at most {max(per_batch.values(), default=0)} for one batch), "
        f"writes acknowledged again after a gap of {gap * 1000:.0f} ms; confluent-kafka: {kp.sent} records, "
        f"no failed delivery")
    return raw, kp


def check_cs(cl, raw, kp):
    for p in range(3):
        # Once every replica is back, the preferred one leads again: read from it then.
        st = wait_partition(cl, CS, p, lambda s, pref=(3, 1, 2)[p]: s[0] == fl.NONE and s[1] == pref and
                            sorted(s[4]) == [1, 2, 3], "its preferred leader and an ISR of three", 40)
        top = max([o for v, (q, o) in kp.acked.items() if q == p] + (list(raw.acked) if p == 0 else []))
        clu.wait_for(f"{CS}-{p}'s high watermark past the acknowledged records",
                     lambda: fl.high_watermark(cl.port(st[1]), CS, p) > top, 20)
        got = fl.read_values(cl.port(st[1]), CS, p)
        at = dict(got)
        values = [v for _o, v in got]
        check(len(values) == len(set(values)), f"{CS}-{p}: duplicates")
        want = {v for v, (q, _o) in kp.acked.items() if q == p}
        if p == 0:
            want |= set(raw.acked.values())
            check(all(at.get(o) == v for o, v in raw.acked.items()),
                  f"{CS}-0: raw records not at their acknowledged offsets")
        check(set(values) == want, f"{CS}-{p}: {len(set(values))} records, {len(want)} acknowledged")
        check(all(at.get(o) == v for v, (q, o) in kp.acked.items() if q == p),
              f"{CS}-{p}: confluent records not at their acknowledged offsets")
    log(f"{CS}: every record acknowledged around the controlled shutdown ({len(raw.acked)} raw, {len(kp.acked)} "
        f"confluent-kafka) read back exactly once, at its acknowledged offset")


def produce_to(cl, leader, topics, prefix, n):
    acked = {t: {} for t in topics}
    for t in topics:
        for i in range(0, n, PER_BATCH):
            values = [f"{prefix}-{j}" for j in range(i, i + PER_BATCH)]
            blob = lib.record_batch([(None, v.encode(), []) for v in values])
            err, base, msg = fl.produce(cl.port(leader), t, 0, blob)
            check(err == fl.NONE, f"{t}: acks=all {prefix} {i}..: error {err} {msg}")
            acked[t].update({base + k: v for k, v in enumerate(values)})
    return acked


def lose_unflushed(cl, broker, topic, offset):
    """broker's topic-0 log cut where offset's batch starts, as a power failure would cut
    what it had not flushed; the recovery point must not claim anything past it."""
    d = cl.data_dir(broker, topic, 0)
    try:
        with open(os.path.join(d, "sluice-recovery-point")) as f:
            rp = int(f.read().split()[0])
    except FileNotFoundError:
        rp = 0  # never written: nothing synced, recovery checks the whole log
    check(rp <= offset, f"broker {broker} {topic}-0: recovery point {rp} past {offset}: those records were synced")
    for path in cl.segments(broker, topic, 0):
        for base, _last, pos, _n, _e, _pid in fl.segment_batches(path):
            if base >= offset:
                os.truncate(path, pos)
                return os.path.basename(path), pos
    raise lib.TestFailure(f"broker {broker} {topic}-0: no batch at {offset}")


def step_unclean(cl, tools, a):
    n = 200
    b = produce_to(cl, 1, (SAFE, UNSAFE), "B", n)
    na = len(a[SAFE])
    acked = {t: {**a[t], **b[t]} for t in (SAFE, UNSAFE)}
    for t in (SAFE, UNSAFE):
        clu.wait_for(f"broker 2 holding {t}-0's records B",
                     lambda: len(fl.log_records(cl, 2, t, 0)) == na + n, 20)
    log(f"records A ({na}) acknowledged by brokers 1, 2, 3; records B ({n}) by 1 and 2 (3 stopped) "
        f"in {SAFE} and {UNSAFE}")

    cl.kill(2)
    for t in (SAFE, UNSAFE):
        wait_partition(cl, t, 0, lambda st: st[1] == 1 and list(st[4]) == [1], "ISR {1}", fl.SESSION_MS / 1000 + 15,
                       skip=(2, 3))
    err, _base, msg = fl.produce(cl.port(1), SAFE, 0, lib.record_batch([(None, b"refused", [])]))
    check(err == fl.NOT_ENOUGH_REPLICAS, f"acks=all with ISR {{1}}: error {err} {msg}")
    dp = clu.wait_for(f"{SAFE}-0: broker 2 an eligible leader replica", lambda: (
        lambda x: x if x and x["elr"] == [2] else None)(fl.describe_partition(cl.port(1), SAFE, 0)), 10)
    log(f"{SAFE}-0 (DescribeTopicPartitions): leader {dp['leader']}, ISR {dp['isr']}, ELR {dp['elr']}")
    cuts = {t: lose_unflushed(cl, 2, t, na) for t in (SAFE, UNSAFE)}
    log(f"broker 2 killed: ISR {{1}}, acks=all refused (NOT_ENOUGH_REPLICAS); its logs cut where B starts "
        f"(lost page cache): {cuts}")

    cl.kill(1)
    log("broker 1 killed: no live replica holds B")

    t0 = time.monotonic()
    cl.start(2)
    cl.start(3)
    # Broker 1 fenced (its session expired): safe-0 without a leader.
    wait_partition(cl, SAFE, 0, lambda st: st[1] == -1, "offline", fl.SESSION_MS / 1000 + 15, skip=(1,))
    wait_partition(cl, UNSAFE, 0, lambda st: st[1] == 2, "unclean election of broker 2", 20, skip=(1,))
    times["unsafe: broker 2 elected uncleanly"] = time.monotonic() - t0
    got = dict(fl.read_values(cl.port(2), UNSAFE, 0))
    lost = [o for o in acked[UNSAFE] if o not in got]
    check(len(lost) == n and all(got.get(o) == v for o, v in a[UNSAFE].items()),
          f"{UNSAFE}: broker 2 leads with {len(got)} records; {len(lost)} acknowledged ones missing, want the {n} of B")
    log(f"{UNSAFE} (unclean.leader.election.enable=true): broker 2 elected with its cut log after "
        f"{times['unsafe: broker 2 elected uncleanly']:.2f}s: the {n} acknowledged records B are lost")
    dp = clu.wait_for(f"{SAFE}-0: ELR without broker 2", lambda: (
        lambda x: x if x and x["elr"] == [1] else None)(fl.describe_partition(cl.port(2), SAFE, 0)), 10)
    check(dp["leader"] == -1 and dp["isr"] == [] and dp["last_known_elr"] == [1],
          f"{SAFE}-0 while broker 1 is away: {dp}")
    out = tools.run("topics", "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                    f"127.0.0.1:{cl.port(3)}", "--describe", "--topic", SAFE)
    check(re.search(r"Leader:\s*none\b.*\tElr:\s*1\s+LastKnownElr:\s*1\b", out),
          f"kafka-topics --describe {SAFE}: {out!r}")
    log(f"{SAFE}-0 after broker 2's unclean return: ELR {dp['elr']} (broker 2 left it), last known leader "
        f"{dp['last_known_elr']}; kafka-topics --describe: {out.strip().splitlines()[-1].strip()}")
    deadline = time.monotonic() + fl.SESSION_MS / 1000 + 2
    while time.monotonic() < deadline:
        st = fl.md_any(cl, SAFE, 0, skip=(1,))
        check(st and st[1] == -1, f"{SAFE}-0 got a leader while broker 1 is away: {st}")
        time.sleep(0.25)
    for broker in (2, 3):
        err, _base, _msg = fl.produce(cl.port(broker), SAFE, 0, lib.record_batch([(None, b"x", [])]))
        check(err in (fl.NOT_LEADER_OR_FOLLOWER, fl.LEADER_NOT_AVAILABLE),
              f"produce to {SAFE}-0 at broker {broker} while offline: error {err}")
    log(f"{SAFE}: no leader for {fl.SESSION_MS / 1000 + 2:.0f}s with brokers 2 (unclean, lost B) and 3 (clean, "
        f"stale) up: neither is eligible; produce refused")

    t0 = time.monotonic()
    cl.start(1)
    wait_partition(cl, SAFE, 0, lambda st: st[1] == 1, "broker 1 leading", 30)
    times["safe: broker 1 leads again"] = time.monotonic() - t0
    clu.wait_for(f"{SAFE}-0's high watermark at the end",
                 lambda: fl.high_watermark(cl.port(1), SAFE, 0) >= na + n, 20)
    got = dict(fl.read_values(cl.port(1), SAFE, 0))
    lost = [o for o, v in acked[SAFE].items() if got.get(o) != v]
    check(not lost and len(got) == na + n, f"{SAFE}: {len(lost)} acknowledged records lost, {len(got)} read")
    wait_partition(cl, SAFE, 0, lambda st: sorted(st[4]) == [1, 2, 3], "ISR {1,2,3}", 30)
    for broker in (2, 3):
        clu.wait_for(f"broker {broker}'s {SAFE}-0 the leader's",
                     lambda: fl.log_records(cl, broker, SAFE, 0) == got, 20)
    log(f"broker 1 restarted: leads {SAFE} after {times['safe: broker 1 leads again']:.2f}s with all {na + n} "
        f"acknowledged records; brokers 2 and 3 caught up (ISR of three, logs identical)")
    st = wait_partition(cl, UNSAFE, 0, lambda s: s[1] >= 0 and 1 in s[4], "broker 1 in the ISR", 30)
    final = dict(fl.read_values(cl.port(st[1]), UNSAFE, 0))
    check(final == a[UNSAFE], f"{UNSAFE}: {len(final)} records after broker 1's return, want the {na} of A only")
    log(f"{UNSAFE}: broker 1 followed broker 2's history: records B truncated away for good")


def main():
    with clu.temp_cluster("sluice-shutdowns-", lambda root: fl.Cluster(root, BASE_PORT)) as cl:
        cl.up_timed(times)
        mir = ("min.insync.replicas", "2")
        fl.create_topic(cl.port(1), CS, 3, assignment=[[3, 1, 2], [1, 2, 3], [2, 3, 1]], configs=[mir])
        fl.create_topic(cl.port(1), SAFE, 1, assignment=[[1, 2, 3]], configs=[mir])
        fl.create_topic(cl.port(1), UNSAFE, 1, assignment=[[1, 2, 3]],
                        configs=[mir, ("unclean.leader.election.enable", "true")])
        for t, p, leader in ((CS, 0, 3), (CS, 1, 1), (CS, 2, 2), (SAFE, 0, 1), (UNSAFE, 0, 1)):
            wait_partition(cl, t, p, lambda st, want=leader: st[1] == want and len(st[4]) == 3,
                           f"led by {leader}, ISR of three", 20)
        a = produce_to(cl, 1, (SAFE, UNSAFE), "A", 200)
        for t in (SAFE, UNSAFE):
            clu.wait_for(f"every replica holding {t}-0's records A",
                         lambda: all(len(fl.log_records(cl, b, t, 0)) == 200 for b in cl.brokers), 20)
        raw, kp = step_controlled_shutdown(cl)
        step_unclean(cl, clu.Tools(clients.Java()), a)
        check_cs(cl, raw, kp)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
