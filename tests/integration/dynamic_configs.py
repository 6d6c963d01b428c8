#!/usr/bin/env python3
"""Dynamic broker configs in cluster mode, with Kafka's own kafka-configs (Apache Kafka
4.1 tools, as java_tools.py runs them) against 1 sluice-controller and 2 sluice-brokers.

Proves:
- `kafka-configs --bootstrap-server BROKER --entity-type brokers --entity-default
  --alter --add-config message.max.bytes=2000`: a produce of a ~3 KB batch is refused
  with MESSAGE_TOO_LARGE (10) on every broker, without a restart, and a small one
  still goes through;
- `--entity-name 2 --add-config message.max.bytes=5000`: broker 2 takes the batch,
  broker 1 (cluster-wide default still) refuses it;
- `--describe` shows the sources: broker 2's synonyms DYNAMIC_BROKER_CONFIG,
  DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG (server.properties'
  message.max.bytes=1500000), DEFAULT_CONFIG; the default's only
  DYNAMIC_DEFAULT_BROKER_CONFIG; `--all` lists the static keys too;
- a bad value or a key Kafka does not change dynamically: the command fails with
  INVALID_CONFIG naming the key, nothing changes;
- broker 1 restarted keeps refusing the batch (the value comes from the quorum);
- `--delete-config` on both levels gives server.properties' value back: the batch
  goes through everywhere;
- the same through `--bootstrap-controller` (the controller takes the change, the
  brokers apply it), described there too;
- a topic's max.message.bytes still beats the dynamic broker value;
- the storage side applies them too: a cluster-wide log.segment.bytes=1048576 and
  log.retention.bytes=1048576 roll and then delete the oldest segments of a partition
  written with 4 MB (a fetch from offset 0 gets OFFSET_OUT_OF_RANGE).

Ports 16000-16099 on 127.0.0.1 (controller 16000, its Raft port 16001; brokers 16010,
16020). Needs java and the Kafka jars (clients.py fetches them once).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

CLUSTER_ID = "sluice-dyncfg-cluster"
CONTROLLER_PORT = 16000
BROKER_PORTS = {1: 16010, 2: 16020}
STATIC_MAX = 1500000  # message.max.bytes in the brokers' server.properties
TOPIC = "dyncfg"
CONFIGS = "kafka.admin.ConfigCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
MESSAGE_TOO_LARGE = 10
BIG, SMALL = 3000, 1000  # value bytes of the batches produced

_procs = []


def _cleanup():
    for p in list(_procs):
        if p.poll() is None:
            p.kill()
            p.wait(10)
        _procs.remove(p)


def _on_signal(sig, frame):
    _cleanup()
    lib._cleanup_all()
    sys.exit(128 + sig)


import atexit  # noqa: E402

atexit.register(_cleanup)
signal.signal(signal.SIGTERM, _on_signal)


def controller_path():
    p = os.environ.get("SLUICE_CONTROLLER") or os.path.join(lib.ROOT, "build", "control", "sluice-controller")
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        raise lib.TestFailure(f"sluice-controller not found at {p} (ninja -C build control/sluice-controller)")
    return p


class Controller:
    def __init__(self, root):
        self.dir = os.path.join(root, "controller")
        os.makedirs(self.dir)
        self.props = os.path.join(self.dir, "controller.properties")
        self.logpath = os.path.join(self.dir, "controller.log")
        with open(self.props, "w") as f:
            f.write("process.roles=controller\nnode.id=1\n"
                    f"controller.quorum.voters=1@127.0.0.1:{CONTROLLER_PORT}\n"
                    f"listeners=CONTROLLER://127.0.0.1:{CONTROLLER_PORT}\ncontroller.listener.names=CONTROLLER\n"
                    f"metadata.log.dir={os.path.join(self.dir, 'metadata')}\ncluster.id={CLUSTER_ID}\n")
        self.proc = None

    def start(self):
        out = open(self.logpath, "a")
        self.proc = subprocess.Popen([controller_path(), self.props], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        out.close()
        _procs.append(self.proc)
        if not lib.wait_port(CONTROLLER_PORT, 20, lambda: self.proc.poll() is None):
            raise lib.TestFailure(f"the controller did not listen on {CONTROLLER_PORT}:\n{self.log_tail()}")
        log(f"controller 1 up on {CONTROLLER_PORT} (pid {self.proc.pid})")

    def stop(self):
        """SIGTERM; the exit status (-9: it needed SIGKILL)."""
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                rc = -9
        if self.proc in _procs:
            _procs.remove(self.proc)
        return rc

    def log_tail(self, n=30):
        try:
            with open(self.logpath, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"


def broker(node_id):
    b = lib.Broker(f"dyncfg-{node_id}", {
        "node.id": node_id,
        "process.roles": "broker",
        "controller.quorum.voters": f"1@127.0.0.1:{CONTROLLER_PORT}",
        "controller.listener.names": "CONTROLLER",
        "cluster.id": CLUSTER_ID,
        "message.max.bytes": STATIC_MAX,
        "broker.heartbeat.interval.ms": 500,
        "log.retention.check.interval.ms": 500,
    })
    if b.target != "sluice":
        lib.skip("a Sluice cluster (controller and brokers) is what this test starts")
    b.port = BROKER_PORTS[node_id]
    b.bootstrap = f"127.0.0.1:{b.port}"
    return b


class Tools:
    def __init__(self, java, bootstrap):
        self.java, self.bootstrap = java, bootstrap

    def run(self, cls, *args, ok=True, via="--bootstrap-server", timeout=120):
        target = self.bootstrap if via == "--bootstrap-server" else f"127.0.0.1:{CONTROLLER_PORT}"
        log(f"$ {cls.rsplit('.', 1)[-1]} {via} {target} {' '.join(args)}")
        r = self.java.run(cls, via, target, *args, timeout=timeout, heap="-Xmx256m")
        out = (r.stdout + r.stderr).strip()
        if out:
            print("\n".join("    " + ln for ln in out.splitlines()[:16]), flush=True)
        if ok:
            check(r.returncode == 0, f"{cls} {' '.join(args)} exited {r.returncode}:\n{r.stdout[-1500:]}\n"
                  f"{r.stderr[-3000:]}")
        return r

    def configs(self, *args, **kw):
        return self.run(CONFIGS, "--entity-type", "brokers", *args, **kw)


def leaders(port):
    """{partition: leader} of TOPIC as broker `port` sees it."""
    with lib.Conn(port) as c:
        _, topics = c.metadata([TOPIC], auto_create=False)
    err, parts = topics.get(TOPIC, (-1, {}))
    return {p: leader for p, (perr, leader) in parts.items() if err == 0 and perr == 0}


def produce(port, partition, value_bytes, topic=TOPIC):
    batch = lib.record_batch([(b"k", b"v" * value_bytes, [])])
    with lib.Conn(port) as c:
        err, _base, _msg = c.produce(topic, partition, batch, version=3, acks=1)
    return err


def expect_produce(where, value_bytes, want, what, timeout=15.0, topic=TOPIC):
    """Polls until a produce of value_bytes to each (port, partition) answers want
    (the brokers apply a change once their metadata shows it)."""
    deadline = time.monotonic() + timeout
    pending = dict(where)
    while True:
        for port, p in list(pending.items()):
            if produce(port, p, value_bytes, topic) == want:
                del pending[port]
        if not pending:
            log(f"{what}: produce of {value_bytes} bytes answered {want} on ports {sorted(where)}")
            return
        if time.monotonic() > deadline:
            got = {port: produce(port, p, value_bytes, topic) for port, p in pending.items()}
            raise lib.TestFailure(f"{what}: produce of {value_bytes} bytes answered {got}, want {want}")
        time.sleep(0.2)


def synonyms_of(out, key):
    """The `key=value sensitive=... synonyms={...}` line of kafka-configs --describe."""
    m = re.search(r"^\s*" + re.escape(key) + r"=(\S*) sensitive=(\S+) synonyms=\{(.*)\}\s*$", out, re.M)
    return (m.group(1), m.group(3)) if m else (None, None)


def test():
    java = clients.Java()
    root = tempfile.mkdtemp(prefix="sluice-dyncfg-")
    ctl = Controller(root)
    brokers = {}
    try:
        ctl.start()
        for n in (1, 2):
            brokers[n] = broker(n)
            brokers[n].start(timeout=60)
        b1, b2 = brokers[1], brokers[2]
        t = Tools(java, b1.bootstrap)

        t.run(TOPICS, "--create", "--topic", TOPIC, "--partitions", "4", "--replication-factor", "1")
        deadline = time.monotonic() + 20
        while True:
            lead = leaders(b1.port)
            by_node = {}
            for p, node in sorted(lead.items()):
                by_node.setdefault(node, p)
            if len(lead) == 4 and set(by_node) == {1, 2} and leaders(b2.port) == lead:
                break
            check(time.monotonic() < deadline, f"partition leaders of {TOPIC}: {lead} (want both brokers)")
            time.sleep(0.2)
        where = {BROKER_PORTS[n]: p for n, p in by_node.items()}
        log(f"partitions led: {by_node}")
        expect_produce(where, BIG, 0, "static message.max.bytes=1500000")

        # the cluster-wide default, through a broker
        r = t.configs("--entity-default", "--alter", "--add-config", "message.max.bytes=2000")
        check("Completed updating default config for brokers in the cluster" in r.stdout, f"printed {r.stdout!r}")
        expect_produce(where, BIG, MESSAGE_TOO_LARGE, "cluster-wide message.max.bytes=2000")
        expect_produce(where, SMALL, 0, "cluster-wide message.max.bytes=2000")

        # broker 2's own value beats the default there only
        r = t.configs("--entity-name", "2", "--alter", "--add-config", "message.max.bytes=5000")
        check("Completed updating config for broker 2" in r.stdout, f"printed {r.stdout!r}")
        expect_produce({b2.port: where[b2.port]}, BIG, 0, "broker 2's message.max.bytes=5000")
        expect_produce({b1.port: where[b1.port]}, BIG, MESSAGE_TOO_LARGE, "broker 1 keeps the default")

        # sources
        r = t.configs("--entity-name", "2", "--describe")
        val, syn = synonyms_of(r.stdout, "message.max.bytes")
        check(val == "5000" and syn == "DYNAMIC_BROKER_CONFIG:message.max.bytes=5000, "
              "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, "
              f"STATIC_BROKER_CONFIG:message.max.bytes={STATIC_MAX}, DEFAULT_CONFIG:message.max.bytes=1048588",
              f"--describe --entity-name 2: {r.stdout!r}")
        check("Dynamic configs for broker 2 are:" in r.stdout, f"{r.stdout!r}")
        r = t.configs("--entity-default", "--describe")
        val, syn = synonyms_of(r.stdout, "message.max.bytes")
        check(val == "2000" and syn == "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000",
              f"--describe --entity-default: {r.stdout!r}")
        r = t.configs("--entity-name", "1", "--describe", "--all")
        val, syn = synonyms_of(r.stdout, "message.max.bytes")
        check(val == "2000" and syn and syn.startswith("DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, "
                                                       "STATIC_BROKER_CONFIG"),
              f"--describe --all --entity-name 1: message.max.bytes={val} synonyms={{{syn}}}")
        val, syn = synonyms_of(r.stdout, "node.id")
        check(val == "1", f"--describe --all lists the static keys: node.id={val}")

        # refused changes name the key; nothing changes
        for kv, key in (("message.max.bytes=abc", "message.max.bytes"), ("log.segment.bytes=100", "log.segment.bytes"),
                        ("log.dirs=/tmp", "log.dirs")):
            r = t.configs("--entity-default", "--alter", "--add-config", kv, ok=False)
            text = r.stdout + r.stderr
            check(r.returncode != 0 and "InvalidConfigurationException" in text and key in text,
                  f"--add-config {kv}: exit {r.returncode}, {text[-1500:]!r}")
        expect_produce(where, SMALL, 0, "after the refused changes")
        expect_produce({b1.port: where[b1.port]}, BIG, MESSAGE_TOO_LARGE, "after the refused changes")

        # a topic's own limit beats the broker's
        t.run(CONFIGS, "--entity-type", "topics", "--entity-name", TOPIC, "--alter", "--add-config",
              "max.message.bytes=100000")
        expect_produce({b1.port: where[b1.port]}, BIG, 0, "topic max.message.bytes=100000")
        t.run(CONFIGS, "--entity-type", "topics", "--entity-name", TOPIC, "--alter", "--delete-config",
              "max.message.bytes")
        expect_produce({b1.port: where[b1.port]}, BIG, MESSAGE_TOO_LARGE, "topic override deleted")

        # a restarted broker takes the value from the quorum
        b1.stop()
        b1.start(timeout=60)
        check(produce(b1.port, where[b1.port], BIG) == MESSAGE_TOO_LARGE,
              "broker 1 restarted: the first produce is not refused by the dynamic message.max.bytes=2000")
        log("broker 1 restarted: still refuses (the dynamic value is in the quorum)")

        # deleting both levels gives server.properties' value back
        t.configs("--entity-name", "2", "--alter", "--delete-config", "message.max.bytes")
        t.configs("--entity-default", "--alter", "--delete-config", "message.max.bytes")
        expect_produce(where, BIG, 0, "both levels deleted")
        r = t.configs("--entity-name", "1", "--describe", "--all")
        val, syn = synonyms_of(r.stdout, "message.max.bytes")
        check(val == str(STATIC_MAX) and syn.startswith(f"STATIC_BROKER_CONFIG:message.max.bytes={STATIC_MAX}"),
              f"after --delete-config: message.max.bytes={val} synonyms={{{syn}}}")

        # through the controller
        r = t.configs("--entity-default", "--alter", "--add-config", "message.max.bytes=2500",
                      via="--bootstrap-controller")
        check("Completed updating default config for brokers in the cluster" in r.stdout, f"printed {r.stdout!r}")
        expect_produce(where, BIG, MESSAGE_TOO_LARGE, "message.max.bytes=2500 through the controller")
        r = t.configs("--entity-default", "--describe", via="--bootstrap-controller")
        val, syn = synonyms_of(r.stdout, "message.max.bytes")
        check(val == "2500" and "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2500" in syn,
              f"--bootstrap-controller --describe --entity-default: {r.stdout!r}")
        r = t.configs("--entity-default", "--alter", "--add-config", "message.max.bytes=-1",
                      via="--bootstrap-controller", ok=False)
        check(r.returncode != 0 and "message.max.bytes" in r.stdout + r.stderr,
              f"a bad value through the controller: exit {r.returncode}")
        t.configs("--entity-default", "--alter", "--delete-config", "message.max.bytes", via="--bootstrap-controller")
        expect_produce(where, BIG, 0, "deleted through the controller")

        # segments and retention, applied by the storage cores
        t.configs("--entity-default", "--alter", "--add-config", "log.segment.bytes=1048576,log.retention.bytes=1048576")
        time.sleep(1)  # every broker's snapshot has it (a produce before would not be refused: nothing to poll on)
        p1 = where[b1.port]
        for _ in range(8):
            check(produce(b1.port, p1, 500 * 1024) == 0, "a 500 KB produce under message.max.bytes=1500000")
        deadline = time.monotonic() + 30
        while True:
            with lib.Conn(b1.port) as c:
                err, hw, _ = c.fetch(TOPIC, p1, 0, max_bytes=1024)
            if err == 1:  # OFFSET_OUT_OF_RANGE: the first segments are gone
                break
            check(time.monotonic() < deadline, f"retention by the dynamic log.retention.bytes: fetch from 0 "
                  f"answered {err} (high watermark {hw}) after 30 s")
            time.sleep(0.5)
        log("dynamic log.segment.bytes and log.retention.bytes: the oldest segments rolled and deleted")

        for b in brokers.values():
            check(b.stop() == 0, "a broker's SIGTERM exit status")
        check(ctl.stop() == 0, "the controller's SIGTERM exit status")
    except Exception:
        for n, b in brokers.items():
            log(f"--- broker {n} log ---\n{b.log_tail(30)}")
        log(f"--- controller log ---\n{ctl.log_tail()}")
        raise
    finally:
        for b in brokers.values():
            b.cleanup()
        ctl.stop()
        if os.environ.get("SLUICE_TEST_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    lib.main(test)
