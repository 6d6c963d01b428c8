#!/usr/bin/env python3
"""One client naming tens of thousands of partitions in one request must not
exhaust the broker. Proves, with the broker under `ulimit -n 1024`:

- a Produce naming every partition of a 4,000-partition topic (eight times the
  descriptor budget; SLUICE_MANY_PARTITIONS sets another count) is answered for
  every partition, without error, while the broker's open descriptors
  (/proc/<pid>/fd) stay under the limit;
- meanwhile a second client's produce to another topic is answered;
- a Fetch and a ListOffsets naming all of them are answered right;
- SIGTERM sent while a second such Produce is being worked on stops the broker
  cleanly (exit 0) within 30 s (it closes every partition written, on 8
  threads: a few seconds for 4,000).

Prints the measured times and the peak descriptor count.
"""
import os
import resource
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

NOFILE = 1024
PARTS = int(os.environ.get("SLUICE_MANY_PARTITIONS", "4000"))
TOPIC = "wide"
OTHER = "narrow"


def create_topic(port, name, parts):
    e = lib.Enc().array_len(1).string(name).i32(parts).i16(1).array_len(0).array_len(0)
    e.i32(120000).i8(0)
    with lib.Conn(port, timeout=180) as c:
        d = c.request(19, 4, e.done())
        d.i32()
        d.array_len()
        d.string()
        return d.i16()


def produce_body(topic, parts, batch):
    e = lib.Enc().string(None).i16(1).i32(60000)
    e.array_len(1).string(topic).array_len(len(parts))
    for p in parts:
        e.i32(p).bytes_(batch)
    return e.done()


def read_produce(d):
    out = {}
    for _ in range(d.array_len()):
        d.string()
        for _ in range(d.array_len()):
            idx, err, base = d.i32(), d.i16(), d.i64()
            d.i64()  # log append time
            out[idx] = (err, base)
    return out


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class FdWatch(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, fd_count(self.pid))
            time.sleep(0.05)


def big_request(port, api_key, version, body, timeout=240):
    """Sends one request and returns (seconds, Dec of the response)."""
    t0 = time.monotonic()
    with lib.Conn(port, timeout=timeout) as c:
        d = c.request(api_key, version, body)
    return time.monotonic() - t0, d


def second_client(port, res):
    """Produces to OTHER once a second while the wide request runs."""
    batch = lib.record_batch([(b"k", b"second client", [])])
    lat = []
    with lib.Conn(port, timeout=120) as c:
        while not res.get("wide_done"):
            t0 = time.monotonic()
            r = c.produce(OTHER, 0, batch)
            lat.append(time.monotonic() - t0)
            check(r and r[0] == 0, f"second client's produce failed: {r}")
            time.sleep(0.5)
    res["second"] = lat


def test():
    if lib.TARGET != "sluice":
        lib.skip("checks Sluice's descriptors")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, max(NOFILE, hard) if hard != resource.RLIM_INFINITY else hard))
    b = lib.Broker("many-partitions", {"auto.create.topics.enable": "false", "num.partitions": 1})
    try:
        b.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        check(create_topic(b.port, TOPIC, PARTS) == 0, "CreateTopics of the wide topic failed")
        check(create_topic(b.port, OTHER, 1) == 0, "CreateTopics failed")
        with lib.Conn(b.port) as c:
            c.ensure_topic(OTHER)
        watch = FdWatch(b.pid)
        watch.start()
        res = {}
        batch = lib.record_batch([(b"key", b"value", [])])
        side = threading.Thread(target=second_client, args=(b.port, res), daemon=True)
        side.start()
        secs, d = big_request(b.port, 0, 3, produce_body(TOPIC, range(PARTS), batch))
        res["wide_done"] = True
        side.join(60)
        got = read_produce(d)
        bad = {p: v for p, v in got.items() if v != (0, 0)}
        log(f"Produce naming {PARTS} partitions answered in {secs:.1f}s; "
            f"peak descriptors {watch.peak} (limit {NOFILE})")
        check(len(got) == PARTS, f"{len(got)} of {PARTS} partitions answered")
        check(not bad, f"{len(bad)} partitions failed, e.g. {list(bad.items())[:5]}")
        lat = res.get("second", [])
        log(f"second client: {len(lat)} produces during it, slowest {max(lat or [0]):.2f}s")
        check(lat, "the second client got no answer while the wide request ran")
        check(b.alive(), "broker died")

        # Fetch v4 of every partition from offset 0: one record each.
        e = lib.Enc().i32(-1).i32(0).i32(1).i32(64 << 20).i8(0)
        e.array_len(1).string(TOPIC).array_len(PARTS)
        for p in range(PARTS):
            e.i32(p).i64(0).i32(4096)
        secs, d = big_request(b.port, 1, 4, e.done())
        d.i32()
        fetched = errs = 0
        for _ in range(d.array_len()):
            d.string()
            for _ in range(d.array_len()):
                _idx, err, hw = d.i32(), d.i16(), d.i64()
                d.i64()
                for _ in range(max(d.array_len(), 0)):
                    d.i64(), d.i64()
                blob = d.bytes_() or b""
                errs += err != 0 or hw != 1
                fetched += sum(1 for _ in lib.parse_batches(blob))
        log(f"Fetch naming {PARTS} partitions answered in {secs:.1f}s, {fetched} batches; "
            f"peak descriptors {watch.peak}")
        check(errs == 0 and fetched == PARTS, f"fetch: {errs} errors, {fetched} batches of {PARTS}")

        # ListOffsets v1 (latest) of every partition.
        e = lib.Enc().i32(-1).array_len(1).string(TOPIC).array_len(PARTS)
        for p in range(PARTS):
            e.i32(p).i64(-1)
        secs, d = big_request(b.port, 2, 1, e.done())
        wrong = 0
        for _ in range(d.array_len()):
            d.string()
            for _ in range(d.array_len()):
                _idx, err, _ts, off = d.i32(), d.i16(), d.i64(), d.i64()
                wrong += err != 0 or off != 1
        log(f"ListOffsets naming {PARTS} partitions answered in {secs:.1f}s; peak descriptors {watch.peak}")
        check(wrong == 0, f"ListOffsets: {wrong} wrong answers")
        check(watch.peak < NOFILE, f"descriptors peaked at {watch.peak}, limit {NOFILE}")

        with open(f"/proc/{b.pid}/status") as f:
            hwm = [ln.split()[1] for ln in f if ln.startswith("VmHWM")]
        log(f"broker peak RSS {int(hwm[0]) // 1024 if hwm else '?'} MiB")

        # SIGTERM while another wide produce is being worked on.
        s = socket.create_connection(("127.0.0.1", b.port))
        body = produce_body(TOPIC, range(PARTS), batch)
        s.sendall(lib.frame(lib.request_header(0, 3, 1) + body))
        time.sleep(1.0)
        t0 = time.monotonic()
        rc = b.stop(timeout=30)
        secs = time.monotonic() - t0
        s.close()
        watch.stop = True
        log(f"SIGTERM mid-request: exited {rc} in {secs:.1f}s")
        check(secs < 30, f"SIGTERM took {secs:.1f}s")
    finally:
        b.cleanup()


if __name__ == "__main__":
    lib.main(test)
