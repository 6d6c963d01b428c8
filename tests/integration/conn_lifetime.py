#!/usr/bin/env python3
"""Connections that close while the broker still works for them must not hurt it.

Proves that a connection may go away at any point of a request's life without a
use-after-free, a leak or a crash in the broker: closed while its Fetch is parked
(long poll) and the fetch then expires, or is woken by new data; closed while a
large Fetch response is being sent; closed with pipelined Produce requests still
lent to the storage core; and an ordinary kcat consumer that exits at the end of
the partition while its fetch waits. At the end the broker must still answer, stop
cleanly with exit status 0, and its log must hold no sanitizer report.

The defects it guards against show under AddressSanitizer: register this test in a
sanitizer build (meson test -C build-asan --suite asan) so SLUICE_BROKER is that
build's broker. It runs against the normal build too (then it proves only that the
broker survives).
"""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, frame, log, record_batch, request_header  # noqa: E402

TOPIC = "lifetime"


def fetch_frame(corr, topic, offset, max_wait_ms, min_bytes=1, max_bytes=8 << 20):
    body = Enc().i32(-1).i32(max_wait_ms).i32(min_bytes).i32(max_bytes).i8(0)
    body.array_len(1).string(topic).array_len(1).i32(0).i64(offset).i32(max_bytes)
    return frame(request_header(1, 4, corr) + body.done())


def produce_frame(corr, topic, blob, acks=1):
    body = Enc().string(None).i16(acks).i32(10000)
    body.array_len(1).string(topic).array_len(1).i32(0).bytes_(blob)
    return frame(request_header(0, 3, corr) + body.done())


def raw(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def hard_close(s):
    # RST rather than FIN, so the broker's next send fails at once
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def sanitizer_report(b):
    try:
        with open(b.logfile, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        i = text.find(marker)
        if i >= 0:
            return text[max(0, i - 200):i + 3000]
    return None


def test():
    if lib.TARGET != "sluice":
        lib.skip("sanitizer lifetime test is for sluice-broker")
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
    os.environ.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    b = lib.Broker("lifetime", {"fetch.max.bytes": 8 << 20})
    failed = True
    try:
        b.start()
        with lib.Conn(b.port) as c:
            c.ensure_topic(TOPIC)
            val = b"x" * 100000
            for i in range(40):  # ~4 MB to read back
                err, _, _ = c.produce(TOPIC, 0, record_batch([(b"k%d" % i, val, [])]))
                check(err == 0, f"produce error {err}")
            end = 40

        # 0. A Fetch naming no partition waits max_wait_ms (it parks at once).
        with lib.Conn(b.port) as c:
            body = Enc().i32(-1).i32(200).i32(1).i32(1 << 20).i8(0).array_len(0).done()
            t = time.monotonic()
            d = c.request(1, 4, body)
            check(d.i32() == 0 and d.array_len() == 0, "empty fetch: unexpected response")
            log(f"fetch naming no partition answered after {time.monotonic() - t:.2f}s")

        # 1. Parked fetches whose connection closes, then the fetch expires.
        for round_ in range(10):
            s = raw(b.port)
            for k in range(4):
                s.sendall(fetch_frame(k + 1, TOPIC, end, max_wait_ms=300))
            time.sleep(0.05)
            (hard_close if round_ % 2 else socket.socket.close)(s)
        time.sleep(0.8)
        check(b.alive(), "broker died after parked fetches of closed connections expired")
        log("parked fetch, connection closed, fetch expired: ok")

        # 2. Parked fetches whose connection closes, then data arrives.
        socks = []
        for _ in range(5):
            s = raw(b.port)
            s.sendall(fetch_frame(1, TOPIC, end, max_wait_ms=5000))
            socks.append(s)
        time.sleep(0.1)
        for s in socks:
            s.close()
        with lib.Conn(b.port) as c:
            err, _, _ = c.produce(TOPIC, 0, record_batch([(b"wake", b"up", [])]))
            check(err == 0, f"produce error {err}")
        end += 1
        time.sleep(0.3)
        check(b.alive(), "broker died after waking parked fetches of closed connections")
        log("parked fetch, connection closed, woken by data: ok")

        # 3. Large responses: the connection closes while they are being sent.
        for round_ in range(10):
            s = raw(b.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            for k in range(3):
                s.sendall(fetch_frame(k + 1, TOPIC, 0, max_wait_ms=0))
            s.recv(1000)
            time.sleep(0.02)
            (hard_close if round_ % 2 else socket.socket.close)(s)
        time.sleep(0.3)
        check(b.alive(), "broker died after connections closed during a send")
        log("connection closed during a send: ok")

        # 4. Pipelined produce lent to the storage core when the connection closes.
        blob = record_batch([(None, b"p" * 1000, [])] * 20)
        for round_ in range(10):
            s = raw(b.port)
            s.sendall(b"".join(produce_frame(k + 1, TOPIC, blob, acks=(1, 0, -1)[k % 3])
                               for k in range(60)))
            (hard_close if round_ % 2 else socket.socket.close)(s)
        time.sleep(0.5)
        check(b.alive(), "broker died after connections closed with produce in flight")
        log("connection closed with produce ops lent to storage: ok")

        # 5. Ordinary consumers reading to the end of the partition and exiting.
        kcat = lib.kcat_path(required=False)
        if kcat:
            for _ in range(5):
                r = lib.run([kcat, "-b", b.bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q",
                             "-X", "fetch.wait.max.ms=500"], timeout=60)
                check(r.returncode == 0, f"kcat exited {r.returncode}: {r.stderr[-500:]}")
            log("kcat consumers exiting at the end of the partition: ok")

        # The broker still works, then stops cleanly.
        with lib.Conn(b.port) as c:
            c.api_versions()
            err, hw, _ = c.fetch(TOPIC, 0, 0)
            check(err == 0 and hw >= end, f"fetch after the closes: error {err}, high watermark {hw}")
        check(b.alive(), "broker died")
        # 6. Shutdown with connections still open: one idle, one with a parked
        # fetch, one with unread responses.
        idle = raw(b.port)
        parked = raw(b.port)
        parked.sendall(fetch_frame(1, TOPIC, end, max_wait_ms=10000))
        unread = raw(b.port)
        unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for k in range(5):
            unread.sendall(fetch_frame(k + 1, TOPIC, 0, max_wait_ms=0))
        time.sleep(0.3)
        rc = b.stop(quiet=True)
        for s in (idle, parked, unread):
            s.close()
        rep = sanitizer_report(b)
        check(rep is None, f"sanitizer report in the broker log:\n{rep}")
        check(rc == 0, f"broker exited {rc} on SIGTERM (want 0)")
        failed = False
    finally:
        rep = sanitizer_report(b) if failed else None
        if rep:
            log(f"sanitizer report:\n{rep}")
        b.cleanup(failed=failed)


if __name__ == "__main__":
    lib.main(test)
