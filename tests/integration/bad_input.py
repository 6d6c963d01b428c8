#!/usr/bin/env python3
"""Malformed and hostile requests over raw sockets must not hurt the broker.

A healthy client thread keeps producing and fetching (raw Produce v9 / Fetch v4 on
one persistent connection, every record read back and compared) while the main
thread opens a fresh connection per case and sends bad input: truncated frames,
a declared length larger than what is sent, oversized/negative/zero lengths, HTTP,
random garbage, unknown API keys, unsupported versions, counts and lengths larger
than the frame, and Produce requests with broken record batches. Every socket has
a timeout, so a case that leaves the connection hanging fails instead of hanging.

For each case the expectation is the set of outcomes accepted from Sluice, with
Apache Kafka's observed behaviour (4.1) first; where Sluice answers differently
but acceptably the test prints a NOTE. At the end the broker must still be alive,
the healthy client must have succeeded throughout, and kcat must still work.
"""
import os
import random
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, frame, log, record_batch, request_header  # noqa: E402

TIMEOUT = 10.0
CLOSE = "close"          # broker closed the connection without answering
RESPONSE = "response"    # any response frame with our correlation id
HANG = "hang"            # nothing within the time-out (only for documented cases)


# ------------------------------------------------------------------ healthy client

class Healthy(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.ok = 0
        self.failures = []
        self.stop_ev = threading.Event()
        self.max_latency = 0.0

    def run(self):
        conn = None
        i = 0
        while not self.stop_ev.is_set():
            t = time.monotonic()
            try:
                if conn is None:
                    conn = lib.Conn(self.port, timeout=TIMEOUT)
                key = b"healthy-%06d" % i
                val = b"value-%06d-" % i + bytes(range(256))
                err, base, _ = conn.produce("healthy", 0, record_batch([(key, val, [(b"n", b"%d" % i)])]),
                                            version=9)
                if err:
                    raise lib.ProtocolError(f"produce error {err}")
                err, hw, blob = conn.fetch("healthy", 0, base)
                if err:
                    raise lib.ProtocolError(f"fetch error {err}")
                found = [r for b in lib.parse_batches(blob) if b["codec"] == 0
                         for r in lib.decode_records(b["raw"]) if r[0] == base]
                if not found or found[0][1] != key or found[0][2] != val:
                    raise lib.ProtocolError(f"record at {base} not read back intact")
                self.ok += 1
            except (OSError, lib.ProtocolError) as e:
                self.failures.append(f"iteration {i}: {e!r}")
                if conn:
                    conn.close()
                conn = None
            self.max_latency = max(self.max_latency, time.monotonic() - t)
            i += 1
            self.stop_ev.wait(0.05)
        if conn:
            conn.close()


# ------------------------------------------------------------------ case runner

class Runner:
    def __init__(self, broker):
        self.broker = broker
        self.failures = []
        self.notes = []
        self.results = []

    def attempt(self, name, data, expect, shutdown_write=False, hold=0.0, corr=None,
                after_send=None):
        """Sends data on a new connection and classifies the outcome as CLOSE,
        RESPONSE (a full frame arrived) or HANG. expect: list of accepted outcomes,
        Kafka's first. Returns (outcome, response_payload)."""
        outcome, payload = None, None
        try:
            s = socket.create_connection(("127.0.0.1", self.broker.port), timeout=TIMEOUT)
        except OSError as e:
            self.failures.append(f"{name}: cannot connect: {e}")
            return None, None
        s.settimeout(TIMEOUT)
        try:
            try:
                s.sendall(data)
            except OSError:
                pass  # broker may close while we are still sending: fine
            if hold:
                time.sleep(hold)
            if after_send:
                after_send()
            if shutdown_write:
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            buf = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    outcome = HANG
                    break
                except OSError:  # reset
                    outcome = CLOSE
                    break
                if not chunk:
                    outcome = CLOSE if len(buf) < 4 else RESPONSE
                    break
                buf += chunk
                if len(buf) >= 4:
                    n = struct.unpack(">i", buf[:4])[0]
                    if len(buf) >= 4 + n:
                        outcome, payload = RESPONSE, buf[4:4 + n]
                        break
        finally:
            s.close()
        if outcome == RESPONSE and corr is not None and payload is not None:
            got = struct.unpack(">i", payload[:4])[0] if len(payload) >= 4 else None
            if got != corr:
                self.failures.append(f"{name}: response correlation id {got}, sent {corr}")
        self._judge(name, outcome, expect)
        return outcome, payload

    def _judge(self, name, outcome, expect):
        self.results.append((name, outcome))
        if outcome not in expect:
            self.failures.append(f"{name}: got {outcome}, expected {' or '.join(expect)}")
        elif outcome != expect[0]:
            self.notes.append(f"{name}: {outcome} (Kafka: {expect[0]})")
        log(f"  {name:58s} {outcome}")
        if not self.broker.alive():
            self.failures.append(f"{name}: BROKER DIED")
            raise lib.TestFailure(f"broker died after case '{name}'")

    def produce_case(self, name, conn_box, blob, expect_codes, version=9, topic="badin",
                     partition=0, acks=-1, allow_close=False, allow_hang=False, timeout=TIMEOUT):
        """Raw Produce on the shared connection; expect_codes: accepted error codes,
        Kafka's first."""
        outcome = None
        try:
            if conn_box[0] is None:
                conn_box[0] = lib.Conn(self.broker.port, timeout=TIMEOUT)
            conn_box[0].sock.settimeout(timeout)
            res = conn_box[0].produce(topic, partition, blob, version=version, acks=acks)
            code = res[0]
            outcome = f"error {code}"
            if code not in expect_codes:
                self.failures.append(f"{name}: error code {code}, expected one of {expect_codes}")
            elif code != expect_codes[0]:
                self.notes.append(f"{name}: error {code} (Kafka: {expect_codes[0]})")
        except socket.timeout:
            conn_box[0].close()
            conn_box[0] = None
            outcome = HANG
            if not allow_hang:
                self.failures.append(f"{name}: no answer within {timeout}s")
        except (lib.ConnectionClosed, ConnectionError) as e:
            conn_box[0].close()
            conn_box[0] = None
            outcome = CLOSE
            if not allow_close:
                self.failures.append(f"{name}: connection closed ({e}), expected an error code")
        self.results.append((name, outcome))
        log(f"  {name:58s} {outcome}")
        if not self.broker.alive():
            self.failures.append(f"{name}: BROKER DIED")
            raise lib.TestFailure(f"broker died after case '{name}'")
        return outcome


def hdr(api, ver, corr=7, flexible=False):
    return request_header(api, ver, corr, flexible=flexible)


def test():
    rnd = random.Random(20261130)
    with lib.Broker("bad-input", {"num.partitions": 1}) as broker:
        with lib.Conn(broker.port) as c:
            c.ensure_topic("healthy")
            c.ensure_topic("badin")
            versions = c.api_versions()
        av_max = versions[18][1]

        healthy = Healthy(broker.port)
        healthy.start()
        r = Runner(broker)
        A = r.attempt
        try:
            log("framing")
            A("truncated frame, client closes", struct.pack(">i", 100) + b"\x00\x12\x00", [CLOSE],
              shutdown_write=True)
            # The broker cannot know more bytes will never come: it must keep serving
            # others meanwhile, and close once the client half-closes.
            A("declared length > bytes sent (held 2 s, then EOF)",
              struct.pack(">i", 100) + hdr(18, 0)[:6], [CLOSE], hold=2.0, shutdown_write=True)
            A("length 2^31-1 (no further bytes needed to reject)",
              struct.pack(">i", 2**31 - 1) + b"\x00\x03", [CLOSE, RESPONSE])
            A("length 200 MB", struct.pack(">i", 200 << 20) + hdr(3, 1), [CLOSE, RESPONSE])
            A("length -5", struct.pack(">i", -5), [CLOSE])
            A("length 0", struct.pack(">i", 0), [CLOSE])
            A("length 3 (shorter than a request header)", frame(b"\x00\x03\x00"), [CLOSE])
            A("HTTP request on the Kafka port", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", [CLOSE])
            for k in range(3):
                junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(8, 200)))
                A(f"random garbage #{k} ({len(junk)} bytes, framed)", frame(junk),
                  [CLOSE, RESPONSE])
            junk = bytes(rnd.randrange(256) for _ in range(300))
            A("random garbage, unframed, then EOF", junk, [CLOSE, RESPONSE], shutdown_write=True)

            log("api keys and versions")
            A("unknown API key 9999", frame(hdr(9999, 0)), [CLOSE, RESPONSE], corr=7)
            A("unknown API key -1", frame(hdr(-1, 0)), [CLOSE, RESPONSE], corr=7)
            A("Metadata v99", frame(hdr(3, 99) + b"\x00\x00\x00\x00"), [CLOSE, RESPONSE], corr=7)
            A("Metadata v99, flexible header", frame(hdr(3, 99, flexible=True) + b"\x01\x00"),
              [CLOSE, RESPONSE], corr=7)
            A("Produce v2 (removed in Kafka 4)",
              frame(hdr(0, 2) + Enc().i16(-1).i32(1000).i32(0).done()), [CLOSE, RESPONSE], corr=7)
            A("Fetch v3 (removed in Kafka 4)",
              frame(hdr(1, 3) + Enc().i32(-1).i32(100).i32(1).i32(1000).i32(0).done()),
              [CLOSE, RESPONSE], corr=7)

            # ApiVersions at an unknown version: error 35 and a v0 body listing only
            # ApiVersions itself, and the connection stays usable.
            want = struct.pack(">ihihhh", 7, 35, 1, 18, 0, av_max)
            for label, data in [
                ("ApiVersions v99 (flexible header)", frame(hdr(18, 99, flexible=True))),
                ("ApiVersions v99 + garbage body", frame(hdr(18, 99, flexible=True) + b"\xff" * 33)),
                ("ApiVersions v5", frame(hdr(18, 5, flexible=True))),
            ]:
                out, payload = A(label, data, [RESPONSE], corr=7)
                if out == RESPONSE and payload != want:
                    r.failures.append(f"{label}: response {payload.hex()}, want {want.hex()} "
                                      f"(corr 7, error 35, [{{18, 0, {av_max}}}], v0 body)")
            # Kafka parses the header of an unknown ApiVersions version as header v2
            # (flexible); without the tagged-field byte it fails and closes.
            out, payload = A("ApiVersions v99, header without tagged fields",
                             frame(hdr(18, 99)), [CLOSE, RESPONSE], corr=7)
            if out == RESPONSE and payload[4:6] != b"\x00\x23":
                r.failures.append(f"ApiVersions v99 (v1 header): error {payload[4:6].hex()}, want 0023")
            out, payload = A("ApiVersions v-1", frame(hdr(18, -1)), [RESPONSE, CLOSE], corr=7)
            if out == RESPONSE and payload != want:
                r.failures.append(f"ApiVersions v-1: response {payload.hex()}, want {want.hex()}")
            # still usable after the error answer
            with lib.Conn(broker.port, timeout=TIMEOUT) as c:
                c.send(frame(hdr(18, 99, corr=1, flexible=True)))
                c.recv_frame()
                c.corr = 1
                check(18 in c.api_versions(), "ApiVersions v0 after an ApiVersions v99 failed")
                log(f"  {'connection usable after ApiVersions v99':58s} ok")

            log("lengths and counts beyond the frame")
            A("Metadata v1 topic count 10^9 in a 4-byte body",
              frame(hdr(3, 1) + struct.pack(">i", 10**9)), [CLOSE, RESPONSE], corr=7)
            A("Metadata v1 topic count 2^31-1", frame(hdr(3, 1) + struct.pack(">i", 2**31 - 1)),
              [CLOSE, RESPONSE], corr=7)
            A("Metadata v1 topic-name length 30000 with 2 bytes",
              frame(hdr(3, 1) + struct.pack(">ih", 1, 30000) + b"ab"), [CLOSE, RESPONSE], corr=7)
            A("Metadata v9 compact array count 2^32 (varint)",
              frame(hdr(3, 9, flexible=True) + lib.uvarint(1 << 32) + b"\x00"), [CLOSE, RESPONSE],
              corr=7)
            A("client-id length 3000 with 2 bytes",
              frame(struct.pack(">hhih", 3, 1, 7, 3000) + b"ab"), [CLOSE, RESPONSE], corr=7)
            A("tagged-field count 10^6 in request header",
              frame(struct.pack(">hhih", 3, 9, 7, -1) + lib.uvarint(10**6)), [CLOSE, RESPONSE],
              corr=7)
            A("Produce v3 topic count 10^9",
              frame(hdr(0, 3) + Enc().string(None).i16(-1).i32(1000).i32(10**9).done()),
              [CLOSE, RESPONSE], corr=7)
            A("Produce v3 records length 10^8 with 10 bytes",
              frame(hdr(0, 3) + Enc().string(None).i16(-1).i32(1000).i32(1).string("badin")
                    .i32(1).i32(0).i32(10**8).done() + b"x" * 10), [CLOSE, RESPONSE], corr=7)

            log("produce validation")
            box = [None]
            recs = [(b"k1", b"v1", [(b"h", b"x")]), (b"k2", None, []), (None, b"", [])]
            P = r.produce_case
            with lib.Conn(broker.port, timeout=TIMEOUT) as c:
                _, hw_before, _ = c.fetch("badin", 0, 0)
            P("valid batch, Produce v3", box, record_batch(recs), [0], version=3)
            P("valid batch, Produce v9", box, record_batch(recs), [0], version=9)
            with lib.Conn(broker.port, timeout=TIMEOUT) as c:
                _, hw_valid, _ = c.fetch("badin", 0, 0)
            check(hw_valid == hw_before + 6, f"high watermark {hw_valid}, want {hw_before + 6}")
            P("corrupted CRC, Produce v3", box, record_batch(recs, corrupt_crc=True), [2], version=3)
            P("corrupted CRC, Produce v9", box, record_batch(recs, corrupt_crc=True), [2], version=9)
            P("corrupted CRC, Produce v11", box, record_batch(recs, corrupt_crc=True), [2],
              version=11)
            P("record count != lastOffsetDelta+1", box, record_batch(recs, count_override=5),
              [87, 2])
            P("record count 0", box, record_batch(recs, count_override=0), [87, 2])
            P("magic 1 batch", box, record_batch(recs, magic=1), [87, 2])
            P("magic 0 batch", box, record_batch(recs, magic=0), [87, 2])
            P("truncated batch", box, record_batch(recs)[:-5], [87, 2])
            P("empty records field", box, b"", [87, 2])
            P("garbage records field", box, b"\x01" * 70, [87, 2])
            P("two batches in one partition", box, record_batch(recs) + record_batch(recs), [87, 2])
            P("compression codec 7", box, record_batch(recs, codec=7), [-1, 2, 87])
            P("unknown partition 99", box, record_batch(recs), [3], partition=99)
            P("unknown topic", box, record_batch(recs), [3], topic="no-such-topic-xyz")
            P("acks=5", box, record_batch(recs), [21], acks=5)
            future = int(time.time() * 1000) + 2 * 3600 * 1000
            P("timestamp 2 h in the future", box, record_batch(recs, base_ts=future), [32])
            with lib.Conn(broker.port, timeout=TIMEOUT) as c:
                _, hw_after, _ = c.fetch("badin", 0, 0)
            check(hw_after == hw_valid,
                  f"rejected batches were appended: high watermark {hw_valid} -> {hw_after}")
            log(f"  {'rejected batches not appended (high watermark unchanged)':58s} ok")
            # Documented Kafka behaviour that Sluice need not copy:
            P("null records field (Kafka 4.1: no answer)", box, None, [87, 2, 0],
              allow_close=True, allow_hang=True, timeout=3.0)
            P("base offset 1234 in the batch (Kafka: 87)", box, record_batch(recs, base_offset=1234),
              [87, 0, 2])
            P("3 bytes of junk after the batch (Kafka: accepts)", box, record_batch(recs) + b"abc",
              [0, 87, 2])
            if box[0]:
                box[0].close()

            log("fetch")
            with lib.Conn(broker.port, timeout=TIMEOUT) as c:
                err, hw, _ = c.fetch("badin", 0, 10**9)
                check(err == 1, f"Fetch beyond the end: error {err}, want 1 OFFSET_OUT_OF_RANGE")
                err, hw, _ = c.fetch("badin", 99, 0)
                check(err == 3, f"Fetch of partition 99: error {err}, want 3")
                err, hw, _ = c.fetch("no-such-topic-xyz", 0, 0)
                check(err == 3, f"Fetch of an unknown topic: error {err}, want 3")
                err, hw, blob = c.fetch("badin", 0, 1)
                batches = list(lib.parse_batches(blob))
                check(err == 0 and batches and batches[0]["base_offset"] <= 1
                      and all(b["crc_ok"] for b in batches),
                      f"Fetch from the middle of a batch: error {err}, batches "
                      f"{[(b['base_offset'], b['crc_ok']) for b in batches]}")
                log(f"  {'fetch errors 1/3/3 and mid-batch fetch':58s} ok")
                # A topic listed with no partitions is left out of the answer, as Kafka 4.1
                # does (it builds the response from the partitions).
                e = Enc().i32(-1).i8(0).array_len(2)
                e.string("badin").array_len(0)
                e.string("healthy").array_len(1).i32(0).i64(-1)
                d = c.request(2, 2, e.done())  # ListOffsets v2
                d.i32()  # throttle
                names = []
                for _ in range(d.array_len()):
                    names.append(d.string())
                    for _ in range(d.array_len()):
                        d.i32(), d.i16(), d.i64(), d.i64()
                check(names == ["healthy"], f"ListOffsets answered topics {names}, want ['healthy']")
                log(f"  {'ListOffsets: a topic with no partitions left out':58s} ok")
        finally:
            time.sleep(0.5)
            healthy.stop_ev.set()
            healthy.join(TIMEOUT + 5)

        check(broker.alive(), "broker died")
        log(f"healthy client: {healthy.ok} successful produce+fetch round trips, "
            f"{len(healthy.failures)} failures, max latency {healthy.max_latency * 1000:.0f} ms")
        for n in r.notes:
            log(f"NOTE (differs from Kafka, accepted): {n}")
        problems = r.failures + [f"healthy client {f}" for f in healthy.failures[:10]]
        check(healthy.ok >= 20, f"healthy client made only {healthy.ok} round trips")
        check(healthy.max_latency < TIMEOUT, "healthy client stalled")

        kcat = lib.kcat_path(required=False)
        if kcat:
            rr = lib.run([kcat, "-P", "-b", broker.bootstrap, "-t", "healthy", "-k", "kc"],
                         timeout=60, input="after-bad-input\n")
            check(rr.returncode == 0, f"kcat produce after bad input failed: {rr.stderr}")
            rr = lib.run([kcat, "-C", "-b", broker.bootstrap, "-t", "healthy", "-o", "-1", "-c", "1",
                          "-e", "-q", "-f", "%k=%s\n"], timeout=60)
            check(rr.stdout == "kc=after-bad-input\n", f"kcat read back {rr.stdout!r}")
            log("kcat produce+consume after the bad input: ok")
        check(not problems, "; ".join(problems))
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
