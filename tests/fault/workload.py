#!/usr/bin/env python3
"""The fault campaign's workload: the clients whose every observation the checker
judges (tests/fault/checker.py). It runs as its own process under the venv Python that
has confluent-kafka (tests/integration/clients.py installs it), started by
tests/fault/campaign.py; in --netns mode inside the clients' network namespace.

What it does, recording everything in a history file (JSON lines, flushed as it goes):
  - creates the topic with the replication factor asked for ("auto": 3 if the cluster
    accepts it, else 1) and says which it got;
  - producers: idempotent confluent-kafka producers, acks=all, each writing unique values
    "SLOT.GEN.SEQ" (GEN grows when a producer is replaced after a fatal error) round-robin
    over the partitions; every send, every acknowledgement (partition, offset) and every
    failure (error code, fatal or not) is recorded;
  - consumers: members of one consumer group reading along (assignments and revocations
    recorded, every record read), committing synchronously every second (what was
    committed, when, and the answer recorded);
  - a monitor reading the group's committed offsets every second;
  - on "stop" (a line on standard input, once the campaign has healed the cluster):
    producers flush, consumers catch up with the high watermarks and commit, then two
    final reads of every partition from its start to its end (assign, no group).
Times are seconds since the campaign's start (CLOCK_MONOTONIC, shared by both
processes). Standard output carries a few lines for the campaign: READY, progress,
DONE. Exit 0 once everything is recorded; 1 if the workload itself failed.
"""
import argparse
import json
import os
import sys
import threading
import time
import traceback

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

INFLIGHT_MAX = 2000  # a producer stops sending while this many values are unresolved
COMMIT_INTERVAL_S = 1.0
MONITOR_INTERVAL_S = 1.0


class History:
    """The history file: one JSON object per line, written by every thread."""

    def __init__(self, path, t0):
        self.f = open(path, "w", buffering=1 << 16)
        self.t0 = t0
        self.lock = threading.Lock()
        self.last_flush = time.monotonic()

    def now(self):
        return round(time.monotonic() - self.t0, 4)

    def add(self, kind, **kw):
        kw["k"] = kind
        if "t" not in kw:
            kw["t"] = self.now()
        line = json.dumps(kw, separators=(",", ":")) + "\n"
        with self.lock:
            self.f.write(line)
            if time.monotonic() - self.last_flush > 0.5:
                self.f.flush()
                self.last_flush = time.monotonic()

    def close(self):
        with self.lock:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()


def say(msg):
    print(msg, flush=True)


def err_name(err):
    try:
        return f"{err.name()}({err.code()})"
    except Exception:  # noqa: BLE001 - an error object without a name still gets recorded
        return str(err)


# ----------------------------------------------------------------- topic

def create_topic(a, hist):
    """Creates the topic; returns the replication factor it has. With "auto" a
    refusal of 3 (INVALID_REPLICATION_FACTOR: no replication yet) falls back to 1."""
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    wanted = [3, 1] if a.replication_factor == "auto" else [int(a.replication_factor)]
    refusal = None
    for rf in wanted:
        cfg = {"min.insync.replicas": str(min(2, rf))} if rf > 1 else {}
        deadline = time.monotonic() + 60
        while True:
            fut = admin.create_topics([NewTopic(a.topic, a.partitions, rf, config=cfg)],
                                      operation_timeout=20, request_timeout=30)[a.topic]
            try:
                fut.result()
                break
            except ck.KafkaException as e:
                err = e.args[0]
                if err.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                    break
                if err.code() == ck.KafkaError.INVALID_REPLICATION_FACTOR and len(wanted) > 1 and rf == 3:
                    refusal = err.str()
                    rf = None
                    break
                if not err.retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(1)
        if rf is not None:
            hist.add("topic", topic=a.topic, partitions=a.partitions, rf=rf, refused3=refusal)
            return rf, refusal
    raise RuntimeError("no replication factor accepted")


def wait_leaders(a, deadline_s=60):
    """Until the topic's every partition has a leader (a fresh topic, or a healed cluster)."""
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            md = admin.list_topics(a.topic, timeout=5)
            t = md.topics.get(a.topic)
            if t and not t.error and len(t.partitions) == a.partitions and \
                    all(p.leader >= 0 for p in t.partitions.values()):
                return True
        except ck.KafkaException:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


# ----------------------------------------------------------------- producers

class ProducerSlot(threading.Thread):
    """One idempotent producer at a fixed rate. A fatal error (the idempotent
    producer's state is unrecoverable) replaces it with a new one (GEN + 1); the values
    the old one had not resolved are recorded as such, never sent again."""

    def __init__(self, a, hist, slot, stop, stats):
        super().__init__(name=f"producer-{slot}", daemon=True)
        self.a, self.hist, self.slot, self.stop, self.stats = a, hist, slot, stop, stats
        self.gen = 0
        self.seq = 0
        self.fatal = None
        self.unresolved = set()
        self.lock = threading.Lock()

    def new_producer(self):
        self.gen += 1
        self.seq = 0
        self.fatal = None
        cfg = {"bootstrap.servers": self.a.bootstrap, "enable.idempotence": True, "acks": "all",
               "linger.ms": 5, "message.timeout.ms": self.a.message_timeout_ms,
               "request.timeout.ms": min(5000, self.a.message_timeout_ms - 100),
               "topic.metadata.refresh.interval.ms": 5000, "retry.backoff.ms": 100,
               "reconnect.backoff.max.ms": 1000, "error_cb": self.on_error,
               "client.id": f"fault-producer-{self.slot}.{self.gen}"}
        self.hist.add("producer", slot=self.slot, gen=self.gen)
        return ck.Producer(cfg)

    def on_error(self, err):
        self.hist.add("client-error", who=f"producer-{self.slot}.{self.gen}", err=err_name(err),
                      fatal=err.fatal(), msg=err.str()[:200])
        if err.fatal():
            self.fatal = err

    def on_delivery(self, err, msg):
        v = msg.value().decode()
        with self.lock:
            self.unresolved.discard(v)
        if err is None:
            self.hist.add("ack", v=v, p=msg.partition(), o=msg.offset())
            self.stats["acked"] += 1
        else:
            self.hist.add("fail", v=v, p=msg.partition(), err=err_name(err), fatal=err.fatal(),
                          retriable=err.retriable(), msg=err.str()[:200])
            self.stats["failed"] += 1

    def run(self):
        try:
            self.loop()
        except Exception:  # noqa: BLE001 - recorded: the campaign fails on it
            self.hist.add("crash", who=self.name, trace=traceback.format_exc()[-2000:])
            self.stats["crashed"] += 1

    def loop(self):
        prod = self.new_producer()
        interval = 1.0 / self.a.rate if self.a.rate > 0 else 0
        next_t = time.monotonic()
        while not self.stop.is_set():
            if self.fatal is not None:
                self.retire(prod, "fatal error: " + err_name(self.fatal))
                prod = self.new_producer()
            if len(prod) >= INFLIGHT_MAX:
                prod.poll(0.1)
                continue
            now = time.monotonic()
            if now < next_t:
                prod.poll(min(next_t - now, 0.1))
                continue
            next_t = max(next_t + interval, now - 1.0)
            v = f"{self.slot}.{self.gen}.{self.seq}"
            part = (self.seq + self.slot) % self.a.partitions
            try:
                with self.lock:
                    self.unresolved.add(v)
                prod.produce(self.a.topic, value=v.encode(), partition=part, on_delivery=self.on_delivery)
            except BufferError:
                with self.lock:
                    self.unresolved.discard(v)
                prod.poll(0.1)
                continue
            except ck.KafkaException as e:
                with self.lock:
                    self.unresolved.discard(v)
                self.hist.add("produce-refused", v=v, p=part, err=err_name(e.args[0]))
                prod.poll(0.1)
                continue
            self.hist.add("send", v=v, p=part)
            self.stats["sent"] += 1
            self.seq += 1
            prod.poll(0)
        self.retire(prod, "stop")

    def retire(self, prod, why):
        """Flushes (each value resolves within message.timeout.ms) and records what did not."""
        deadline = time.monotonic() + self.a.message_timeout_ms / 1000 + 15
        while len(prod) > 0 and time.monotonic() < deadline and self.fatal is None:
            prod.poll(0.2)
        prod.poll(0)
        with self.lock:
            left = sorted(self.unresolved)
            self.unresolved.clear()
        for v in left:
            self.hist.add("unresolved", v=v, why=why)
        self.hist.add("producer-end", slot=self.slot, gen=self.gen, unresolved=len(left), why=why)


# ----------------------------------------------------------------- consumers

class ConsumerMember(threading.Thread):
    """A consumer-group member: reads along, commits every second, records both."""

    def __init__(self, a, hist, cid, stop, stats, read_max):
        super().__init__(name=f"consumer-{cid}", daemon=True)
        self.a, self.hist, self.cid, self.stop, self.stats = a, hist, cid, stop, stats
        self.read_max = read_max  # shared: partition -> highest offset any member read

    def on_assign(self, c, parts):
        self.hist.add("assign", c=self.cid, parts=[p.partition for p in parts])

    def on_revoke(self, c, parts):
        self.hist.add("revoke", c=self.cid, parts=[p.partition for p in parts])

    def on_lost(self, c, parts):
        self.hist.add("revoke", c=self.cid, parts=[p.partition for p in parts], lost=True)

    def on_error(self, err):
        self.hist.add("client-error", who=f"consumer-{self.cid}", err=err_name(err), fatal=err.fatal(),
                      msg=err.str()[:200])

    def run(self):
        try:
            self.loop()
        except Exception:  # noqa: BLE001
            self.hist.add("crash", who=self.name, trace=traceback.format_exc()[-2000:])
            self.stats["crashed"] += 1

    def commit(self, c):
        t0 = self.hist.now()
        try:
            res = c.commit(asynchronous=False)
        except ck.KafkaException as e:
            err = e.args[0]
            if err.code() != ck.KafkaError._NO_OFFSET:
                self.hist.add("commit", c=self.cid, t0=t0, err=err_name(err))
            return
        offs = {str(tp.partition): tp.offset for tp in res or [] if tp.error is None and tp.offset >= 0}
        errs = {str(tp.partition): err_name(tp.error) for tp in res or [] if tp.error is not None}
        self.hist.add("commit", c=self.cid, t0=t0, offs=offs, errs=errs)

    def loop(self):
        c = ck.Consumer({"bootstrap.servers": self.a.bootstrap, "group.id": self.a.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                         "topic.metadata.refresh.interval.ms": 5000, "reconnect.backoff.max.ms": 1000,
                         "error_cb": self.on_error, "client.id": f"fault-consumer-{self.cid}"})
        c.subscribe([self.a.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        last_commit = time.monotonic()
        while not self.stop.is_set():
            for m in c.consume(500, 0.5):
                if m.error():
                    self.hist.add("consume-error", c=self.cid, err=err_name(m.error()))
                    continue
                p, o = m.partition(), m.offset()
                v = m.value().decode(errors="replace") if m.value() is not None else None
                self.hist.add("read", c=self.cid, p=p, o=o, v=v)
                self.stats["read"] += 1
                if o > self.read_max.get(p, -1):
                    self.read_max[p] = o
            if time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                self.commit(c)
                last_commit = time.monotonic()
        self.commit(c)
        c.close()
        self.hist.add("consumer-end", c=self.cid)


class CommitMonitor(threading.Thread):
    """Reads the group's committed offsets every second (OffsetFetch, no membership)."""

    def __init__(self, a, hist, stop, stats):
        super().__init__(name="monitor", daemon=True)
        self.a, self.hist, self.stop, self.stats = a, hist, stop, stats
        self.c = None

    def read_once(self):
        if self.c is None:
            self.c = ck.Consumer({"bootstrap.servers": self.a.bootstrap, "group.id": self.a.group,
                                  "enable.auto.commit": False, "client.id": "fault-monitor",
                                  "reconnect.backoff.max.ms": 1000})
        parts = [ck.TopicPartition(self.a.topic, p) for p in range(self.a.partitions)]
        t0 = self.hist.now()
        try:
            res = self.c.committed(parts, timeout=5)
        except ck.KafkaException as e:
            self.hist.add("committed", t0=t0, err=err_name(e.args[0]))
            return
        offs = {str(tp.partition): tp.offset for tp in res if tp.error is None and tp.offset >= 0}
        self.hist.add("committed", t0=t0, offs=offs)

    def run(self):
        try:
            while not self.stop.wait(MONITOR_INTERVAL_S):
                self.read_once()
            self.read_once()
            self.c.close()
        except Exception:  # noqa: BLE001
            self.hist.add("crash", who=self.name, trace=traceback.format_exc()[-2000:])
            self.stats["crashed"] += 1


# ----------------------------------------------------------------- the end

def watermarks(a, deadline_s=60):
    """partition -> (low, high) from the leaders, retried until every partition answers."""
    c = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group + "-wm", "enable.auto.commit": False})
    out = {}
    deadline = time.monotonic() + deadline_s
    try:
        while len(out) < a.partitions and time.monotonic() < deadline:
            for p in range(a.partitions):
                if p in out:
                    continue
                try:
                    out[p] = c.get_watermark_offsets(ck.TopicPartition(a.topic, p), timeout=5, cached=False)
                except ck.KafkaException:
                    pass
            if len(out) < a.partitions:
                time.sleep(0.5)
    finally:
        c.close()
    return out


def final_read(a, hist, n):
    """Reads every partition from its start to its high watermark; records each record."""
    marks = watermarks(a)
    hist.add("final-begin", n=n, marks={str(p): list(m) for p, m in marks.items()})
    c = ck.Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group + "-final",
                     "enable.auto.commit": False, "auto.offset.reset": "error",
                     "client.id": f"fault-final-{n}"})
    pos = {p: -1 for p in marks}
    todo = {p for p, (lo, hi) in marks.items() if hi > lo}
    c.assign([ck.TopicPartition(a.topic, p, ck.OFFSET_BEGINNING) for p in todo])
    deadline = time.monotonic() + 120
    errors = 0
    while todo and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                errors += 1
                hist.add("final-error", n=n, err=err_name(m.error()), p=m.partition())
                continue
            p, o = m.partition(), m.offset()
            v = m.value().decode(errors="replace") if m.value() is not None else None
            hist.add("final", n=n, p=p, o=o, v=v)
            pos[p] = o
            if o >= marks[p][1] - 1:
                todo.discard(p)
    c.close()
    for p, (lo, hi) in sorted(marks.items()):
        hist.add("final-end", n=n, p=p, low=lo, high=hi, last=pos[p], complete=p not in todo)
    missing = [p for p in range(a.partitions) if p not in marks]
    for p in missing:
        hist.add("final-end", n=n, p=p, low=-1, high=-1, last=-1, complete=False)
    return not todo and not missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", default="fault")
    ap.add_argument("--group", default="fault-group")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--replication-factor", default="auto")
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=100, help="values/s per producer")
    ap.add_argument("--message-timeout-ms", type=int, default=0,
                    help="0: 12000 with RF=1, 60000 with RF>1")
    ap.add_argument("--history", required=True)
    ap.add_argument("--t0", type=float, required=True, help="CLOCK_MONOTONIC of the campaign's start")
    a = ap.parse_args()

    hist = History(a.history, a.t0)
    stats = {"sent": 0, "acked": 0, "failed": 0, "read": 0, "crashed": 0}
    try:
        rf, refusal = create_topic(a, hist)
        if a.message_timeout_ms <= 0:
            # With replicas a partition is never leaderless for long: a value that times
            # out in librdkafka makes it bump the idempotent producer's epoch, and values
            # it then sends again under the new epoch (possibly written already) cannot be
            # deduplicated by any broker (confluentinc/librdkafka#4953). A timeout longer
            # than any fault keeps every duplicate the broker's.
            a.message_timeout_ms = 12000 if rf == 1 else 60000
        hist.add("producer-config", message_timeout_ms=a.message_timeout_ms)
        if not wait_leaders(a):
            raise RuntimeError(f"topic {a.topic}: not every partition has a leader after 60 s")
        say(f"READY rf={rf} refused3={json.dumps(refusal)}")
        stop_prod, stop_cons = threading.Event(), threading.Event()
        read_max = {}
        producers = [ProducerSlot(a, hist, i, stop_prod, stats) for i in range(a.producers)]
        consumers = [ConsumerMember(a, hist, i, stop_cons, stats, read_max) for i in range(a.consumers)]
        monitor = CommitMonitor(a, hist, stop_cons, stats)
        for t in producers + consumers + [monitor]:
            t.start()
        reporter_stop = threading.Event()

        def report():
            while not reporter_stop.wait(10):
                say(f"PROGRESS t={hist.now():.0f}s sent={stats['sent']} acked={stats['acked']} "
                    f"failed={stats['failed']} read={stats['read']}")
        threading.Thread(target=report, daemon=True).start()

        line = sys.stdin.readline()  # "stop", or EOF when the campaign went away
        hist.add("stop", why=line.strip() or "eof")
        stop_prod.set()
        for t in producers:
            t.join()
        hist.add("producers-done", **stats)
        # Consumers catch up with the end of every partition, then commit and leave.
        marks = watermarks(a)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and \
                any(hi > lo and read_max.get(p, -1) < hi - 1 for p, (lo, hi) in marks.items()):
            time.sleep(0.5)
        behind = {str(p): [read_max.get(p, -1), hi] for p, (lo, hi) in marks.items()
                  if hi > lo and read_max.get(p, -1) < hi - 1}
        hist.add("consumers-caught-up", behind=behind)
        stop_cons.set()
        for t in consumers + [monitor]:
            t.join(timeout=60)
        reporter_stop.set()
        ok = all(final_read(a, hist, n) for n in (1, 2))
        hist.add("done", final_complete=ok, **stats)
        say(f"DONE sent={stats['sent']} acked={stats['acked']} failed={stats['failed']} "
            f"read={stats['read']} final_complete={ok}")
        hist.close()
        return 0 if stats["crashed"] == 0 else 1
    except Exception:  # noqa: BLE001 - the campaign reports it and fails
        hist.add("crash", who="workload", trace=traceback.format_exc()[-3000:])
        hist.close()
        say("CRASH " + traceback.format_exc().replace("\n", " | ")[-1500:])
        return 1


if __name__ == "__main__":
    sys.exit(main())
