#!/usr/bin/env python3
"""DescribeLogDirs (35) with Kafka's own tools: kafka-log-dirs.sh (LogDirsCommand, from the
Kafka 4.1.1 and 4.4.0 jars) and Kafka 4.4.0's kafka-reassign-partitions.sh, whose --execute
asks every broker for its replicas' log directories.

Proves, in order:
- a single node with two data directories (log.dirs=d1,d2) and 1 MiB segments, topics
  written with kcat (one partition over three segments, others small, an lz4 topic with one
  partition of four written): raw DescribeLogDirs v1-v4 with Topics null lists d1 and d2 by
  their absolute paths, error 0, and every partition directory on disk exactly once, in the
  directory that holds it, its PartitionSize the bytes of the record batches in its segment
  files, OffsetLag 0, IsFutureKey false; partitions never written (no files) are not listed;
  ErrorCode 0 from v3; TotalBytes the volume's size (statvfs) and UsableBytes close to its
  free space in v4; named partitions (some twice, some unknown) are described once each,
  the unknown left out;
- kafka-log-dirs --describe of Kafka 4.1.1 and 4.4.0 (DescribeLogDirs v4, the highest
  advertised) prints the same directories, partitions and sizes; --topic-list with one topic and an unknown one
  prints only that topic's partitions;
- after a clean stop the segment files' sizes add up to the sizes reported (a stop cuts
  the active segment to its length);
- one controller and two brokers: a topic placed on broker 1 alone; kafka-log-dirs lists it
  on broker 1 only; Kafka 4.4.0's kafka-reassign-partitions --execute moves it to broker 2
  (the current assignment it prints names broker 1's log directory, which it learned
  through DescribeLogDirs), --verify reports the move completed; kafka-log-dirs then lists
  it on broker 2 only, with the bytes of broker 2's segment files, the size broker 1 had.

Sluice only (it reads Sluice's data directories and runs deploy/local-cluster.sh). Ports on
127.0.0.1: the single node 23200; the cluster's brokers 23210-23211, its controller 23310
(Raft 23311).
"""
import glob
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import cluster as clu  # noqa: E402
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

SINGLE_PORT = 23200
CLUSTER_BASE_PORT = 23210
KAFKA_OLD, KAFKA_NEW = "4.1.1", "4.4.0"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
SEGMENT_BYTES = 1 << 20
NONE = 0
# (topic, partition, records, value bytes, codec): ld-a-0 spans three segments
WRITES = [("ld-a", 0, 2600, 1000, "none"), ("ld-a", 1, 10, 100, "none"), ("ld-a", 2, 300, 50, "none"),
          ("ld-b", 2, 500, 200, "lz4")]
NEVER_WRITTEN = ["ld-a-3", "ld-b-0", "ld-b-1", "ld-b-3"]
times = {}


def batch_bytes(path):
    """Bytes of the record batches in a segment file, up to its first non-batch (an active
    segment's zero padding)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length <= 0 or pos + 12 + length > len(data):
            break
        pos += 12 + length
    return pos


def on_disk(dirs, size_of=batch_bytes):
    """{partition name: (absolute data directory, bytes)} of every partition directory."""
    found = {}
    for d in dirs:
        for name in sorted(os.listdir(d)):
            if re.fullmatch(r".+-\d+", name) and os.path.isdir(os.path.join(d, name)):
                check(name not in found, f"{name} in two data directories")
                segs = glob.glob(os.path.join(d, name, "*.log"))
                found[name] = (os.path.abspath(d), sum(size_of(s) for s in segs))
    return found


def describe(port, version, topics=None):
    """Raw DescribeLogDirs: (ErrorCode, {dir: (error, {partition name: (size, lag, future)},
    total bytes, usable bytes)})."""
    flex = version >= 2
    e = Enc()
    if topics is None:
        e.array_len(None, flex)
    else:
        e.array_len(len(topics), flex)
        for t, parts in topics:
            e.string(t, flex).array_len(len(parts), flex)
            for p in parts:
                e.i32(p)
            if flex:
                e.tags()
    if flex:
        e.tags()
    with lib.Conn(port) as c:
        d = c.request(35, version, e.done(), flexible_req=flex)
    check(d.i32() == 0, "ThrottleTimeMs")
    err = d.i16() if version >= 3 else NONE
    dirs = {}
    for _ in range(d.array_len(flex)):
        derr, path, parts = d.i16(), d.string(flex), {}
        for _ in range(d.array_len(flex)):
            name = d.string(flex)
            for _ in range(d.array_len(flex)):
                p, size, lag, future = d.i32(), d.i64(), d.i64(), d.i8()
                if flex:
                    d.tags()
                check(f"{name}-{p}" not in parts, f"v{version}: {name}-{p} listed twice in {path}")
                parts[f"{name}-{p}"] = (size, lag, future)
            if flex:
                d.tags()
        total, usable = (d.i64(), d.i64()) if version >= 4 else (None, None)
        if flex:
            d.tags()
        dirs[path] = (derr, parts, total, usable)
    if flex:
        d.tags()
    check(d.remaining() == 0, f"v{version}: {d.remaining()} bytes left over")
    return err, dirs


def tool_json(out):
    """The JSON line kafka-log-dirs prints: {broker: {dir: (error, {partition: (size, lag,
    future)})}}."""
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    check(lines, f"kafka-log-dirs printed no JSON: {out!r}")
    res = {}
    for b in json.loads(lines[-1])["brokers"]:
        res[b["broker"]] = {ld["logDir"]: (ld["error"], {p["partition"]: (p["size"], p["offsetLag"], p["isFuture"])
                                                        for p in ld["partitions"]}) for ld in b["logDirs"]}
    return res


def kcat_write(bootstrap, topic, partition, n, value_bytes, codec):
    values = "".join(f"{topic}-{partition}-{i:06d}-".ljust(value_bytes, "v") + "\n" for i in range(n))
    r = lib.run([lib.kcat_path(), "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-z", codec,
                 "-X", "acks=all"], timeout=120, input=values)
    check(r.returncode == 0, f"kcat -P {topic}-{partition}: exit {r.returncode}: {r.stderr[-1500:]}")


def check_sizes(what, dirs, disk):
    """dirs (DescribeLogDirs' directories) list exactly the partitions on disk, each in its
    directory with its bytes, no lag, not a future log."""
    listed = {}
    for path, (err, parts, *_rest) in dirs.items():
        check(err in (NONE, None), f"{what}: {path}: error {err}")
        for name, (size, lag, future) in parts.items():
            listed[name] = (path, size)
            check(lag == 0 and not future, f"{what}: {name}: lag {lag}, future {future}")
    check(listed == disk, f"{what}: described {sorted(listed.items())}\n  on disk {sorted(disk.items())}")


def step_single_node(java_old, java_new):
    b = lib.Broker("log-dirs")
    b.port, b.bootstrap = SINGLE_PORT, f"127.0.0.1:{SINGLE_PORT}"
    d1, d2 = os.path.join(b.tmp, "d1"), os.path.join(b.tmp, "d2")
    b.props.update({"log.dirs": f"{d1},{d2}", "num.partitions": 4, "log.segment.bytes": SEGMENT_BYTES})
    ok = False
    try:
        b.start()
        for topic, p, n, value_bytes, codec in WRITES:
            kcat_write(b.bootstrap, topic, p, n, value_bytes, codec)
        disk = on_disk([d1, d2])
        log(f"on disk: {sorted(disk.items())}")
        check(sorted(disk) == sorted(f"{t}-{p}" for t, p, *_ in WRITES), f"partition directories {sorted(disk)}")
        check({path for path, _ in disk.values()} == {d1, d2}, "partitions in both directories")
        check(len(glob.glob(os.path.join(d1 if disk["ld-a-0"][0] == d1 else d2, "ld-a-0", "*.log"))) >= 3,
              "ld-a-0 spans three segments")
        for v in range(1, 5):
            err, dirs = describe(b.port, v)
            check(err == NONE, f"v{v}: ErrorCode {err}")
            check(list(dirs) == [d1, d2], f"v{v}: directories {list(dirs)}")
            check_sizes(f"DescribeLogDirs v{v}", dirs, disk)
            for path, (_e, _p, total, usable) in dirs.items():
                if v >= 4:
                    vfs = os.statvfs(path)
                    check(total == vfs.f_blocks * vfs.f_frsize, f"v{v}: {path}: TotalBytes {total}")
                    free = vfs.f_bavail * vfs.f_frsize
                    check(abs(usable - free) < 256 << 20, f"v{v}: {path}: UsableBytes {usable}, statvfs {free}")
        log("raw DescribeLogDirs v1-v4: both directories, every partition on disk, sizes as on disk")
        err, dirs = describe(b.port, 4, [("ld-a", [2, 0, 2, 3, 9]), ("nosuch", [0]), ("ld-b", [])])
        named = {n: s for _e, parts, *_r in dirs.values() for n, s in parts.items()}
        check(sorted(named) == ["ld-a-0", "ld-a-2"], f"named partitions described: {sorted(named)}")
        for java in (java_old, java_new):
            tools = clu.Tools(java)
            out = tools.run(f"log-dirs ({java.version})", LOG_DIRS, "--bootstrap-server", b.bootstrap, "--describe")
            res = tool_json(out)
            check(list(res) == [1], f"kafka-log-dirs {java.version}: brokers {list(res)}")
            check_sizes(f"kafka-log-dirs {java.version}", res[1], disk)
            out = tools.run(f"log-dirs ({java.version})", LOG_DIRS, "--bootstrap-server", b.bootstrap, "--describe",
                            "--topic-list", "ld-b,nosuch")
            res = tool_json(out)
            check_sizes(f"kafka-log-dirs {java.version} --topic-list ld-b", res[1],
                        {k: v for k, v in disk.items() if k.startswith("ld-b-")})
        _err, dirs = describe(b.port, 4)
        b.stop()
        files = on_disk([d1, d2], size_of=os.path.getsize)
        check_sizes("segment files after a clean stop", dirs, files)
        log(f"single node: {len(disk)} partitions in 2 directories, sizes as on disk")
        ok = True
    finally:
        b.cleanup(failed=not ok)


class Cluster(clu.Cluster):
    def up(self):
        self.sh("up", self.dir, "--brokers", "2", "--controllers", "1", "--base-port", str(CLUSTER_BASE_PORT),
                "--set", "broker.session.timeout.ms=4000", "--set", "broker.heartbeat.interval.ms=500",
                timeout=240)

    def data(self, broker):
        return os.path.join(self.dir, f"broker-{broker}", "data")


def step_reassign(cl, java_new, root):
    tools = clu.Tools(java_new)
    boot = cl.env["BOOTSTRAP"]
    out = tools.run("topics", TOPICS, "--bootstrap-server", boot, "--create", "--topic", "mv",
                    "--replica-assignment", "1")
    check("Created topic mv." in out, f"kafka-topics --create: {out!r}")
    kcat_write(boot, "mv", 0, 3000, 300, "none")

    def log_dirs():
        out = tools.run("log-dirs", LOG_DIRS, "--bootstrap-server", boot, "--describe", "--topic-list", "mv")
        res = tool_json(out)
        check(sorted(res) == [1, 2], f"kafka-log-dirs: brokers {sorted(res)}")
        return res

    before = log_dirs()
    disk1 = on_disk([cl.data(1)])
    check("mv-0" in disk1, "mv-0 on broker 1's disk")
    check_sizes("broker 1 before the move", before[1], {"mv-0": disk1["mv-0"]})
    check_sizes("broker 2 before the move", before[2], {})
    size = disk1["mv-0"][1]

    path = os.path.join(root, "mv.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": "mv", "partition": 0, "replicas": [2]}]}, f)
    t0 = time.monotonic()
    out = tools.run("reassign-partitions", REASSIGN, "--bootstrap-server", boot, "--reassignment-json-file", path,
                    "--execute")
    check("Successfully started partition reassignment for mv-0" in out, f"--execute: {out!r}")
    current = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))
    check(current["partitions"][0]["replicas"] == [1], f"current assignment {current}")
    check(current["partitions"][0].get("log_dirs") == [cl.data(1)],
          f"the current assignment names broker 1's log directory: {current}")
    deadline = time.monotonic() + 60
    while True:
        out = tools.run("reassign-partitions", REASSIGN, "--bootstrap-server", boot, "--reassignment-json-file",
                        path, "--verify")
        if "Reassignment of partition mv-0 is completed." in out:
            break
        check(time.monotonic() < deadline, f"--verify: not completed within 60 s: {out!r}")
        time.sleep(1)
    times["move"] = time.monotonic() - t0
    deadline = time.monotonic() + 30
    while True:
        after = log_dirs()
        if not after[1][cl.data(1)][1]:
            break
        check(time.monotonic() < deadline, f"broker 1 still lists mv-0 30 s after the move: {after[1]}")
        time.sleep(1)
    disk2 = on_disk([cl.data(2)])
    check("mv-0" in disk2 and "mv-0" not in on_disk([cl.data(1)]), "mv-0 moved on disk from broker 1 to broker 2")
    check_sizes("broker 2 after the move", after[2], {"mv-0": disk2["mv-0"]})
    check_sizes("broker 1 after the move", after[1], {})
    check(disk2["mv-0"][1] == size, f"broker 2 holds {disk2['mv-0'][1]} bytes, broker 1 had {size}")
    log(f"Kafka {java_new.version}'s kafka-reassign-partitions moved mv-0 ({size} bytes) in {times['move']:.1f}s")


def main():
    if lib.TARGET != "sluice":
        lib.skip("reads Sluice's data directories and runs deploy/local-cluster.sh")
    java_old, java_new = clients.Java(KAFKA_OLD), clients.Java(KAFKA_NEW)
    t0 = time.monotonic()
    step_single_node(java_old, java_new)
    times["single node"] = time.monotonic() - t0
    with clu.temp_cluster("sluice-log-dirs-", Cluster) as cl:
        cl.up_timed(times, "cluster up", brokers=[1, 2])
        step_reassign(cl, java_new, cl.root)
        cl.down()
        times["total"] = time.monotonic() - t0
        clu.summary(times)


if __name__ == "__main__":
    lib.main(main)
