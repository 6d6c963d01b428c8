#!/usr/bin/env python3
"""Start-up never deletes data it cannot prove is garbage.

Proves, against a broker holding two topics with records:
  1. a missing, an empty and an unparsable `sluice-topics` each make the broker refuse
     to start (non-zero exit), name every partition directory it found and the
     resolution (restore, --adopt-orphans, --remove-orphans), and leave every byte of
     the data directory as it was;
  2. with the files restored it starts and serves the records again;
  3. a directory beyond a topic's partition count is refused the same way, and
     --remove-orphans removes exactly it;
  4. a deleted topic's directory left behind by a crash between the metadata change
     and the rename (simulated by journalling the deletion while the directory stays)
     is proven by its partition.metadata topic id and removed, and the broker starts;
     a directory of another topic id under a live topic's name is not served (produce
     gets KAFKA_STORAGE_ERROR) and not touched;
  5. --adopt-orphans recreates lost topics from their directories (partition count,
     topic id from partition.metadata) and their records are served again.
"""
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402


def create_topics(conn, topics, version=4):
    """topics: [(name, partitions)]. Returns {name: error_code}."""
    e = lib.Enc().array_len(len(topics))
    for name, parts in topics:
        e.string(name).i32(parts).i16(-1).array_len(0).array_len(0)
    e.i32(30000).i8(0)
    d = conn.request(19, version, e.done())
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        name, err = d.string(), d.i16()
        d.string()
        out[name] = err
    return out


def delete_topics(conn, names):
    e = lib.Enc().array_len(len(names))
    for n in names:
        e.string(n)
    e.i32(30000)
    d = conn.request(20, 3, e.done())
    d.i32()
    return {d.string(): d.i16() for _ in range(d.array_len())}


def tree(root):
    """{relative path: (size, sha1)} of every file under root except the lock."""
    out = {}
    for dp, _dirs, files in os.walk(root):
        for f in files:
            if f == ".lock":
                continue
            p = os.path.join(dp, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (os.path.getsize(p), hashlib.sha1(fh.read()).hexdigest())
    return out


def run_broker_once(broker, *extra):
    """Runs sluice-broker on the broker's config expecting it to exit; (rc, output)."""
    cfg = os.path.join(broker.tmp, "server.properties")
    cmd = [broker.exe, cfg]
    for k, v in broker.props.items():
        cmd += ["--override", f"{k}={v}"]
    out_path = os.path.join(broker.tmp, "once.out")
    with open(out_path, "w") as out:
        p = subprocess.Popen(cmd + list(extra), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:  # it started instead of refusing
        p.terminate()
        p.wait(timeout=30)
        rc = 0
    with open(out_path) as f:
        return rc, f.read()


def start_with(broker, flag):
    """Starts the broker (kept running) with flag after its arguments."""
    real = broker.exe
    wrapper = os.path.join(broker.tmp, "with-flag.sh")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec {real} \"$@\" {flag}\n")
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IEXEC)
    broker.exe = wrapper
    try:
        broker.start()
    finally:
        broker.exe = real


def expect_refusal(broker, what, must_name):
    before = tree(broker.datadir)
    rc, out = run_broker_once(broker)
    log(f"{what}: exit {rc}; output:\n{out.strip()}")
    check(rc != 0, f"{what}: the broker started (exit {rc}) instead of refusing")
    for s in must_name + ["--adopt-orphans", "--remove-orphans"]:
        check(s in out, f"{what}: the refusal does not mention {s!r}")
    check(tree(broker.datadir) == before, f"{what}: the data directory changed")


def produce_some(conn, topic, partition, n):
    blob = lib.record_batch([(None, f"{topic}-{partition}-{i}".encode(), []) for i in range(n)])
    err, _base, _msg = conn.produce(topic, partition, blob)
    check(err == 0, f"produce {topic}-{partition}: error {err}")


def fetch_count(conn, topic, partition):
    err, hw, _blob = conn.fetch(topic, partition, 0)
    check(err == 0, f"fetch {topic}-{partition}: error {err}")
    return hw


def journal_record(payload):
    return struct.pack("<II", len(payload), lib.crc32c(payload)) + payload


def b64_to_hex(s):
    import base64
    return base64.urlsafe_b64decode(s + "==").hex()


def test():
    if lib.TARGET != "sluice":
        lib.skip("Sluice's start-up checks and metadata files")
    with lib.Broker("meta-safety", {"auto.create.topics.enable": "false"}) as broker:
        data = broker.datadir
        with lib.Conn(broker.port) as c:
            check(create_topics(c, [("keep", 2), ("few", 1), ("gone", 1)]) == {"keep": 0, "few": 0, "gone": 0},
                  "CreateTopics")
            for p in (0, 1):
                produce_some(c, "keep", p, 5)
            produce_some(c, "few", 0, 3)
            produce_some(c, "gone", 0, 4)
        broker.stop()
        meta = [f for f in os.listdir(data) if f.startswith("sluice-topics")]
        log(f"metadata files: {meta}")
        check(os.path.exists(os.path.join(data, "keep-0", "partition.metadata")), "partition.metadata written")
        saved = os.path.join(broker.tmp, "saved-meta")
        os.makedirs(saved)
        for f in meta:
            shutil.copy2(os.path.join(data, f), saved)

        # 1. missing, empty, unparsable metadata
        for f in meta:
            os.unlink(os.path.join(data, f))
        expect_refusal(broker, "missing sluice-topics", ["keep-0", "keep-1", "few-0", "gone-0"])
        with open(os.path.join(data, "sluice-topics"), "w"):
            pass
        expect_refusal(broker, "empty sluice-topics", ["is empty"])
        with open(os.path.join(data, "sluice-topics"), "w") as f:
            f.write("# sluice topic metadata v2: ...; generation 1\ntopic keep two-partitions x\n")
        expect_refusal(broker, "unparsable sluice-topics", ["sluice-topics:2"])

        # 2. restored: starts and serves
        os.unlink(os.path.join(data, "sluice-topics"))
        for f in meta:
            shutil.copy2(os.path.join(saved, f), data)
        broker.start()
        with lib.Conn(broker.port) as c:
            check(fetch_count(c, "keep", 1) == 5, "keep-1 after restoring the metadata")
        broker.stop()

        # 3. a partition beyond the topic's count; then --remove-orphans
        shutil.copytree(os.path.join(data, "few-0"), os.path.join(data, "few-3"))
        expect_refusal(broker, "partition beyond the count", ["few-3", "has 1 partition(s)"])
        start_with(broker, "--remove-orphans")
        broker.stop()
        check(not os.path.exists(os.path.join(data, "few-3")), "--remove-orphans removed few-3")
        check(os.path.exists(os.path.join(data, "few-0")), "--remove-orphans kept few-0")

        # 4. a deleted topic's directory left by a crash: the deletion is in the journal,
        # the directory is still there. It is proven garbage by its topic id.
        with open(os.path.join(data, "gone-0", "partition.metadata")) as f:
            gone_id = b64_to_hex(f.read().split("topic_id:")[1].strip())
        jpath = os.path.join(data, "sluice-topics.journal")
        check(os.path.exists(jpath), "the metadata journal exists")
        with open(jpath, "ab") as f:
            f.write(journal_record(f"deleted gone 1 {gone_id}".encode()))
        broker.start()
        check(not os.path.exists(os.path.join(data, "gone-0")), "the deleted topic's directory was removed")
        with lib.Conn(broker.port) as c:
            _, topics = c.metadata(None, auto_create=False)
            check("gone" not in topics and "keep" in topics and "few" in topics, f"topics after start: {sorted(topics)}")
            # DeleteTopics through the broker: the directory goes, the restart is clean
            check(delete_topics(c, ["few"]) == {"few": 0}, "DeleteTopics few")
            # a directory of another topic id under a live topic's name (a deletion whose
            # rename failed, then the name created again) is never served as the new topic
            check(create_topics(c, [("fresh", 1)]) == {"fresh": 0}, "CreateTopics fresh")
            shutil.copytree(os.path.join(data, "keep-0"), os.path.join(data, "fresh-0"))
            before = tree(os.path.join(data, "fresh-0"))
            err, _base, _msg = c.produce("fresh", 0, lib.record_batch([(None, b"new", [])]))
            check(err == 56, f"produce into another topic's directory: error {err} (want KAFKA_STORAGE_ERROR)")
            check(tree(os.path.join(data, "fresh-0")) == before, "the foreign directory was left as it was")
            check(delete_topics(c, ["fresh"]) == {"fresh": 0}, "DeleteTopics fresh")
            check(tree(os.path.join(data, "fresh-0")) == before, "DeleteTopics left the foreign directory alone")
        broker.stop()
        shutil.rmtree(os.path.join(data, "fresh-0"))
        check(not os.path.exists(os.path.join(data, "few-0")), "DeleteTopics removed few-0")
        broker.start()
        broker.stop()

        # 5. metadata lost: --adopt-orphans recreates the topic from its directories
        with open(os.path.join(data, "keep-1", "partition.metadata")) as f:
            keep_pm = f.read()
        for f in os.listdir(data):
            if f.startswith("sluice-topics"):
                os.unlink(os.path.join(data, f))
        with open(os.path.join(data, "keep-1", "partition.metadata"), "w") as f:
            f.write("garbage\n")  # unreadable: the id comes from keep-0, the file is rewritten
        os.makedirs(os.path.join(data, "__consumer_offsets-0"))  # adopted compacted, as the broker creates it
        expect_refusal(broker, "metadata lost again", ["keep-0", "keep-1", "there is no topic metadata",
                                                       "partition.metadata cannot be read"])
        start_with(broker, "--adopt-orphans")
        with lib.Conn(broker.port) as c:
            _, topics = c.metadata(["keep"], auto_create=False)
            check(topics.get("keep", (-1, {}))[0] == 0 and len(topics["keep"][1]) == 2,
                  f"adopted topic keep: {topics.get('keep')}")
            check(fetch_count(c, "keep", 0) == 5 and fetch_count(c, "keep", 1) == 5, "records of the adopted topic")
        with open(os.path.join(data, "keep-1", "partition.metadata")) as f:
            check(f.read() == keep_pm, "the adopted topic kept its topic id")
        meta_bytes = b"".join(open(os.path.join(data, f), "rb").read() for f in os.listdir(data)
                              if f.startswith("sluice-topics"))
        check(b"topic __consumer_offsets 1 " in meta_bytes and b"cleanup.policy=compact" in meta_bytes,
              "__consumer_offsets adopted with cleanup.policy=compact")
        broker.stop()
        broker.start()  # and it is an ordinary start from now on


if __name__ == "__main__":
    lib.main(test)
