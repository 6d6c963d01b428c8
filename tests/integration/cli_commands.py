#!/usr/bin/env python3
"""The `sluice` CLI's logger, topic and group commands against a running single-node
broker, checked against what Apache Kafka's own tools (4.1 jars, run as
classes) see of the same broker.

Proves:
- logger: the list names root and the area loggers with their levels (table and
  --json); `logger storage DEBUG` sets it (exit 0, the new level printed) and
  kafka-configs --describe --entity-type broker-loggers shows storage=DEBUG (and
  the broker's log says it applied it); `logger storage
  --delete` gives it the root's level again (the CLI and kafka-configs agree);
  the broker's refusals come back as exit 1 with Kafka's error name and message
  on stderr: deleting root, an unknown logger, a level Kafka has not, another
  broker's id (--broker-id);
- topic create (partitions, a config) then `topic describe` prints what
  kafka-topics --describe prints of the topic: the same topic id, partition
  count, replication factor, configs, and per partition the same leader,
  replicas and ISR (and --json the same); create again: exit 1
  TOPIC_ALREADY_EXISTS; topic list (text and --json) is kafka-topics --list;
  alter-config --set/--delete seen by kafka-configs --describe; delete: gone
  from kafka-topics --list, describe then exits 1 UNKNOWN_TOPIC_OR_PARTITION;
- group: with a kcat -G member consuming a 3-partition topic, `group describe`
  shows it Stable with that member and its assignment, the same row (consumer id,
  host, client id, partitions, assignment) as kafka-consumer-groups --describe
  --members --verbose; `group list` is kafka-consumer-groups --list; once the
  member committed and left and 10 more records arrived, `group lag` shows per
  partition the same committed offset, log end offset and lag as
  kafka-consumer-groups --describe (total lag 10, --json too); an unknown group:
  exit 1 GROUP_ID_NOT_FOUND;
- --help of each command: usage on stdout, exit 0; usage errors exit 2; no
  server listening: exit 3.

SLUICE_TEST_TARGET=kafka runs the same commands against Apache Kafka (its
loggers have other names: the first one not root is used instead of storage).
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

TOPICS = "org.apache.kafka.tools.TopicCommand"
CGC = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GROUP, GROUP_TOPIC = "cli-group", "cli-group-topic"
CONFIGS = "kafka.admin.ConfigCommand"
TOPIC = "cli-commands"
BROKER_ID = "1"


def cli_path():
    p = os.environ.get("SLUICE_CLI") or os.path.join(lib.ROOT, "build", "tools", "sluice")
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        raise lib.TestFailure(f"sluice not found at {p} (set SLUICE_CLI or build it)")
    return p


class Cli:
    def __init__(self, broker):
        self.exe = cli_path()
        self.b = broker.bootstrap

    def run(self, *args, rc=0, server=True):
        argv = [self.exe, *(["--bootstrap-server", self.b] if server else []), *args]
        r = lib.run(argv, timeout=60)
        log(f"$ sluice {' '.join(args)} -> {r.returncode}")
        if rc is not None:
            check(r.returncode == rc, f"sluice {' '.join(args)}: exit {r.returncode}, want {rc}\n"
                  f"stdout {r.stdout[-1500:]!r}\nstderr {r.stderr[-1500:]!r}")
        return r

    def json(self, *args):
        r = self.run(*args, "--json")
        try:
            doc = json.loads(r.stdout)
        except ValueError as e:
            raise lib.TestFailure(f"sluice {' '.join(args)} --json is not one JSON document ({e}): {r.stdout!r}")
        return doc

    def refused(self, args, name, message):
        r = self.run(*args, rc=1)
        check(r.stdout == "" and name in r.stderr and message in r.stderr,
              f"sluice {' '.join(args)}: want {name}: {message!r} on stderr, got {r.stderr!r}, stdout {r.stdout!r}")


class Kafka:
    """Kafka's own tools against the same broker."""

    def __init__(self, java, broker):
        self.java = java
        self.b = broker.bootstrap

    def run(self, cls, *args):
        r = self.java.run(cls, "--bootstrap-server", self.b, *args, timeout=120, heap="-Xmx256m")
        check(r.returncode == 0, f"{cls} {' '.join(args)}: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-2000:]}")
        return r.stdout

    def loggers(self):
        out = self.run(CONFIGS, "--entity-type", "broker-loggers", "--entity-name", BROKER_ID, "--describe")
        return dict(re.findall(r"^\s*(\S+)=(\S+) sensitive=false", out, re.M))

    def topic_configs(self, topic):
        out = self.run(CONFIGS, "--entity-type", "topics", "--entity-name", topic, "--describe")
        return dict(re.findall(r"^\s*(\S+)=(\S*) sensitive=false", out, re.M))

    def topics(self):
        return self.run(TOPICS, "--list").split()


def parse_describe(out, topic):
    """kafka-topics --describe's text (or the CLI's, which prints the same)."""
    m = re.search(r"Topic: " + re.escape(topic) + r"\s+TopicId: (\S+)\s+PartitionCount: (\d+)\s+"
                  r"ReplicationFactor: (\d+)\s+Configs: ?(\S*)", out)
    check(m, f"no topic summary line in {out!r}")
    configs = dict(kv.split("=", 1) for kv in m.group(4).split(",") if "=" in kv)
    parts = re.findall(r"Topic: " + re.escape(topic) + r"\s+Partition: (\d+)\s+Leader: (\S+)\s+Replicas: (\S+)\s+"
                       r"Isr: (\S+)", out)
    return {"id": m.group(1), "count": int(m.group(2)), "rf": int(m.group(3)), "configs": configs,
            "partitions": [tuple(p) for p in parts]}


def loggers(cli, kafka, broker):
    doc = cli.json("logger")
    check(str(doc.get("broker_id")) == BROKER_ID, f"logger --json: broker_id {doc}")
    levels = {lg["name"]: lg["level"] for lg in doc["loggers"]}
    check("root" in levels and len(levels) > 1, f"logger lists root and others: {levels}")
    sluice = broker.target == "sluice"
    name = "storage" if sluice else sorted(k for k in levels if k != "root")[0]
    check(name in levels, f"logger {name} listed: {levels}")
    table = cli.run("logger").stdout
    check(re.search(r"^root\s+" + levels["root"] + r"$", table, re.M)
          and re.search(r"^" + re.escape(name) + r"\s+\S+$", table, re.M), f"logger table:\n{table}")
    check(kafka.loggers() == levels, f"kafka-configs broker-loggers {kafka.loggers()} != the CLI's {levels}")

    r = cli.run("logger", name, "DEBUG")
    check(re.search(r"^" + re.escape(name) + r"\s+DEBUG$", r.stdout, re.M), f"logger {name} DEBUG printed {r.stdout!r}")
    check(cli.json("logger", name) == {"broker_id": int(BROKER_ID), "loggers": [{"name": name, "level": "DEBUG"}]},
          f"logger {name} --json after the change")
    check(kafka.loggers().get(name) == "DEBUG", f"kafka-configs does not show {name}=DEBUG")
    log(f"logger {name} DEBUG: seen by kafka-configs --describe --entity-type broker-loggers")
    if sluice:
        check("logger storage: DEBUG" in open(broker.logfile, errors="replace").read(),
              "the broker's log does not say storage is at DEBUG now")

    doc = cli.json("logger", name, "--delete")
    check(doc["loggers"] == [{"name": name, "level": levels["root"]}], f"logger {name} --delete: {doc}")
    check(kafka.loggers().get(name) == levels["root"], f"kafka-configs after --delete: {kafka.loggers()}")
    log(f"logger {name} --delete: the root's level {levels['root']} again")

    cli.refused(("logger", "root", "--delete"), "INVALID_REQUEST", "Removing the log level of the root logger is not allowed")
    cli.refused(("logger", "no.such.logger", "INFO"), "INVALID_CONFIG", "no.such.logger")
    cli.refused(("logger", name, "LOUD"), "INVALID_CONFIG", "Cannot set the log level of")
    cli.refused(("logger", "--broker-id", "7"), "INVALID_REQUEST", "Unexpected broker id, expected 1 but received 7")
    r = cli.run("logger", "no.such.logger", rc=1)
    check("no logger no.such.logger" in r.stderr, f"logger NAME of no logger: {r.stderr!r}")
    log("refusals: exit 1 with Kafka's error names and messages")


def topics(cli, kafka):
    r = cli.run("topic", "create", TOPIC, "--partitions", "3", "--replication-factor", "1",
                "--config", "retention.ms=123456789", "--config", "cleanup.policy=compact")
    check(r.stdout == f"Created topic {TOPIC}.\n", f"topic create printed {r.stdout!r}")
    cli.refused(("topic", "create", TOPIC, "--partitions", "1"), "TOPIC_ALREADY_EXISTS", TOPIC)
    # Kafka's brokers learn a new topic from the controller a moment after CreateTopics answers
    lib_wait(lambda: cli.run("topic", "describe", TOPIC, rc=None).returncode == 0, f"{TOPIC} in Metadata")

    ours = parse_describe(cli.run("topic", "describe", TOPIC).stdout, TOPIC)
    theirs = parse_describe(kafka.run(TOPICS, "--describe", "--topic", TOPIC), TOPIC)
    check(ours == theirs, f"topic describe differs from kafka-topics --describe:\n  ours   {ours}\n  theirs {theirs}")
    check(ours["count"] == 3 and ours["rf"] == 1 and [p[0] for p in ours["partitions"]] == ["0", "1", "2"],
          f"topic describe: {ours}")
    # (Kafka also lists the topic configs its server.properties sets: a subset here)
    check({k: ours["configs"].get(k) for k in ("retention.ms", "cleanup.policy")} ==
          {"retention.ms": "123456789", "cleanup.policy": "compact"}, f"configs {ours['configs']}")
    doc = cli.json("topic", "describe", TOPIC)
    check(doc["topic"] == TOPIC and doc["topic_id"] == theirs["id"] and doc["partition_count"] == 3
          and doc["replication_factor"] == 1 and doc["configs"] == theirs["configs"],
          f"topic describe --json: {doc}")
    check([(str(p["partition"]), str(p["leader"]), ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
           for p in doc["partitions"]] == theirs["partitions"], f"topic describe --json partitions: {doc['partitions']}")
    log(f"topic describe = kafka-topics --describe: {theirs['partitions']}")

    listed = cli.run("topic", "list").stdout.split()
    check(listed == sorted(kafka.topics()), f"topic list {listed} != kafka-topics --list {kafka.topics()}")
    check(cli.json("topic", "list") == {"topics": listed}, "topic list --json")

    doc = cli.json("topic", "alter-config", TOPIC, "--set", "segment.ms=7200000", "--delete", "retention.ms")
    check(doc == {"topic": TOPIC, "set": {"segment.ms": "7200000"}, "deleted": ["retention.ms"]},
          f"alter-config --json: {doc}")
    cfg = kafka.topic_configs(TOPIC)
    check(cfg.get("segment.ms") == "7200000" and "retention.ms" not in cfg, f"kafka-configs after alter-config: {cfg}")
    after = parse_describe(cli.run("topic", "describe", TOPIC).stdout, TOPIC)["configs"]
    check(after.get("segment.ms") == "7200000" and after.get("cleanup.policy") == "compact"
          and "retention.ms" not in after, f"topic describe after alter-config: {after}")
    cli.refused(("topic", "alter-config", TOPIC, "--set", "no.such.config=1"), "INVALID_CONFIG", "no.such.config")
    cli.refused(("topic", "alter-config", "no-such-topic", "--set", "retention.ms=1"), "UNKNOWN_TOPIC_OR_PARTITION", "")
    log("alter-config: seen by kafka-configs --describe; refusals exit 1")

    r = cli.run("topic", "delete", TOPIC)
    check(r.stdout == f"Deleted topic {TOPIC}.\n", f"topic delete printed {r.stdout!r}")
    lib_wait(lambda: TOPIC not in kafka.topics(), f"{TOPIC} gone from kafka-topics --list")
    cli.refused(("topic", "describe", TOPIC), "UNKNOWN_TOPIC_OR_PARTITION", "")
    cli.refused(("topic", "delete", TOPIC), "UNKNOWN_TOPIC_OR_PARTITION", "")
    log("topic delete: gone for kafka-topics; describe and delete again exit 1")


def lib_wait(fn, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise lib.TestFailure(f"{what}: not within {timeout}s")
        time.sleep(0.5)


def table(out):
    """Rows of a kafka-consumer-groups-like table as dicts keyed by its header's words."""
    cols, rows = None, []
    for ln in out.splitlines():
        toks = ln.split()
        if toks and toks[0] == "GROUP":
            cols = toks
        elif cols and len(toks) == len(cols):
            rows.append(dict(zip(cols, toks)))
    return rows


def kcat(broker, *args, input=None):
    r = lib.run([lib.kcat_path(), "-b", broker.bootstrap, *args], timeout=60, input=input)
    check(r.returncode == 0, f"kcat {args}: exit {r.returncode} {r.stderr[-1000:]}")


def groups(cli, kafka, broker):
    cli.run("topic", "create", GROUP_TOPIC, "--partitions", "3")
    lib_wait(lambda: cli.run("topic", "describe", GROUP_TOPIC, rc=None).returncode == 0, f"{GROUP_TOPIC} in Metadata")
    kcat(broker, "-P", "-t", GROUP_TOPIC, "-K", ":", input="".join(f"k{i}:v{i}\n" for i in range(30)))
    out = open(os.path.join(broker.tmp, "kcat-member.out"), "wb")
    member = subprocess.Popen([lib.kcat_path(), "-b", broker.bootstrap, "-G", GROUP, "-q", "-X", "client.id=m1",
                               "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=200",
                               GROUP_TOPIC], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    try:
        def stable():
            r = cli.run("group", "describe", GROUP, "--json", rc=None)
            if r.returncode != 0:
                return None
            d = json.loads(r.stdout)
            return d if d["state"] == "Stable" and len(d["members"]) == 1 and d["members"][0]["assignment"] else None

        lib_wait(stable, f"{GROUP} Stable with its member", 60)
        d = stable()
        m = d["members"][0]
        check(m["client_id"] == "m1" and d["protocol_type"] == "consumer" and
              sorted(a["partition"] for a in m["assignment"]) == [0, 1, 2], f"group describe --json: {d}")
        ours = table(cli.run("group", "describe", GROUP).stdout)
        theirs = table(kafka.run(CGC, "--describe", "--group", GROUP, "--members", "--verbose"))
        check(len(ours) == 1 and len(theirs) == 1, f"one member row each: ours {ours}, theirs {theirs}")
        keys = ("CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
        theirs[0].setdefault("ASSIGNMENT", theirs[0].get("CURRENT-ASSIGNMENT"))
        check({k: ours[0].get(k) for k in keys} == {k: theirs[0].get(k) for k in keys},
              f"group describe differs from kafka-consumer-groups --describe --members --verbose:\n"
              f"  ours   {ours[0]}\n  theirs {theirs[0]}")
        log(f"group describe = kafka-consumer-groups --members --verbose: {ours[0]}")
        listed = cli.run("group", "list").stdout.split()
        check(GROUP in listed and listed == sorted(kafka.run(CGC, "--list").split()),
              f"group list {listed} != kafka-consumer-groups --list")

        def committed_all():
            d = cli.json("group", "lag", GROUP)
            return d["total_lag"] == 0 and all(p["committed_offset"] is not None for p in d["partitions"])

        lib_wait(committed_all, f"{GROUP} committed every record", 60)
    finally:
        member.send_signal(signal.SIGTERM)
        try:
            member.wait(20)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait()
    lib_wait(lambda: cli.json("group", "describe", GROUP)["state"] == "Empty", f"{GROUP} Empty", 60)
    kcat(broker, "-P", "-t", GROUP_TOPIC, "-K", ":", input="".join(f"k{i}:after{i}\n" for i in range(10)))
    ours = {r["PARTITION"]: r for r in table(cli.run("group", "lag", GROUP).stdout)}
    theirs = {r["PARTITION"]: r for r in table(kafka.run(CGC, "--describe", "--group", GROUP))}
    keys = ("TOPIC", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
    check(sorted(ours) == ["0", "1", "2"] and sorted(ours) == sorted(theirs)
          and all({k: ours[p][k] for k in keys} == {k: theirs[p][k] for k in keys} for p in ours),
          f"group lag differs from kafka-consumer-groups --describe:\n  ours   {ours}\n  theirs {theirs}")
    d = cli.json("group", "lag", GROUP)
    check(d["total_lag"] == 10 and sum(p["lag"] for p in d["partitions"]) == 10
          and sum(p["log_end_offset"] for p in d["partitions"]) == 40, f"group lag --json: {d}")
    log(f"group lag = kafka-consumer-groups --describe: {[(p, ours[p]['LAG']) for p in sorted(ours)]}")
    cli.refused(("group", "describe", "no-such-group"), "GROUP_ID_NOT_FOUND", "")


def usage(cli):
    for group in ("cluster", "logger", "topic", "group"):
        r = cli.run(group, "--help", server=False)
        check(r.stdout.startswith("usage: sluice") and group in r.stdout.split("\n")[0], f"{group} --help: {r.stdout!r}")
    for args in (["topic"], ["topic", "describe"], ["topic", "list", "x"], ["topic", "create", "t", "--partitions", "0"],
                 ["topic", "alter-config", "t"], ["topic", "alter-config", "t", "--set", "novalue"],
                 ["logger", "a", "b", "c"], ["logger", "a", "INFO", "--delete"], ["logger", "--partitions", "3"],
                 ["group"], ["group", "lag"], ["group", "list", "g"], ["group", "describe", "g", "--set", "a=b"],
                 ["frob"]):
        r = cli.run(*args, rc=2)
        check("usage: sluice" in r.stderr and r.stdout == "", f"sluice {args}: {r.stderr!r}")
    down = lib.free_port()
    for args in (["logger"], ["topic", "list"], ["group", "list"], ["cluster", "status"]):
        r = lib.run([cli.exe, "--bootstrap-server", f"127.0.0.1:{down}", *args], timeout=60)
        check(r.returncode == 3 and "cannot connect" in r.stderr, f"{args} with nothing listening: "
              f"exit {r.returncode}, {r.stderr!r}")
    log("--help: exit 0; usage errors: exit 2; nothing listening: exit 3")


def test():
    java = clients.Java()
    with lib.Broker("cli-commands") as broker:
        cli, kafka = Cli(broker), Kafka(java, broker)
        usage(cli)
        loggers(cli, kafka, broker)
        topics(cli, kafka)
        groups(cli, kafka, broker)


if __name__ == "__main__":
    lib.main(test)
