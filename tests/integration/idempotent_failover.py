#!/usr/bin/env python3
"""The idempotent producer across leader changes (issue 13): three controllers and three
brokers through deploy/local-cluster.sh, topics with replication factor 3 and
min.insync.replicas=2.

Proves, in order:
- raw Produce v8 with a producer id from InitProducerId, acks=all, to the leader
  (broker 1) of idem-0: ten batches of five records; a resend of the last is answered
  with its original offsets by the same leader;
- broker 1 killed (kill -9): the new leader, which got those batches as a follower
  (verbatim appends), rebuilt the producer's state from them: the very same bytes of the
  last batch, and of another among the last five, are answered NONE with their original
  base offsets and appended nowhere; a batch older than the last five, and one leaving a
  gap, get OUT_OF_ORDER_SEQUENCE_NUMBER; the next sequence is appended right after;
- broker 1 restarted (its producer state rebuilt from its own log at start, then from
  what it fetched as a follower) leads again (preferred replica): the batch appended
  while it was away, and the last batch from before, are duplicates there too, with
  their original offsets, and the next sequence follows; the log holds every record
  exactly once;
- a real idempotent producer (confluent-kafka, enable.idempotence, acks=all) writes
  unique values to the three partitions of `stream` while each broker in turn is killed
  with kill -9 and started again (each kill takes one partition's leader and two
  partitions' followers): every send is acknowledged, and a final read of every
  partition finds each value exactly once, in the order sent, at the offset its
  acknowledgement named: nothing lost, nothing duplicated.

Short timeouts through local-cluster.sh's --set (failover_lib.SETS). Ports 22500-22505,
22600-22605 on 127.0.0.1.
"""
import os
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

BASE_PORT = 22500
TOPIC, STREAM = "idem", "stream"
PER_BATCH = 5
RATE = 1500  # records a second the real producer sends
times = {}


def wait_leader(cl, topic, p, not_in=(), want=None, timeout=None):
    """(leader, epoch, isr) once topic-p has a leader outside not_in (or == want) and no
    broker of not_in in its ISR."""
    def ok():
        st = fl.md_any(cl, topic, p, skip=not_in)
        if not st or st[0] != fl.NONE or st[1] < 0 or st[1] in not_in or any(b in st[4] for b in not_in):
            return None
        return (st[1], st[2], st[4]) if want is None or st[1] == want else None
    return clu.wait_for(f"{topic}-{p}: a leader" + (f" {want}" if want else ""), ok,
                        timeout or fl.SESSION_MS / 1000 + 20)


def send(cl, broker, blob, what):
    err, base, msg = fl.produce(cl.port(broker), TOPIC, 0, blob)
    log(f"  {what} to broker {broker}: error {err}, base offset {base}" + (f" ({msg})" if msg else ""))
    return err, base


# ----------------------------------------------------------------- raw

def step_raw(cl):
    pid, epoch = fl.init_producer_id(cl.port(2))
    log(f"InitProducerId: producer id {pid}, epoch {epoch}")
    batches = []  # (blob, base offset, first sequence)
    for i in range(10):
        blob = fl.idempotent_batch([f"r{i}-{k}" for k in range(PER_BATCH)], pid, epoch, i * PER_BATCH)
        err, base, msg = fl.produce(cl.port(1), TOPIC, 0, blob)
        check(err == fl.NONE and base == i * PER_BATCH, f"batch {i}: error {err}, base {base} {msg}")
        batches.append((blob, base, i * PER_BATCH))
    err, base = send(cl, 1, batches[9][0], "batch 9 again (same leader)")
    check((err, base) == (fl.NONE, 45), f"a retry on the same leader: error {err}, base {base}, want 45")
    clu.wait_for("every replica holding the 50 records",
                 lambda: all(len(fl.log_records(cl, b, TOPIC, 0)) == 50 for b in cl.brokers), 20)

    t0 = time.monotonic()
    cl.kill(1)
    leader, lepoch, isr = wait_leader(cl, TOPIC, 0, not_in=(1,))
    times["raw: new leader"] = time.monotonic() - t0
    log(f"broker 1 killed (kill -9): broker {leader} leads {TOPIC}-0 at epoch {lepoch}, ISR {isr}")
    err, base = send(cl, leader, batches[9][0], "batch 9 (sequence 45) again")
    check((err, base) == (fl.NONE, 45), f"the last batch resent after the failover: error {err}, base {base}")
    err, base = send(cl, leader, batches[6][0], "batch 6 (sequence 30) again")
    check((err, base) == (fl.NONE, 30), f"a batch among the last five resent: error {err}, base {base}")
    err, base = send(cl, leader, batches[2][0], "batch 2 (sequence 10, older than the last five) again")
    check(err == fl.OUT_OF_ORDER_SEQUENCE_NUMBER, f"a batch older than the last five: error {err}, base {base}")
    gap = fl.idempotent_batch(["gap"], pid, epoch, 60)
    err, base = send(cl, leader, gap, "sequence 60 (a gap)")
    check(err == fl.OUT_OF_ORDER_SEQUENCE_NUMBER, f"a sequence gap: error {err}")
    nxt = fl.idempotent_batch([f"r10-{k}" for k in range(PER_BATCH)], pid, epoch, 50)
    err, base = send(cl, leader, nxt, "sequence 50 (the next)")
    check((err, base) == (fl.NONE, 50), f"the next sequence after the failover: error {err}, base {base}")
    got = fl.read_values(cl.port(leader), TOPIC, 0)
    want = [(i * PER_BATCH + k, f"r{i}-{k}") for i in range(11) for k in range(PER_BATCH)]
    check(got == want, f"the new leader's log: {len(got)} records, not the 55 sent once each")
    log(f"broker {leader} answered the retries with their original offsets (45, 30), refused an old and a gapped "
        f"sequence (OUT_OF_ORDER_SEQUENCE_NUMBER), appended the next at 50: 55 records, each once")

    t0 = time.monotonic()
    cl.start(1)
    wait_leader(cl, TOPIC, 0, want=1, timeout=40)
    times["raw: broker 1 leads again"] = time.monotonic() - t0
    err, base = send(cl, 1, nxt, "sequence 50 (appended while it was away) again")
    check((err, base) == (fl.NONE, 50), f"a batch it got as a follower, resent: error {err}, base {base}")
    err, base = send(cl, 1, batches[9][0], "batch 9 (sequence 45) again")
    check((err, base) == (fl.NONE, 45), f"a batch from before its restart, resent: error {err}, base {base}")
    last = fl.idempotent_batch([f"r11-{k}" for k in range(PER_BATCH)], pid, epoch, 55)
    err, base = send(cl, 1, last, "sequence 55 (the next)")
    check((err, base) == (fl.NONE, 55), f"the next sequence on the restarted leader: error {err}, base {base}")
    got = fl.read_values(cl.port(1), TOPIC, 0)
    want += [(55 + k, f"r11-{k}") for k in range(PER_BATCH)]
    check(got == want, f"broker 1's log: {len(got)} records, not the 60 sent once each")
    log(f"broker 1 restarted and leading again after {times['raw: broker 1 leads again']:.2f}s: duplicates answered "
        f"with their original offsets (50, 45), the next sequence at 55; 60 records, each once")


# ----------------------------------------------------------------- real producer

class Producer(threading.Thread):
    """confluent-kafka, idempotent, acks=all: value i goes to partition i % 3 at RATE a
    second until stopped; every acknowledgement (partition, offset) and error kept."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                              "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                              "compression.type": "none"})
        self.stop, self.sent, self.acked, self.errors = threading.Event(), 0, {}, []
        self.lock = threading.Lock()

    def on_delivery(self, err, msg):
        with self.lock:
            if err is not None:
                self.errors.append((msg.value(), str(err)))
            else:
                self.acked[msg.value().decode()] = (msg.partition(), msg.offset())

    def run(self):
        t0 = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * RATE)
            while self.sent < due:
                v = f"s-{self.sent:07d}"
                try:
                    self.p.produce(STREAM, v.encode(), partition=self.sent % 3, on_delivery=self.on_delivery)
                except BufferError:
                    break
                self.sent += 1
            self.p.poll(0.01)

    def finish(self):
        self.stop.set()
        self.join(10)
        left = self.p.flush(120)
        check(left == 0, f"{left} records still unacknowledged after flush")


def step_real_producer(cl):
    prod = Producer(cl.env["BOOTSTRAP"])
    prod.start()
    time.sleep(2)
    for victim in cl.brokers:
        t0 = time.monotonic()
        sent0 = prod.sent
        cl.kill(victim)
        for p in range(3):
            wait_leader(cl, STREAM, p, not_in=(victim,))
        times[f"stream: broker {victim} killed, leaders moved"] = time.monotonic() - t0
        cl.start(victim)
        for p in range(3):
            clu.wait_for(f"broker {victim} back in {STREAM}-{p}'s ISR", lambda: (
                lambda st: st and victim in st[4])(fl.md_any(cl, STREAM, p)), 40)
        times[f"stream: broker {victim} back"] = time.monotonic() - t0
        log(f"broker {victim}: kill -9, its partitions led elsewhere, restarted, back in every ISR after "
            f"{time.monotonic() - t0:.2f}s; {prod.sent - sent0} records sent meanwhile, "
            f"{len(prod.errors)} delivery errors so far")
    time.sleep(1)
    prod.finish()
    check(not prod.errors, f"{len(prod.errors)} deliveries failed, first {prod.errors[:3]}")
    check(len(prod.acked) == prod.sent, f"{len(prod.acked)} acknowledged of {prod.sent} sent")
    for p in range(3):
        leader, _e, _isr = wait_leader(cl, STREAM, p)
        clu.wait_for(f"{STREAM}-{p}'s high watermark past every acknowledgement", lambda: (
            fl.high_watermark(cl.port(leader), STREAM, p) > max(o for (q, o) in prod.acked.values() if q == p)), 15)
        got = fl.read_values(cl.port(leader), STREAM, p)
        values = [v for _o, v in got]
        want = sorted(v for v, (q, _o) in prod.acked.items() if q == p)
        check(len(set(values)) == len(values), f"{STREAM}-{p}: {len(values) - len(set(values))} duplicates")
        check(values == want, f"{STREAM}-{p}: {len(values)} records read, {len(want)} acknowledged "
              f"(missing {len(set(want) - set(values))}, out of order or foreign otherwise)")
        wrong = [v for o, v in got if prod.acked[v] != (p, o)]
        check(not wrong, f"{STREAM}-{p}: {len(wrong)} records not at their acknowledged offset, first {wrong[:3]}")
    log(f"confluent-kafka idempotent producer: {prod.sent} records through kill -9 of brokers {cl.brokers} in "
        f"turn, every one acknowledged and read back exactly once, in order, at its acknowledged offset")


def main():
    with clu.temp_cluster("sluice-idem-", lambda root: fl.Cluster(root, BASE_PORT)) as cl:
        cl.up_timed(times)
        mir = [("min.insync.replicas", "2")]
        fl.create_topic(cl.port(1), TOPIC, 1, assignment=[[1, 2, 3]], configs=mir)
        fl.create_topic(cl.port(1), STREAM, 3, assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]], configs=mir)
        for p in range(3):
            wait_leader(cl, STREAM, p, want=p + 1)
        wait_leader(cl, TOPIC, 0, want=1)
        step_raw(cl)
        step_real_producer(cl)
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
