#!/usr/bin/env python3
"""One client cannot exhaust the broker: per-connection and per-broker budgets, timeouts.

Proves, with small budgets set in the broker's properties:
1. A raw client that pipelines hundreds of Fetch requests for a topic holding data
   and never reads its responses does not grow the broker's memory (VmRSS, from
   /proc/<pid>/status) by more than a bound near sluice.connection.response.bytes.max:
   the broker stops reading that connection instead of building every response.
   Meanwhile another connection (raw client, and kcat) is served, and the stuck
   connection is closed once it has been idle for connections.max.idle.ms.
2. An idle connection is closed after connections.max.idle.ms, not before.
3. A request frame trickled a byte at a time, slower than
   sluice.request.receive.timeout.ms, gets its connection closed.
4. Frames read but not yet served count against queued.max.request.bytes for the
   whole broker: while parked Fetch requests fill it, a request on another
   connection is not read (its answer waits until they expire) but is not dropped.
5. (a second broker) Six connections that pipeline unread fetches, each within a
   large per-connection budget, are bounded together by sluice.response.bytes.max,
   and a client with one request at a time is still served. Sixty quiet connections
   that each fetched once keep no more response buffers than a quarter of it.
6. One Fetch naming a partition 200 times reads about its MaxBytes, not 200 times
   it (peak RSS, VmHWM).
SLUICE_BUDGETS_PARTS=135 runs only some parts. Under AddressSanitizer (suite asan) the
memory bounds are reported, not checked: its quarantine keeps freed memory resident.
"""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, frame, log, record_batch, request_header  # noqa: E402

TOPIC = "budgets"
MiB = 1 << 20
RESP_BUDGET = 2 * MiB
FETCH_MAX = 1 * MiB
IDLE_MS = 3000
FRAME_MS = 1500
RSS_GROWTH_MAX = 48 * MiB   # unbounded, 128 fetches x (1 MiB read + 1 MiB response) ~ 256 MiB


def fetch_frame(corr, topic, offset, max_wait_ms=0, min_bytes=1, max_bytes=FETCH_MAX):
    body = Enc().i32(-1).i32(max_wait_ms).i32(min_bytes).i32(max_bytes).i8(0)
    body.array_len(1).string(topic).array_len(1).i32(0).i64(offset).i32(max_bytes)
    return frame(request_header(1, 4, corr) + body.done())


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise lib.TestFailure("no VmRSS")


def sanitized(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def check_rss(b, cond, what):
    """A memory bound holds only outside AddressSanitizer, whose quarantine keeps
    freed memory resident: there it is reported, not checked."""
    if sanitized(b.pid):
        if not cond:
            log(f"NOTE (AddressSanitizer build, not checked): {what}")
        return
    check(cond, what)


def tcp_state(s):
    return struct.unpack("B", s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[:1])[0]


TCP_ESTABLISHED = 1


def closed_by_peer(s):
    """True once the broker has closed s (FIN or RST), without reading data."""
    return tcp_state(s) != TCP_ESTABLISHED


def wait_closed(s, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if closed_by_peer(s):
            return True
        time.sleep(0.05)
    return False


def fill(b):
    with lib.Conn(b.port) as c:
        c.ensure_topic(TOPIC)
        for i in range(32):  # 32 x 100 KiB x 3 = ~9.6 MB
            err, _, _ = c.produce(TOPIC, 0, record_batch([(b"k", os.urandom(100 << 10), [])] * 3))
            check(err == 0, f"produce error {err}")


def unread_pipeline(port, n):
    """A connection that sends n Fetch requests (as many as the broker takes
    within 1 s) and never reads."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.setblocking(False)
    burst = b"".join(fetch_frame(k + 1, TOPIC, 0) for k in range(n))
    sent = 0
    t_end = time.monotonic() + 1.0
    while sent < len(burst) and time.monotonic() < t_end:
        try:
            sent += s.send(burst[sent:])
        except BlockingIOError:
            time.sleep(0.01)
    return s


def served(b, what):
    with lib.Conn(b.port, timeout=10) as c:
        t = time.monotonic()
        err, hw, blob = c.fetch(TOPIC, 0, 0, max_bytes=FETCH_MAX)
        n = sum(x["count"] for x in lib.parse_batches(blob))
        check(err == 0 and n > 0, f"{what}: fetch on another connection: error {err}, {n} records")
        return time.monotonic() - t


def test():
    if lib.TARGET != "sluice":
        lib.skip("sluice budgets (sluice.* properties, /proc of the broker)")
    props = {
        "sluice.connection.response.bytes.max": RESP_BUDGET,
        "fetch.max.bytes": FETCH_MAX,
        "connections.max.idle.ms": IDLE_MS,
        "sluice.request.receive.timeout.ms": FRAME_MS,
        "queued.max.request.bytes": 4096,
        "sluice.cache.bytes.max": 16 * MiB,
    }
    b = lib.Broker("budgets", props)
    failed = True
    parts = ""
    try:
        b.start()
        fill(b)
        served(b, "warm-up")
        time.sleep(0.3)
        base = rss(b.pid)

        parts = os.environ.get("SLUICE_BUDGETS_PARTS", "123456")  # to run some parts alone
        if "1" in parts:
            part_unread(b, base)
        if "2" in parts:
            part_idle(b)
        if "3" in parts:
            part_trickle(b)
        if "4" in parts:
            part_queue(b)
        if "6" in parts:
            part_one_fetch(b)
        check(b.alive(), "broker died")
        b.stop()
        failed = False
    finally:
        b.cleanup(failed=failed)
    if "5" in parts:
        part_broker_budget()


def part_unread(b, base):
    # 1. Pipelined fetches never read.
    hog = unread_pipeline(b.port, 600)
    time.sleep(1.0)
    peak = max(rss(b.pid) for _ in range(5) if time.sleep(0.05) is None)
    growth = peak - base
    log(f"broker RSS {base / MiB:.1f} MiB before, {peak / MiB:.1f} MiB with the unread pipeline"
        f"; growth {growth / MiB:.1f} MiB")
    check_rss(b, growth < RSS_GROWTH_MAX, f"broker RSS grew {growth / MiB:.1f} MiB for one client that does "
                                   f"not read (bound {RSS_GROWTH_MAX / MiB:.0f} MiB)")
    took = served(b, "while a client does not read")
    check(took < 2.0, f"another connection waited {took:.1f}s for its fetch")
    kcat = lib.kcat_path(required=False)
    if kcat:
        r = lib.run([kcat, "-b", b.bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-c", "5", "-q",
                     "-f", "%o\\n"], timeout=30)
        check(r.returncode == 0 and len(r.stdout.split()) == 5,
              f"kcat while a client does not read: exit {r.returncode}, {r.stdout[:100]!r} {r.stderr[-300:]}")
    log("another connection (raw, kcat) served meanwhile")
    check(not closed_by_peer(hog), "the non-reading connection was closed before it was idle")
    check(wait_closed(hog, IDLE_MS / 1000 + 3), "the non-reading connection was not closed after "
                                                f"connections.max.idle.ms={IDLE_MS}")
    hog.close()
    log("the non-reading connection was closed once idle")


def part_idle(b):
    # 2. An idle connection.
    idle = lib.Conn(b.port)
    idle.api_versions()
    t0 = time.monotonic()
    check(wait_closed(idle.sock, IDLE_MS / 1000 + 3), f"an idle connection was not closed after "
                                                      f"connections.max.idle.ms={IDLE_MS}")
    took = time.monotonic() - t0
    check(took > IDLE_MS / 1000 - 0.5, f"an idle connection was closed after {took:.1f}s, "
                                       f"before connections.max.idle.ms={IDLE_MS}")
    idle.close()
    log(f"idle connection closed after {took:.1f}s")


def part_trickle(b):
    # 3. A frame trickled slower than the receive time-out.
    slow = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    req = frame(request_header(18, 0, 1))
    t0 = time.monotonic()
    closed_at = None
    for i in range(len(req) - 1):
        try:
            slow.send(req[i:i + 1])
        except OSError:
            closed_at = time.monotonic() - t0
            break
        time.sleep(0.3)
        if closed_by_peer(slow):
            closed_at = time.monotonic() - t0
            break
    slow.close()
    check(closed_at is not None, "a frame trickled a byte per 300 ms was still read after "
                                 f"{time.monotonic() - t0:.1f}s (receive time-out {FRAME_MS} ms)")
    check(closed_at < IDLE_MS / 1000, f"trickled frame: closed only after {closed_at:.1f}s")
    log(f"trickled frame: connection closed after {closed_at:.1f}s")


def part_queue(b):
    # 4. queued.max.request.bytes: parked fetches (not yet served) fill it.
    parker = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    with lib.Conn(b.port) as c:
        _, hw, _ = c.fetch(TOPIC, 0, 0, max_wait_ms=0)
    nparked = 80  # ~80 bytes each: twice the queue; small max_bytes, so the
    # connection's own response budget is not what stops them
    parker.sendall(b"".join(fetch_frame(k + 1, TOPIC, hw, max_wait_ms=2000, max_bytes=1024)
                            for k in range(nparked)))
    time.sleep(0.3)
    other = lib.Conn(b.port, timeout=15)
    t0 = time.monotonic()
    other.api_versions()
    waited = time.monotonic() - t0
    other.close()
    check(waited > 1.0, f"a request on another connection was answered after {waited:.2f}s while "
                        f"unserved fetches held queued.max.request.bytes (expected to wait for them)")
    got = 0
    parker.settimeout(15)
    buf = b""
    while got < nparked:
        chunk = parker.recv(1 << 16)
        check(chunk, f"the parked fetches' connection closed after {got} of {nparked} responses")
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
            buf = buf[4 + struct.unpack(">i", buf[:4])[0]:]
            got += 1
    parker.close()
    log(f"queued.max.request.bytes: another connection waited {waited:.1f}s, then was answered; "
        f"all {nparked} parked fetches answered")


def hwm(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise lib.TestFailure("no VmHWM")


def part_one_fetch(b):
    # 6. One Fetch naming the same partition 200 times, each with the whole
    # fetch.max.bytes as its partition limit: the broker reads about the
    # request's MaxBytes, not 200 times it (its peak RSS says so).
    time.sleep(0.3)
    peak0 = hwm(b.pid)
    n = 200
    body = Enc().i32(-1).i32(0).i32(1).i32(FETCH_MAX).i8(0).array_len(1).string(TOPIC).array_len(n)
    for _ in range(n):
        body.i32(0).i64(0).i32(FETCH_MAX)
    with lib.Conn(b.port, timeout=30) as c:
        d = c.request(1, 4, body.done())
        d.i32()
        check(d.array_len() == 1, "one topic expected")
        d.string()
        got = 0
        for _ in range(d.array_len()):
            d.i32(), d.i16(), d.i64(), d.i64()
            d.array_len()
            got += len(d.bytes_() or b"")
    grew = hwm(b.pid) - peak0
    log(f"one Fetch naming a partition {n} times: {got} record bytes answered, broker peak RSS "
        f"+{grew / MiB:.1f} MiB")
    check(got > 0, "the fetch returned no records")
    check_rss(b, grew < RSS_GROWTH_MAX, f"one Fetch naming a partition {n} times raised the broker's peak RSS by "
                                 f"{grew / MiB:.1f} MiB (bound {RSS_GROWTH_MAX / MiB:.0f} MiB)")


def part_broker_budget():
    # 5. Many connections that pipeline and never read, each within its own
    # budget: sluice.response.bytes.max bounds them together, and a client
    # with one request at a time is still served.
    props = {
        "sluice.connection.response.bytes.max": 64 * MiB,
        "sluice.response.bytes.max": 4 * MiB,
        "fetch.max.bytes": FETCH_MAX,
        "sluice.cache.bytes.max": 16 * MiB,
    }
    b = lib.Broker("budgets-broker", props)
    failed = True
    # Freed buffers of 128 KiB and more go back to the system at once (no
    # dynamic mmap threshold), so RSS shows what the broker still holds.
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 << 10)
    try:
        b.start()
        del os.environ["MALLOC_MMAP_THRESHOLD_"]
        fill(b)
        served(b, "warm-up")
        time.sleep(0.3)
        base = rss(b.pid)
        hogs = [unread_pipeline(b.port, 100) for _ in range(6)]
        time.sleep(1.0)
        growth = rss(b.pid) - base
        log(f"6 connections pipelining 100 unread fetches each: broker RSS +{growth / MiB:.1f} MiB")
        check_rss(b, growth < RSS_GROWTH_MAX, f"broker RSS grew {growth / MiB:.1f} MiB for 6 clients that do not "
                                       f"read (sluice.response.bytes.max 4 MiB; bound {RSS_GROWTH_MAX / MiB:.0f} MiB)")
        took = served(b, "while 6 clients do not read")
        check(took < 2.0, f"another connection waited {took:.1f}s for its fetch")
        for h in hogs:
            h.close()

        # Quiet connections keep their last response buffer only within a
        # quarter of sluice.response.bytes.max, all together.
        time.sleep(0.5)
        base = rss(b.pid)
        quiet = [lib.Conn(b.port) for _ in range(60)]
        for c in quiet:
            err, _, blob = c.fetch(TOPIC, 0, 0, max_bytes=FETCH_MAX)
            check(err == 0 and blob, f"fetch error {err}")
        time.sleep(0.5)
        growth = rss(b.pid) - base
        log(f"60 quiet connections after one {FETCH_MAX >> 20} MiB fetch each: broker RSS +{growth / MiB:.1f} MiB")
        check_rss(b, growth < 16 * MiB, f"60 quiet connections hold {growth / MiB:.1f} MiB of the broker's memory "
                                 f"(kept response buffers, bound 16 MiB)")
        for c in quiet:
            c.close()
        check(b.alive(), "broker died")
        b.stop()
        failed = False
    finally:
        b.cleanup(failed=failed)


if __name__ == "__main__":
    lib.main(test)
