#!/usr/bin/env python3
"""kcat round trip, once per compression codec.

Starts a broker with num.partitions=6 and topic auto-creation, and for each codec
none/gzip/snappy/lz4/zstd (one topic each) produces 100,000 keyed records with two
headers through `kcat -P -K <tab> -H ... -z codec`, then consumes everything back
with `kcat -C -e` and checks that every record comes back exactly once, byte for byte
(key, value, headers), with offsets contiguous from 0 and in production order within
each partition, spread over all 6 partitions. A raw Fetch then checks that the
stored batches really carry the codec (librdkafka 2.0.2 silently falls back to no
compression when the broker's advertised Produce range lacks v0; see COMPAT.md).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = int(os.environ.get("SLUICE_KCAT_RECORDS", "100000"))
PARTITIONS = 6
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
HEADERS = [(b"trace", b"t-0042"), (b"app", b"sluice it")]


def make_records(n):
    """Deterministic keys and values; values avoid tab and newline (kcat delimiters)
    but include spaces, punctuation and bytes >= 0x80."""
    alphabet = bytes(c for c in range(0x20, 0x7F)) + bytes(range(0x80, 0x100))
    recs = []
    for i in range(n):
        key = b"key-%07d" % i
        if i % 1000 == 999:
            value = b""
        else:
            ln = 8 + (i * 37) % 300
            start = (i * 131) % len(alphabet)
            body = (alphabet[start:] + alphabet[:start]) * (ln // len(alphabet) + 1)
            value = b"val-%07d|" % i + body[:ln]
        recs.append((key, value))
    return recs


def run_codec(broker, kcat, codec, recs, tmp):
    topic = f"kcat-{codec}"
    infile = os.path.join(tmp, "input.txt")
    hdr_args = []
    for k, v in HEADERS:
        hdr_args += ["-H", (k + b"=" + v).decode()]
    log(f"{codec}: producing {len(recs)} records with kcat")
    r = lib.run([kcat, "-P", "-b", broker.bootstrap, "-t", topic, "-K", "\t", "-z", codec,
                 "-X", "acks=all", "-X", "linger.ms=20", *hdr_args, "-l", infile], timeout=180)
    check(r.returncode == 0, f"{codec}: kcat -P exit {r.returncode}: {r.stderr[-2000:]}")

    log(f"{codec}: consuming with kcat -C -e")
    r = lib.run([kcat, "-C", "-b", broker.bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                 "-f", "%p\t%o\t%k\t%h\t%S\t%s\n"], timeout=180, text=False)
    check(r.returncode == 0, f"{codec}: kcat -C exit {r.returncode}: {r.stderr[-2000:]!r}")
    lines = r.stdout.split(b"\n")
    check(lines[-1] == b"", f"{codec}: consumer output does not end with a newline")
    lines.pop()
    check(len(lines) == len(recs), f"{codec}: consumed {len(lines)} records, produced {len(recs)}")

    want_hdrs = b",".join(k + b"=" + v for k, v in HEADERS)
    seen = bytearray(len(recs))
    next_off = {}
    last_idx = {}
    problems = []
    for ln in lines:
        parts = ln.split(b"\t", 5)
        if len(parts) != 6:
            problems.append(f"malformed line {ln[:100]!r}")
            continue
        p, off, key, hdrs, vlen, value = parts
        p, off, vlen = int(p), int(off), int(vlen)
        if not key.startswith(b"key-") or not key[4:].isdigit():
            problems.append(f"p{p}@{off}: bad key {key[:40]!r}")
            continue
        idx = int(key[4:])
        if idx >= len(recs):
            problems.append(f"p{p}@{off}: unknown key {key!r}")
            continue
        if seen[idx]:
            problems.append(f"p{p}@{off}: key {key!r} seen twice")
        seen[idx] = 1
        if value != recs[idx][1] or vlen != len(recs[idx][1]):
            problems.append(f"p{p}@{off}: value of {key!r} differs ({vlen} bytes)")
        if hdrs != want_hdrs:
            problems.append(f"p{p}@{off}: headers {hdrs!r}, want {want_hdrs!r}")
        if off != next_off.get(p, 0):
            problems.append(f"p{p}: offset {off}, expected {next_off.get(p, 0)}")
        next_off[p] = off + 1
        if idx <= last_idx.get(p, -1):
            problems.append(f"p{p}@{off}: index {idx} after {last_idx[p]} (out of order)")
        last_idx[p] = idx
        if len(problems) > 20:
            break
    missing = len(recs) - sum(seen)
    if missing:
        problems.append(f"{missing} records never came back")
    check(not problems, f"{codec}: " + "; ".join(problems[:20]))
    check(sorted(next_off) == list(range(PARTITIONS)),
          f"{codec}: records landed in partitions {sorted(next_off)}, want 0..{PARTITIONS - 1}")

    # The batches must really be compressed with the codec asked for. librdkafka
    # sends a batch uncompressed when compressing does not make it smaller, so codec
    # 0 may appear beside it: walk up to 20 batches of partition 0.
    batches = []
    with lib.Conn(broker.port) as c:
        off, hw = 0, 1
        while off < hw and len(batches) < 20:
            err, hw, blob = c.fetch(topic, 0, off, max_bytes=256 << 10)
            check(err == 0, f"{codec}: raw fetch at {off}: error {err}")
            got = [b for b in lib.parse_batches(blob) if b["base_offset"] + b["last_offset_delta"] >= off]
            check(got, f"{codec}: raw fetch at {off} returned no batch (high watermark {hw})")
            batches += got
            off = got[-1]["base_offset"] + got[-1]["last_offset_delta"] + 1
    codecs = {b["codec"] for b in batches}
    want = lib.CODECS[codec]
    check(want in codecs and codecs <= {0, want},
          f"{codec}: stored batches use codec ids {sorted(codecs)}, want {want}")
    check(all(b["crc_ok"] for b in batches), f"{codec}: a fetched batch fails its CRC")
    log(f"{codec}: OK ({len(lines)} records, offsets per partition "
        f"{[next_off[p] for p in sorted(next_off)]}, {sum(b['codec'] == want for b in batches)} of the first {len(batches)} batches of "
        f"partition 0 carry codec id {want})")


def test():
    kcat = lib.kcat_path()
    recs = make_records(N)
    with lib.Broker("kcat", {"num.partitions": PARTITIONS}) as broker:
        with open(os.path.join(broker.tmp, "input.txt"), "wb") as f:
            for k, v in recs:
                f.write(k + b"\t" + v + b"\n")
        for codec in CODECS:
            run_codec(broker, kcat, codec, recs, broker.tmp)
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
