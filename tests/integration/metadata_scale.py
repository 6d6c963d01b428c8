#!/usr/bin/env python3
"""Creating many topics is cheap, never stalls other clients, and survives crashes.

Proves that:
  1. 20,000 topics created by CreateTopics requests of 1,000 are all created within a
     generous bound (seconds; one metadata journal append and fsync per request, not
     a rewrite of every topic per topic), while a second connection's ApiVersions and
     Metadata round trips keep being answered (the maximum latency is reported and
     held to a generous bound);
  2. a CreatePartitions request growing 2,000 topics is answered, and the topics and
     their partition counts survive a clean restart;
  3. a kill -9 in the middle of further creation leaves metadata that loads, with
     every acknowledged topic present.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402
from metadata_safety import create_topics  # noqa: E402

TOPICS = int(os.environ.get("SLUICE_META_TOPICS", "20000"))
PER_REQUEST = 1000
CREATE_BOUND_S = 60.0   # the old per-topic rewrite needed minutes for this
LATENCY_BOUND_S = 5.0   # it stalled other clients for 16-27 s


class Probe(threading.Thread):
    """ApiVersions + Metadata round trips on their own connection, timed."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.max_s, self.n, self.err = port, False, 0.0, 0, None

    def run(self):
        try:
            with lib.Conn(self.port, timeout=60) as c:
                while not self.stop:
                    t0 = time.monotonic()
                    c.api_versions()
                    c.metadata(["probe"], auto_create=False)
                    self.max_s = max(self.max_s, time.monotonic() - t0)
                    self.n += 1
                    time.sleep(0.02)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.err = e


def create_range(conn, names, per_request, acked=None, deadline=None):
    for i in range(0, len(names), per_request):
        chunk = names[i:i + per_request]
        res = create_topics(conn, [(n, 1) for n in chunk])
        bad = {n: e for n, e in res.items() if e != 0}
        check(not bad, f"CreateTopics errors: {list(bad.items())[:5]}")
        if acked is not None:
            acked.extend(chunk)
        if deadline and time.monotonic() > deadline:
            raise lib.TestFailure(f"only {i + len(chunk)} of {len(names)} topics created in {CREATE_BOUND_S:.0f} s")


def create_partitions(conn, names, count):
    e = lib.Enc().array_len(len(names))
    for n in names:
        e.string(n).i32(count).array_len(-1)
    e.i32(30000).i8(0)
    d = conn.request(37, 1, e.done())
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        name, err = d.string(), d.i16()
        d.string()
        out[name] = err
    return out


def all_topics(port):
    with lib.Conn(port, timeout=60) as c:
        _, topics = c.metadata(None, auto_create=False)
    return topics


def test():
    if lib.TARGET != "sluice":
        lib.skip("Sluice's metadata journal")
    with lib.Broker("meta-scale", {"auto.create.topics.enable": "false"}) as broker:
        with lib.Conn(broker.port, timeout=60) as c:
            check(create_topics(c, [("probe", 1)]) == {"probe": 0}, "create the probe topic")
            probe = Probe(broker.port)
            probe.start()
            names = [f"t-{i:05d}" for i in range(TOPICS)]
            t0 = time.monotonic()
            create_range(c, names, PER_REQUEST, deadline=t0 + CREATE_BOUND_S)
            took = time.monotonic() - t0
            probe.stop = True
            probe.join(70)
        check(probe.err is None, f"probe connection failed: {probe.err}")
        log(f"{TOPICS} topics in requests of {PER_REQUEST}: {took:.2f} s ({TOPICS / took:.0f}/s); "
            f"other connection: {probe.n} round trips, max ApiVersions+Metadata latency {probe.max_s * 1000:.0f} ms")
        check(probe.n > 0, "the probe got no answer at all")
        check(probe.max_s < LATENCY_BOUND_S, f"another client waited {probe.max_s:.1f} s")
        sizes = {f: os.path.getsize(os.path.join(broker.datadir, f))
                 for f in os.listdir(broker.datadir) if f.startswith("sluice-topics")}
        log(f"metadata files: {sizes}")

        # one CreatePartitions request growing 2,000 topics is one batch too
        with lib.Conn(broker.port, timeout=60) as c:
            t0 = time.monotonic()
            res = create_partitions(c, names[:2000], 2)
            log(f"CreatePartitions of 2,000 topics in one request: {time.monotonic() - t0:.2f} s")
            check(set(res.values()) == {0}, f"CreatePartitions errors: {[r for r in res.items() if r[1]][:5]}")

        t0 = time.monotonic()
        broker.restart()
        log(f"clean restart with {TOPICS + 1} topics: {time.monotonic() - t0:.2f} s")
        topics = all_topics(broker.port)
        missing = [n for n in names if n not in topics]
        check(not missing, f"{len(missing)} topics lost by a clean restart, e.g. {missing[:3]}")
        check(all(len(topics[n][1]) == 2 for n in names[:2000]) and len(topics[names[2000]][1]) == 1,
              "partition counts after the restart")

        # kill -9 while another 40,000 are being created in requests of 250 (far
        # more than are acknowledged before the kill: an idle machine creates
        # 5,000 in about 50 ms, so a smaller round could finish before it)
        more = [f"k-{i:05d}" for i in range(40000)]
        acked = []

        def creator():
            try:
                with lib.Conn(broker.port, timeout=60) as c2:
                    create_range(c2, more, 250, acked=acked)
            except (OSError, lib.ProtocolError, lib.TestFailure):
                pass  # the broker died under it

        th = threading.Thread(target=creator, daemon=True)
        th.start()
        rnd = lib.rng()
        wait = time.monotonic() + 20
        target = rnd.randint(1, 12) * 250
        while len(acked) < target and th.is_alive() and time.monotonic() < wait:
            time.sleep(0.001)
        time.sleep(rnd.uniform(0, 0.005))
        broker.kill9()
        th.join(30)
        log(f"kill -9 after {len(acked)} acknowledged topics of the second round")
        check(0 < len(acked) < len(more), f"the kill came at a useful moment ({len(acked)} acknowledged)")
        broker.start()
        topics = all_topics(broker.port)
        lost = [n for n in acked if n not in topics]
        check(not lost, f"{len(lost)} acknowledged topics lost by kill -9, e.g. {lost[:3]}")
        check(all(n in topics for n in names), "first-round topics after kill -9")
        log(f"after kill -9: {len(topics)} topics, every acknowledged one present")


if __name__ == "__main__":
    lib.main(test)
