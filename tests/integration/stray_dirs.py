#!/usr/bin/env python3
"""A topic deleted and created again under its name while a broker was away (docs/cluster.md,
"Metadata on brokers is a log"): three controllers and three brokers through
deploy/local-cluster.sh.

Proves, in order:
- topic `again` (3 partitions, replication factor 3) gets records A, held by every broker;
- broker 3 stopped with SIGTERM; `again` deleted and created again under its name (a new
  topic id, replicas [1,2,3] for every partition); records B written;
- broker 3 started: its old directories, whose partition.metadata names the old topic id,
  are renamed to Kafka's `<topic>-<partition>.<32 hex>-stray` (WARN naming both paths and
  both topic ids) with records A's segment files intact, never deleted; fresh directories
  name the new topic id; broker 3 follows the leaders and is in the ISR of every partition
  (DescribeTopicPartitions), its logs holding records B only; reading `again` gives records
  B only;
- broker 3 stopped and started again: the `-stray` directories are left as they are
  (a WARN at start, not taken for partitions, no refusal), and it is in every ISR again.

Short timeouts through local-cluster.sh's --set (failover_lib.SETS). Ports 27000-27002,
27100-27105 on 127.0.0.1.
"""
import base64
import glob
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as clu  # noqa: E402
import failover_lib as fl  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BASE_PORT = 27000
TOPIC, PARTS, PER_PART = "again", 3, 30
times = {}


def delete_topic(port, name):
    """DeleteTopics v3 through a broker (forwarded to the active controller)."""
    body = lib.Enc().array_len(1).string(name).i32(30000).done()
    d = clu.call(port, lambda c: c.request(20, 3, body))
    d.i32()
    res = {d.string(): d.i16() for _ in range(d.array_len())}
    check(res.get(name) == fl.NONE, f"DeleteTopics {name}: {res}")


def topic_id(port):
    """The topic id of TOPIC as the broker at port sees it (hex), or None."""
    try:
        t = clu.metadata(port)[3].get(TOPIC)
    except (OSError, lib.ProtocolError):
        return None
    return t[1] if t and t[0] == fl.NONE else None


def b64(hex_id):
    """Kafka's partition.metadata form of a topic id: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(bytes.fromhex(hex_id)).rstrip(b"=").decode()


def metadata_id(path):
    with open(os.path.join(path, "partition.metadata")) as f:
        m = re.search(r"topic_id: (\S+)", f.read())
    return m.group(1) if m else None


def write(cl, tag):
    """PER_PART records "<tag>-<p>-<i>" to every partition, acks=all, through its leader."""
    out = {}
    for p in range(PARTS):
        values = [f"{tag}-{p}-{i}" for i in range(PER_PART)]
        st = clu.wait_for(f"{TOPIC}-{p} has a leader", lambda p=p: (
            (s := fl.md_any(cl, TOPIC, p)) and s[0] == fl.NONE and s[1] > 0 and s), 30)
        for _ in range(50):
            err, base, msg = fl.produce(cl.port(st[1]), TOPIC, p, clu.batch([v.encode() for v in values]))
            if err == fl.NONE:
                break
            check(err in fl.RETRIABLE, f"produce {tag} to {TOPIC}-{p}: error {err} {msg}")
            time.sleep(0.2)
            st = fl.md_any(cl, TOPIC, p) or st
        check(err == fl.NONE and base == 0, f"produce {tag} to {TOPIC}-{p}: error {err}, base offset {base}")
        out[p] = values
    return out


last_isr = {}


def in_every_isr(cl, broker):
    """broker is in the ISR of every partition of TOPIC (DescribeTopicPartitions at broker 1)."""
    ok = True
    for p in range(PARTS):
        d = fl.describe_partition(cl.port(1), TOPIC, p)
        last_isr[p] = d
        ok &= bool(d and d["isr"] and broker in d["isr"])
    return ok


def wait_isr(cl, broker, what):
    try:
        clu.wait_for(what, lambda: in_every_isr(cl, broker), 60, step=0.2)
    except lib.TestFailure:
        log(f"last DescribeTopicPartitions answers: {last_isr}; Metadata: "
            f"{[fl.md_any(cl, TOPIC, p) for p in range(PARTS)]}")
        raise


def records_on(cl, broker, p, path=None):
    """[value] of the records in broker's segment files of TOPIC-p (or of directory path)."""
    got = {}
    for seg in sorted(glob.glob(os.path.join(path or cl.data_dir(broker, TOPIC, p), "*.log"))):
        with open(seg, "rb") as f:
            data = f.read()
        for _base, _last, pos, n, _e, _pid in fl.segment_batches(seg):
            for off, _k, v, _h in lib.decode_records(data[pos:pos + n]):
                got[off] = v.decode()
    return [got[k] for k in sorted(got)]


def strays(cl, broker, p):
    return sorted(glob.glob(os.path.join(cl.dir, f"broker-{broker}", "data", f"{TOPIC}-{p}.*-stray")))


def main():
    with clu.temp_cluster("sluice-stray-", lambda root: fl.Cluster(root, BASE_PORT)) as cl:
        cl.up_timed(times, brokers=[1, 2, 3])
        port = cl.port(1)
        fl.create_topic(port, TOPIC, PARTS, rf=3)
        wait_isr(cl, 3, "broker 3 in every ISR of the first topic")
        old_id = clu.wait_for("the first topic id", lambda: topic_id(port), 10)
        a = write(cl, "A")
        for p in range(PARTS):
            clu.wait_for(f"broker 3 holds records A of {TOPIC}-{p}", lambda p=p: records_on(cl, 3, p) == a[p], 30)
        log(f"{TOPIC} (id {old_id}): records A on every broker")

        cl.kill(3, "TERM")
        delete_topic(port, TOPIC)
        clu.wait_for(f"{TOPIC} gone from brokers 1 and 2", lambda: all(
            topic_id(cl.port(b)) is None and not os.path.exists(cl.data_dir(b, TOPIC, 0)) for b in (1, 2)), 30)
        check(all(os.path.isdir(cl.data_dir(3, TOPIC, p)) for p in range(PARTS)),
              "broker 3 (stopped) still has the old directories")
        fl.create_topic(port, TOPIC, PARTS, assignment=[[1, 2, 3], [2, 1, 3], [1, 3, 2]])
        new_id = clu.wait_for("the new topic id", lambda: topic_id(port), 10)
        check(new_id != old_id, f"the recreated topic kept id {old_id}")
        b = write(cl, "B")
        log(f"{TOPIC} deleted and created again while broker 3 was stopped: id {new_id}, records B written")

        t0 = time.monotonic()
        cl.start(3)
        wait_isr(cl, 3, "broker 3 in every ISR of the new topic")
        times["broker 3 back in every ISR"] = time.monotonic() - t0
        with open(cl.out_log(3), errors="replace") as f:
            out = f.read()
        for p in range(PARTS):
            s = strays(cl, 3, p)
            check(len(s) == 1, f"broker 3: {TOPIC}-{p}: stray directories {s}")
            check(re.fullmatch(rf"{TOPIC}-{p}\.[0-9a-f]{{32}}-stray", os.path.basename(s[0])),
                  f"stray name {s[0]}")
            check(metadata_id(s[0]) == b64(old_id), f"{s[0]}: partition.metadata names {metadata_id(s[0])}")
            check(records_on(cl, 3, p, s[0]) == a[p], f"{s[0]}: records A not intact: {records_on(cl, 3, p, s[0])}")
            check(metadata_id(cl.data_dir(3, TOPIC, p)) == b64(new_id),
                  f"broker 3: {TOPIC}-{p}: the fresh directory names {metadata_id(cl.data_dir(3, TOPIC, p))}")
            check(records_on(cl, 3, p) == b[p], f"broker 3: {TOPIC}-{p} holds {records_on(cl, 3, p)}")
            warn = [ln for ln in out.splitlines() if "renamed to " + s[0] in ln]
            check(warn and "WARN" in warn[0] and b64(old_id) in warn[0] and b64(new_id) in warn[0]
                  and cl.data_dir(3, TOPIC, p) in warn[0], f"broker 3's log: no WARN for {s[0]}: {warn}")
            st = fl.md_any(cl, TOPIC, p)
            got = [v for _o, v in fl.read_values(cl.port(st[1]), TOPIC, p)]
            check(got == b[p], f"{TOPIC}-{p} reads {got}, not records B only")
        check("KAFKA_STORAGE_ERROR" not in out, "broker 3 still reports KAFKA_STORAGE_ERROR")
        log("broker 3: old directories kept as -stray with records A, in every ISR, records B only")

        cl.kill(3, "TERM")
        cl.start(3)
        wait_isr(cl, 3, "broker 3 in every ISR after its restart")
        with open(cl.out_log(3), errors="replace") as f:
            out2 = f.read()[len(out):]
        for p in range(PARTS):
            s = strays(cl, 3, p)
            check(len(s) == 1 and records_on(cl, 3, p, s[0]) == a[p], f"after a restart: {s}")
            check(f"{os.path.basename(s[0])}: a stray partition directory" in out2,
                  f"broker 3's restart does not warn of {s[0]}")
            check("renamed to" not in out2 and "left in place" not in out2, "the restart renamed or refused again")
        log("broker 3 restarted: the -stray directories left as they are (warned of), in every ISR again")
        cl.down()
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
