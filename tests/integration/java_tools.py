#!/usr/bin/env python3
"""Kafka's quickstart with Kafka's own command-line tools (Apache Kafka 4.1 jars from
Maven Central, run as classes; kafka-<tool>.sh are thin wrappers around them):

  kafka-topics --create (3 partitions) / --list (only that topic: Kafka has no
      __consumer_offsets before a group is used) / --describe
  kafka-console-producer: the quickstart's two events, then 60 keyed events
  kafka-get-offsets (GetOffsetShell): end offset of every partition
  kafka-console-consumer --partition P --offset earliest (assign mode, no group):
      every partition read back, each event exactly where the producer put it
  kafka-topics --alter --partitions 6, --describe shows 6, keyed events reach them
  kafka-configs --describe / --alter --add-config retention.ms=... / --describe
      (and kafka-topics --describe shows it), --delete-config removes it again
  kafka-configs --entity-type broker-loggers: --describe lists root and the other
      loggers with their levels; root=DEBUG and another logger at TRACE set at run
      time (the broker's log gains DEBUG lines), --delete-config gives that logger the
      root's level again; deleting root and naming a logger the broker has not are
      refused with Kafka's messages

With `--group` it runs only the quickstart's own consume step instead:
  kafka-console-consumer --from-beginning without --partition, which joins a
  (random) consumer group: classic group protocol (FindCoordinator, JoinGroup,
  SyncGroup, Heartbeat, OffsetFetch, LeaveGroup). Registered as its own test,
  java_tools_group, so group support can fail separately from the rest.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

TOPIC = "quickstart-events"
TOPICS = "org.apache.kafka.tools.TopicCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONFIGS = "kafka.admin.ConfigCommand"
FIRST = ["This is my first event", "This is my second event"]
differences = []  # output that differs from Kafka's without stopping the walk-through


def soft_check(cond, what):
    if not cond:
        log(f"DIFFERS FROM KAFKA: {what}")
        differences.append(what)


class Tools:
    def __init__(self, java, broker):
        self.java = java
        self.b = broker.bootstrap

    def run(self, name, cls, *args, input=None, timeout=90, ok=True):
        log(f"$ kafka-{name} {' '.join(args)}")
        r = self.java.run(cls, "--bootstrap-server", self.b, *args, input=input, timeout=timeout,
                          heap="-Xmx256m")
        out = r.stdout.strip()
        if out:
            print("\n".join("    " + ln for ln in out.splitlines()[:20]), flush=True)
        if ok:
            check(r.returncode == 0, f"kafka-{name} {' '.join(args)} exited {r.returncode}:\n"
                  f"{r.stdout[-1500:]}\n{r.stderr[-3000:]}")
        return r

    def end_offsets(self):
        r = self.run("get-offsets", OFFSETS, "--topic", TOPIC)
        offs = {}
        for ln in r.stdout.split():
            m = re.fullmatch(re.escape(TOPIC) + r":(\d+):(\d+)", ln)
            check(m, f"kafka-get-offsets printed {ln!r}, expected {TOPIC}:PARTITION:OFFSET")
            offs[int(m.group(1))] = int(m.group(2))
        return offs

    def describe(self):
        r = self.run("topics", TOPICS, "--describe", "--topic", TOPIC)
        m = re.search(r"Topic: " + re.escape(TOPIC) + r"\s+TopicId: (\S+)\s+PartitionCount: (\d+)\s+"
                      r"ReplicationFactor: (\d+)\s+Configs: ?(\S*)", r.stdout)
        check(m, f"kafka-topics --describe: no topic summary line in {r.stdout!r}")
        parts = re.findall(r"Partition: (\d+)\s+Leader: (-?\d+)\s+Replicas: (\S+)\s+Isr: (\S+)", r.stdout)
        configs = dict(kv.split("=", 1) for kv in m.group(4).split(",") if "=" in kv)
        return {"id": m.group(1), "count": int(m.group(2)), "rf": int(m.group(3)),
                "configs": configs, "partitions": parts, "raw": r.stdout}

    def consume_partition(self, p, n):
        r = self.run("console-consumer", CONSUMER, "--topic", TOPIC, "--partition", str(p),
                     "--offset", "earliest", "--max-messages", str(n), "--timeout-ms", "20000",
                     "--property", "print.partition=true", "--property", "print.offset=true",
                     "--property", "print.key=true", "--property", "key.separator=|")
        check(f"Processed a total of {n} messages" in r.stderr,
              f"console consumer on partition {p}: no 'Processed a total of {n} messages' in "
              f"{r.stderr[-2000:]!r}")
        out = []
        for ln in r.stdout.splitlines():
            m = re.fullmatch(r"Partition:(\d+)\|Offset:(\d+)\|(.*?)\|(.*)", ln)
            check(m, f"console consumer printed {ln!r}")
            out.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)))
        check(len(out) == n, f"console consumer on partition {p}: {len(out)} lines, want {n}")
        return out


def quickstart(java, broker):
    t = Tools(java, broker)
    r = t.run("topics", TOPICS, "--create", "--topic", TOPIC, "--partitions", "3",
              "--replication-factor", "1")
    check(f"Created topic {TOPIC}." in r.stdout, f"kafka-topics --create printed {r.stdout!r}")
    r = t.run("topics", TOPICS, "--list")
    # Kafka creates __consumer_offsets only when a consumer group is first used: on a
    # fresh broker the list is exactly the user's topics.
    soft_check(r.stdout.split() == [TOPIC], f"kafka-topics --list on a fresh broker printed {r.stdout!r}, "
               f"Kafka prints only {TOPIC!r}")
    check(TOPIC in r.stdout.split(), f"kafka-topics --list does not show {TOPIC}: {r.stdout!r}")
    d = t.describe()
    check(d["count"] == 3, f"kafka-topics --describe: PartitionCount {d['count']}, want 3")
    check(d["rf"] == 1, f"kafka-topics --describe: ReplicationFactor {d['rf']}, want 1")
    check([int(p[0]) for p in d["partitions"]] == [0, 1, 2],
          f"kafka-topics --describe lists partitions {d['partitions']}")
    check(all(p[1] == "1" and p[2] == "1" and p[3] == "1" for p in d["partitions"]),
          f"kafka-topics --describe: want Leader 1, Replicas 1, Isr 1: {d['partitions']}")
    # Kafka 4.x's kafka-topics describes through DescribeTopicPartitions (API 75) and
    # prints the (empty) eligible leader replicas; through Metadata it prints N/A.
    soft_check("Elr: N/A" not in d["raw"], "kafka-topics --describe prints 'Elr: N/A\tLastKnownElr: N/A' "
               "where Kafka prints them empty (DescribeTopicPartitions, API key 75, is not served)")
    check(re.fullmatch(r"[A-Za-z0-9_-]{22}", d["id"]) and d["id"] != "AAAAAAAAAAAAAAAAAAAAAA",
          f"kafka-topics --describe: TopicId {d['id']!r} is not a real topic id")

    # The quickstart's two events (no key, so one partition gets both).
    t.run("console-producer", PRODUCER, "--topic", TOPIC, input="\n".join(FIRST) + "\n")
    offs = t.end_offsets()
    check(sorted(offs) == [0, 1, 2] and sum(offs.values()) == 2,
          f"kafka-get-offsets after 2 events: {offs}")
    # Then keyed events, which spread over the partitions by key hash.
    keyed = [(f"user-{i}", f"keyed event {i}") for i in range(60)]
    t.run("console-producer", PRODUCER, "--topic", TOPIC, "--property", "parse.key=true",
          "--property", "key.separator=:", input="".join(f"{k}:{v}\n" for k, v in keyed))
    offs = t.end_offsets()
    check(sum(offs.values()) == 62, f"kafka-get-offsets after 62 events: {offs}")
    check(sum(1 for v in offs.values() if v) >= 2, f"keyed events all in one partition: {offs}")

    # Console consumer in assign mode, partition by partition, from the earliest offset.
    got = []
    for p in sorted(offs):
        if offs[p]:
            got += t.consume_partition(p, offs[p])
    unkeyed = [g for g in got if g[2] == "null"]
    check([g[3] for g in unkeyed] == FIRST and len({g[0] for g in unkeyed}) == 1
          and [g[1] for g in unkeyed] == [0, 1],
          f"the quickstart's two events did not come back in order at offsets 0, 1 of one "
          f"partition: {unkeyed}")
    check(sorted((g[2], g[3]) for g in got if g[2] != "null") == sorted(keyed),
          "keyed events consumed differ from those produced")
    per_key = {}
    for p, off, k, v in got:
        per_key.setdefault(k, set()).add(p)
    check(all(len(ps) == 1 for k, ps in per_key.items() if k != "null"),
          "a key appeared in more than one partition")

    # More partitions.
    t.run("topics", TOPICS, "--alter", "--topic", TOPIC, "--partitions", "6")
    d = t.describe()
    check(d["count"] == 6, f"after --alter --partitions 6, --describe shows PartitionCount {d['count']}")
    check([int(p[0]) for p in d["partitions"]] == list(range(6)),
          f"after --alter, --describe lists partitions {[p[0] for p in d['partitions']]}")
    more = [(f"user-{i}", f"after alter {i}") for i in range(60, 160)]
    t.run("console-producer", PRODUCER, "--topic", TOPIC, "--property", "parse.key=true",
          "--property", "key.separator=:", input="".join(f"{k}:{v}\n" for k, v in more))
    offs2 = t.end_offsets()
    check(sorted(offs2) == list(range(6)), f"kafka-get-offsets after --alter lists {sorted(offs2)}")
    check(sum(offs2.values()) == 162, f"kafka-get-offsets after 162 events: {offs2}")
    check(any(offs2[p] for p in (3, 4, 5)), f"no event reached the new partitions 3-5: {offs2}")
    newp = next(p for p in (3, 4, 5) if offs2[p])
    rows = t.consume_partition(newp, offs2[newp])
    check(all(v.startswith("after alter ") for _, _, _, v in rows),
          f"partition {newp} holds events from before --alter: {rows[:3]}")

    # Topic configs.
    cfg = ["--entity-type", "topics", "--entity-name", TOPIC]
    r = t.run("configs", CONFIGS, *cfg, "--describe")
    check(f"Dynamic configs for topic {TOPIC} are:" in r.stdout and "retention.ms" not in r.stdout,
          f"kafka-configs --describe before --alter printed {r.stdout!r}")
    r = t.run("configs", CONFIGS, *cfg, "--alter", "--add-config", "retention.ms=86400000")
    check(f"Completed updating config for topic {TOPIC}." in r.stdout,
          f"kafka-configs --alter printed {r.stdout!r}")
    r = t.run("configs", CONFIGS, *cfg, "--describe")
    check(re.search(r"^\s*retention\.ms=86400000 sensitive=false "
                    r"synonyms=\{DYNAMIC_TOPIC_CONFIG:retention\.ms=86400000", r.stdout, re.M),
          f"kafka-configs --describe after --alter does not show retention.ms=86400000: {r.stdout!r}")
    d = t.describe()
    check(d["configs"].get("retention.ms") == "86400000",
          f"kafka-topics --describe Configs: {d['configs']}, want retention.ms=86400000")
    r = t.run("configs", CONFIGS, *cfg, "--describe", "--all")
    check(re.search(r"^\s*retention\.ms=86400000 ", r.stdout, re.M)
          and re.search(r"^\s*cleanup\.policy=delete ", r.stdout, re.M)
          and re.search(r"^\s*segment\.bytes=\d+ ", r.stdout, re.M),
          f"kafka-configs --describe --all lacks retention.ms/cleanup.policy/segment.bytes: {r.stdout[:3000]!r}")
    r = t.run("configs", CONFIGS, *cfg, "--alter", "--delete-config", "retention.ms")
    check(f"Completed updating config for topic {TOPIC}." in r.stdout,
          f"kafka-configs --alter --delete-config printed {r.stdout!r}")
    r = t.run("configs", CONFIGS, *cfg, "--describe")
    check("retention.ms" not in r.stdout,
          f"kafka-configs --describe still shows retention.ms after --delete-config: {r.stdout!r}")

    loggers(t, broker)


def loggers(t, broker):
    """Log levels at run time with kafka-configs, as against Kafka."""
    lg = ["--entity-type", "broker-loggers", "--entity-name", "1"]

    def levels():
        r = t.run("configs", CONFIGS, *lg, "--describe")
        check("configs for broker-logger 1 are:" in r.stdout, f"kafka-configs broker-loggers printed {r.stdout!r}")
        return dict(re.findall(r"^\s*(\S+)=(\S+) sensitive=false", r.stdout, re.M))

    before = levels()
    check("root" in before and len(before) > 1, f"root and other loggers listed: {before}")
    other = sorted(k for k in before if k != "root")[-1]
    debug_before = broker.target != "sluice" or " DEBUG " not in open(broker.logfile, errors="replace").read()
    r = t.run("configs", CONFIGS, *lg, "--alter", "--add-config", f"root=DEBUG,{other}=TRACE")
    check("Completed updating config for broker-logger 1." in r.stdout, f"kafka-configs --alter printed {r.stdout!r}")
    now = levels()
    check(now["root"] == "DEBUG" and now[other] == "TRACE", f"root=DEBUG, {other}=TRACE: {now}")
    t.run("topics", TOPICS, "--describe", "--topic", TOPIC)  # some traffic to log about
    if broker.target == "sluice":
        check(debug_before, "no DEBUG line before root=DEBUG")
        check(" DEBUG " in open(broker.logfile, errors="replace").read(), "DEBUG lines after root=DEBUG")
        check(all(v == "DEBUG" for k, v in now.items() if k not in ("root", other)),
              f"the other loggers follow the root: {now}")
    r = t.run("configs", CONFIGS, *lg, "--alter", "--delete-config", other)
    check("Completed updating config for broker-logger 1." in r.stdout, f"--delete-config printed {r.stdout!r}")
    if broker.target == "sluice":
        check(levels()[other] == "DEBUG", f"{other} has the root's level again")
    r = t.run("configs", CONFIGS, *lg, "--alter", "--delete-config", "root", ok=False)
    check(r.returncode != 0 and "Removing the log level of the root logger is not allowed" in r.stdout + r.stderr,
          f"deleting root refused: {r.returncode} {r.stdout[-500:]} {r.stderr[-1500:]}")
    r = t.run("configs", CONFIGS, *lg, "--alter", "--add-config", "no.such.logger=INFO", ok=False)
    check(r.returncode != 0 and "Invalid broker logger(s): no.such.logger" in r.stdout + r.stderr,
          f"an unknown logger refused: {r.returncode} {r.stdout[-500:]} {r.stderr[-1500:]}")
    t.run("configs", CONFIGS, *lg, "--alter", "--add-config", f"root={before['root']}")
    check(levels()["root"] == before["root"], "root back to its level")


def group_consume(java, broker):
    """The quickstart's consume step as written there: a consumer group."""
    t = Tools(java, broker)
    t.run("topics", TOPICS, "--create", "--topic", TOPIC, "--partitions", "3", "--replication-factor", "1")
    t.run("console-producer", PRODUCER, "--topic", TOPIC, input="\n".join(FIRST) + "\n")
    r = t.run("console-consumer", CONSUMER, "--topic", TOPIC, "--from-beginning",
              "--max-messages", "2", "--timeout-ms", "60000", ok=False, timeout=120)
    check(r.returncode == 0 and r.stdout.splitlines() == FIRST,
          f"GROUP: kafka-console-consumer --from-beginning (consumer group) exited {r.returncode}, "
          f"printed {r.stdout!r}; stderr: {r.stderr[-3000:]}")
    check("Processed a total of 2 messages" in r.stderr, f"GROUP: console consumer stderr {r.stderr!r}")


def test():
    group = "--group" in sys.argv[1:]
    java = clients.Java()
    log(f"Apache Kafka tools {java.version} ({java.lib})")
    with lib.Broker("java-tools-group" if group else "java-tools") as broker:
        if group:
            group_consume(java, broker)
        else:
            quickstart(java, broker)
    check(not differences, "output differs from Kafka's:\n  " + "\n  ".join(differences))


if __name__ == "__main__":
    lib.main(test)
