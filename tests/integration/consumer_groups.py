#!/usr/bin/env python3
"""Consumer groups with real clients (issue 6): queues, publish-subscribe, committed
offsets across a broker restart, Kafka's kafka-consumer-groups tool, and assignors.

One broker (num.partitions=12, group.initial.rebalance.delay.ms=0), topics
auto-created with 12 partitions. Consumers are real clients in the classic group
protocol: kcat -G (librdkafka 2.0.2, auto commit) and Kafka's ConsoleConsumer --group
(Java client 4.1); every record they print is time-stamped as it arrives. The member
that part 1 kills has session.timeout.ms=6000 (the broker's group.min.session.timeout.ms);
the others 30000, so that a heartbeat stalled on a loaded machine does not fence them
and turn an exactly-once check into a false failure. Records are produced unkeyed with
kcat -P (random partitions) and each carries a unique value.

 1. Queue. Group g1 = a Java ConsoleConsumer (started first, so it is the group
    leader and the Java client's RangeAssignor computes the assignment) plus two
    kcat members. The Java client offers [range, cooperative-sticky], librdkafka
    [range, roundrobin]: the group must settle on `range` (DescribeGroups: Stable,
    3 members, partitions 0-3/4-7/8-11 in member-id order; kafka-consumer-groups
    --describe --members --verbose and --state agree). N records (300,000 by
    default, SLUICE_CG_RECORDS) are produced; each one reaches exactly one member,
    and only a member that owns its partition. Then N/3 more are produced around a
    kill -9 of a random kcat member, which dies as soon as it has printed one of
    them. Its committed offsets are read right after the kill (nobody else can
    commit them before the rebalance). Checks: its partitions reach the survivors
    within session.timeout.ms + a rebalance (MOVE_SLACK s on a loaded machine);
    survivors start each of them exactly at the dead member's committed offset, so
    nothing is skipped and the only records delivered twice are the dead member's
    records after its last commit; the group is Stable again with 2 members and
    range's 6/6 split.
 2. Publish-subscribe. Group g2 (two kcat members) consumes the same topic all the
    while and receives every record exactly once.
 3. Restart. All members stop with SIGTERM (commit on close, LeaveGroup): g1's
    committed offsets equal the log end offsets. The broker restarts (SIGTERM, same
    port and data directory); OffsetFetch returns the same offsets and the group
    is known (Empty). More records are produced; a new kcat member of g1 (with
    auto.offset.reset=earliest, so a lost commit would show) gets exactly those.
 4. kafka-consumer-groups (ConsumerGroupCommand): --list; --describe of the
    inactive g1 (CURRENT-OFFSET, LOG-END-OFFSET, LAG per partition, total lag = the
    records produced since); --reset-offsets --to-earliest --execute, after which a
    kcat member re-reads every record from offset 0; --delete of g2 (then gone from
    --list, OffsetFetch returns -1); --delete of an active group is refused.
 5. Assignors, on a second topic: librdkafka's cooperative-sticky (two kcat
    members, the second joining by an incremental rebalance; 6/6), and the Java
    client's RoundRobinAssignor (ConsoleConsumer as leader plus a kcat offering
    roundrobin; even/odd partitions by member id). Both groups consume a batch of
    records exactly once. (The Java RangeAssignor is the leader of g1 in part 1.)

Group state, assignments and offsets are read with raw DescribeGroups v1,
OffsetFetch v1 and ListOffsets v1 requests.
"""
import atexit
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N_A = int(os.environ.get("SLUICE_CG_RECORDS", "300000"))
N_B = max(N_A // 3, 3000)
N_RESTART = 3000
N_LAG = 1200
N_ASSIGN = 6000
PARTS = 12
SESSION_MS = 6000    # the member that gets killed: how fast its partitions must move
CALM_SESSION_MS = 30000  # everyone else: a 6 s session on 2 loaded cores gets members
                         # fenced for a stalled heartbeat (seen with Kafka at load 20)
MOVE_SLACK = 15.0  # s on top of the session timeout for the rebalance (2 loaded cores)
TOPIC = "cg-queue"
TOPIC2 = "cg-assignors"
CGC = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR

KCAT_RX = re.compile(rb"(\d+) (\d+) (\S+)\n?$")
JAVA_RX = re.compile(rb"Partition:(\d+)\s+Offset:(\d+)\s+(\S+)\s*$")

_members = []


def _kill_members():
    for m in list(_members):
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()


atexit.register(_kill_members)  # runs before lib's broker clean-up (atexit is LIFO)


class Member:
    """One consumer process; a thread records (time, partition, offset, value) for
    every record it prints."""

    def __init__(self, name, group, kind, argv, tmp):
        self.name, self.group, self.kind = name, group, kind
        self.errpath = os.path.join(tmp, f"consumer-{name}.err")
        with open(self.errpath, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.recs = []
        self.maxo = {}
        self.junk = []
        self.killed_at = None
        _members.append(self)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        log(f"started {kind} consumer {name} in group {group} (pid {self.proc.pid})")

    def _read(self):
        rx = KCAT_RX if self.kind == "kcat" else JAVA_RX
        for line in self.proc.stdout:
            now = time.monotonic()
            m = rx.match(line)
            if not m:
                if len(self.junk) < 20:
                    self.junk.append(line)
                continue
            p, o = int(m.group(1)), int(m.group(2))
            self.recs.append((now, p, o, m.group(3).decode()))
            if o > self.maxo.get(p, -1):
                self.maxo[p] = o

    def alive(self):
        return self.proc.poll() is None

    def stderr_tail(self, n=3000):
        try:
            with open(self.errpath, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout=40):
        """SIGTERM: the client commits, leaves the group and exits."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise lib.TestFailure(f"consumer {self.name} ignored SIGTERM for {timeout}s:\n"
                                      f"{self.stderr_tail()}")
        self.reader.join(10)
        if self in _members:
            _members.remove(self)
        log(f"stopped consumer {self.name} (exit {self.proc.returncode}, {len(self.recs)} records)")

    def kill9(self):
        self.proc.kill()
        self.killed_at = time.monotonic()
        self.proc.wait()
        self.reader.join(10)
        if self in _members:
            _members.remove(self)
        log(f"kill -9 consumer {self.name} (pid {self.proc.pid}, {len(self.recs)} records printed)")


class Env:
    def __init__(self, broker, java, kcat):
        self.broker, self.java, self.kcat = broker, java, kcat
        self.tmp = broker.tmp

    def broker_ok(self, what):
        b = self.broker
        if not b.alive():
            rc = b.proc.poll() if b.target == "sluice" and b.proc is not None else None
            raise lib.TestFailure(f"the {b.target} broker died {what}"
                                  + (f" (exit status {rc})" if rc is not None else ""))

    # -- clients
    def kcat_member(self, name, group, topic=TOPIC, extra=(), session_ms=CALM_SESSION_MS):
        argv = [self.kcat, "-b", self.broker.bootstrap, "-G", group, "-u",
                "-X", f"client.id={name}", "-X", f"session.timeout.ms={session_ms}",
                "-X", "heartbeat.interval.ms=1000",
                "-X", "auto.offset.reset=earliest", *extra, "-f", "%p %o %s\n", topic]
        return Member(name, group, "kcat", argv, self.tmp)

    def java_member(self, name, group, topic=TOPIC, extra=()):
        props = [f"client.id={name}", f"session.timeout.ms={CALM_SESSION_MS}", "heartbeat.interval.ms=1000",
                 *extra]
        args = ["--bootstrap-server", self.broker.bootstrap, "--topic", topic, "--group", group,
                "--from-beginning", "--property", "print.partition=true",
                "--property", "print.offset=true"]
        for p in props:
            args += ["--consumer-property", p]
        return Member(name, group, "java", self.java.cmd(CONSUMER, *args, heap="-Xmx256m"), self.tmp)

    def produce(self, topic, values, what):
        path = os.path.join(self.tmp, "produce.txt")
        with open(path, "w") as f:
            f.write("\n".join(values) + "\n")
        t0 = time.monotonic()
        r = lib.run([self.kcat, "-P", "-b", self.broker.bootstrap, "-t", topic, "-X", "acks=all",
                     "-X", "linger.ms=20", "-X", "sticky.partitioning.linger.ms=0", "-l", path], timeout=300)
        check(r.returncode == 0, f"kcat -P ({what}) exited {r.returncode}: {r.stderr[-2000:]}")
        log(f"produced {len(values)} records ({what}) in {time.monotonic() - t0:.1f}s")

    def cgc(self, *args, ok=True, timeout=150):
        log(f"$ kafka-consumer-groups {' '.join(args)}")
        t0 = time.monotonic()
        r = self.java.run(CGC, "--bootstrap-server", self.broker.bootstrap, *args,
                          timeout=timeout, heap="-Xmx256m")
        out = (r.stdout.strip() + "\n" + r.stderr.strip()).strip()
        print("\n".join("    " + ln for ln in out.splitlines()[:30]), flush=True)
        log(f"  ({time.monotonic() - t0:.1f}s, exit {r.returncode})")
        if ok:
            check(r.returncode == 0, f"kafka-consumer-groups {' '.join(args)} exited {r.returncode}:\n"
                  f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return r

    # -- raw protocol
    def describe_group(self, group):
        """(error, state, protocol, {client_id: (member_id, [partitions of every topic])})."""
        with lib.Conn(self.broker.port, timeout=15) as c:
            d = c.request(15, 1, lib.Enc().array_len(1).string(group).done())
            d.i32()  # throttle
            check(d.array_len() == 1, "DescribeGroups answered for other than one group")
            err, _gid, state, _ptype, proto = d.i16(), d.string(), d.string(), d.string(), d.string()
            members = {}
            for _ in range(max(d.array_len(), 0)):
                mid, cid, _host = d.string(), d.string(), d.string()
                d.bytes_()
                asg = d.bytes_()
                members[cid] = (mid, decode_assignment(asg))
        return err, state, proto, members

    def wait_stable(self, group, n, proto, timeout=90, what=""):
        """Waits until the group is Stable with n members whose assignments are
        disjoint and cover all PARTS partitions of its topic. Returns the members."""
        t0 = time.monotonic()
        last = None
        while True:
            try:
                last = self.describe_group(group)
                err, state, got_proto, members = last
                if err == 0 and state == "Stable" and len(members) == n:
                    parts = [p for _, ps in members.values() for p in ps]
                    if sorted(parts) == list(range(PARTS)):
                        check(got_proto == proto, f"group {group}: protocol {got_proto!r}, want {proto!r}")
                        log(f"group {group} Stable with {n} members, {proto} "
                            f"({time.monotonic() - t0:.1f}s): "
                            + ", ".join(f"{c}={ps}" for c, (_, ps) in sorted(members.items())))
                        return members
            except (OSError, lib.ProtocolError) as e:
                last = repr(e)
            self.broker_ok(f"while waiting for group {group} to be Stable with {n} members"
                           + (f" {what}" if what else ""))
            for m in _members:
                if m.group == group:
                    check(m.alive(), f"consumer {m.name} of {group} exited {m.proc.returncode} {what}:\n"
                          f"{m.stderr_tail()}")
            check(time.monotonic() - t0 < timeout,
                  f"group {group} not Stable with {n} members covering {PARTS} partitions after "
                  f"{timeout}s {what}; last DescribeGroups: {last}")
            time.sleep(0.3)

    def offset_fetch(self, group, topic=TOPIC, timeout=60):
        t0 = time.monotonic()
        while True:
            with lib.Conn(self.broker.port, timeout=15) as c:
                e = lib.Enc().string(group).array_len(1).string(topic).array_len(PARTS)
                for p in range(PARTS):
                    e.i32(p)
                d = c.request(9, 1, e.done())
                out, errs = {}, {}
                for _ in range(d.array_len()):
                    d.string()
                    for _ in range(d.array_len()):
                        p, off = d.i32(), d.i64()
                        d.string()
                        err = d.i16()
                        out[p] = off
                        if err:
                            errs[p] = err
            if not errs and sorted(out) == list(range(PARTS)):
                return out
            check(all(e in RETRIABLE for e in errs.values()) and time.monotonic() - t0 < timeout,
                  f"OffsetFetch v1 {group}/{topic}: partitions {sorted(out)}, errors {errs}")
            time.sleep(0.3)

    def end_offsets(self, topic=TOPIC):
        with lib.Conn(self.broker.port, timeout=15) as c:
            e = lib.Enc().i32(-1).array_len(1).string(topic).array_len(PARTS)
            for p in range(PARTS):
                e.i32(p).i64(-1)
            d = c.request(2, 1, e.done())
            out = {}
            for _ in range(d.array_len()):
                d.string()
                for _ in range(d.array_len()):
                    p, err, _ts, off = d.i32(), d.i16(), d.i64(), d.i64()
                    check(err == 0, f"ListOffsets {topic}-{p}: error {err}")
                    out[p] = off
        check(sorted(out) == list(range(PARTS)), f"ListOffsets {topic}: partitions {sorted(out)}")
        return out

    def wait_caught_up(self, members, ends, what, timeout=240, stall=60):
        """Waits until, for every partition, one of the live members has printed the
        record at end-1."""
        t0 = time.monotonic()
        last_progress, last_n = t0, -1
        while True:
            live = [m for m in members if m.alive()]
            behind = {p: e for p, e in ends.items()
                      if e > 0 and max((m.maxo.get(p, -1) for m in live), default=-1) < e - 1}
            if not behind:
                log(f"{what}: caught up in {time.monotonic() - t0:.1f}s "
                    f"({', '.join(f'{m.name}={len(m.recs)}' for m in members)})")
                return
            n = sum(len(m.recs) for m in members)
            now = time.monotonic()
            if n != last_n:
                last_n, last_progress = n, now
            self.broker_ok(f"while waiting for {what} to catch up")
            for m in members:
                check(m.alive() or m.killed_at, f"consumer {m.name} exited {m.proc.returncode} "
                      f"({what}):\n{m.stderr_tail()}")
            if now - t0 > timeout or now - last_progress > stall:
                raise lib.TestFailure(
                    f"{what}: not caught up after {now - t0:.0f}s (no new record for "
                    f"{now - last_progress:.0f}s); partitions behind (end offsets) {behind}; printed so far "
                    + ", ".join(f"{m.name}={len(m.recs)} maxo={dict(sorted(m.maxo.items()))}"
                                for m in members))
            time.sleep(0.3)


def table(out):
    """Rows of a kafka-consumer-groups table as dicts keyed by its header's words."""
    cols, rows = None, []
    for ln in out.splitlines():
        toks = ln.split()
        if toks and toks[0] == "GROUP":
            cols = toks
        elif cols and len(toks) == len(cols):
            rows.append(dict(zip(cols, toks)))
    return rows


def decode_assignment(b):
    if not b:
        return []
    d = lib.Dec(b)
    d.i16()
    parts = []
    for _ in range(max(d.array_len(), 0)):
        d.string()
        parts += [d.i32() for _ in range(max(d.array_len(), 0))]
    return sorted(parts)


def index(members, since=0.0):
    """{(p, o): [(member name, value, time)]} of everything the members printed after `since`."""
    seen = {}
    for m in members:
        for t, p, o, v in m.recs:
            if t >= since:
                seen.setdefault((p, o), []).append((m.name, v, t))
    return seen


def check_exactly_once(members, ends, what, values=None, starts=None):
    """Every offset in [start, end) of every partition printed exactly once by the
    members (and nothing else); values, if given, are exactly the values printed."""
    seen = index(members)
    starts = starts or {p: 0 for p in ends}
    dups = {k: v for k, v in seen.items() if len(v) > 1}
    check(not dups, f"{what}: {len(dups)} records delivered more than once, e.g. "
          f"{sorted(dups.items())[:5]}; {rebalance_notes(members)}")
    want = {(p, o) for p in ends for o in range(starts[p], ends[p])}
    missing = want - seen.keys()
    extra = seen.keys() - want
    check(not missing, f"{what}: {len(missing)} records never delivered, e.g. {sorted(missing)[:10]}")
    check(not extra, f"{what}: {len(extra)} records outside [committed, end) delivered, e.g. "
          f"{sorted(extra)[:10]} (start offsets {starts})")
    if values is not None:
        got = sorted(v[0][1] for v in seen.values())
        check(got == sorted(values), f"{what}: the values printed are not those produced")
    return seen


def rebalance_notes(members):
    """What the kcat members logged about rebalances and session time-outs."""
    notes = []
    for m in members:
        err = m.stderr_tail(1 << 20)
        notes.append(f"{m.name}: {err.count(' rebalanced ')} rebalances, "
                     f"{err.count('SESSTMOUT')} session time-outs, {err.count('COMMITFAIL')} failed commits")
    return "; ".join(notes)


def check_owned(members, assignment, what):
    for m in members:
        own = set(assignment[m.name][1])
        stray = {p for _, p, _, _ in m.recs} - own
        check(not stray, f"{what}: {m.name} printed records of partitions {sorted(stray)} it was "
              f"not assigned ({sorted(own)})")
        check(m.recs, f"{what}: {m.name} received nothing")


def check_range(members, per, what):
    """Range over one topic: sorted by member id, member i owns [i*per, (i+1)*per)."""
    order = sorted(members.items(), key=lambda kv: kv[1][0])
    for i, (cid, (_, ps)) in enumerate(order):
        check(ps == list(range(i * per, (i + 1) * per)),
              f"{what}: {cid} (member #{i} by id) owns {ps}, range wants "
              f"{list(range(i * per, (i + 1) * per))}")


# --------------------------------------------------------------------- parts

def part_queue(env, rnd):
    t_part = time.monotonic()
    log(f"== 1+2. queue (g1: Java + 2 kcat) and publish-subscribe (g2: 2 kcat), {N_A} records")
    j1 = env.java_member("j1", "g1")
    env.wait_stable("g1", 1, "range", timeout=120, what="(the Java member alone)")
    x_name = rnd.choice(["k1", "k2"])  # the member killed later
    k1 = env.kcat_member("k1", "g1", session_ms=SESSION_MS if x_name == "k1" else CALM_SESSION_MS)
    k2 = env.kcat_member("k2", "g1", session_ms=SESSION_MS if x_name == "k2" else CALM_SESSION_MS)
    p1 = env.kcat_member("p1", "g2")
    p2 = env.kcat_member("p2", "g2")
    g1 = [j1, k1, k2]
    g2 = [p1, p2]
    asg = env.wait_stable("g1", 3, "range")
    check(sorted(asg) == ["j1", "k1", "k2"], f"g1 members by client id: {sorted(asg)}")
    check_range(asg, 4, "g1 (3 members)")
    asg2 = env.wait_stable("g2", 2, "range")

    r = env.cgc("--describe", "--group", "g1", "--members", "--verbose")
    rows = table(r.stdout)
    got = {row.get("CLIENT-ID"): row for row in rows}
    check(sorted(got) == ["j1", "k1", "k2"], f"--describe --members: client ids {sorted(got)} in {r.stdout!r}")
    for cid, row in got.items():
        want = f"{TOPIC}:{','.join(map(str, asg[cid][1]))}"
        shown = row.get("CURRENT-ASSIGNMENT", row.get("ASSIGNMENT"))
        check(row.get("CONSUMER-ID") == asg[cid][0] and row.get("#PARTITIONS") == "4" and shown == want,
              f"--describe --members --verbose: {cid} shows {row}; DescribeGroups says member "
              f"{asg[cid][0]}, {want}")
    r = env.cgc("--describe", "--group", "g1", "--state")
    rows = table(r.stdout)
    check(len(rows) == 1 and rows[0].get("ASSIGNMENT-STRATEGY") == "range" and rows[0].get("STATE") == "Stable"
          and rows[0].get("#MEMBERS") == "3",
          f"--describe --state: want g1 range Stable 3: {r.stdout!r}")

    vals_a = [f"a{i}" for i in range(N_A)]
    t0 = time.monotonic()
    env.produce(TOPIC, vals_a, "queue, all members alive")
    ends_a = env.end_offsets()
    check(sum(ends_a.values()) == N_A and all(ends_a.values()), f"end offsets after {N_A} records: {ends_a}")
    env.wait_caught_up(g1, ends_a, "g1 (3 members)")
    env.wait_caught_up(g2, ends_a, "g2 (2 members)")
    log(f"{N_A} records produced and consumed by both groups in {time.monotonic() - t0:.1f}s")
    time.sleep(1.0)  # anything late would be a duplicate
    seen_a = check_exactly_once(g1, ends_a, "g1 queue (all alive)", vals_a)
    check_owned(g1, asg, "g1 queue")
    check_exactly_once(g2, ends_a, "g2 publish-subscribe (phase A)", vals_a)
    check_owned(g2, asg2, "g2")
    log("queue: each record went to exactly one g1 member ("
        + ", ".join(f"{m.name} {len(m.recs)}" for m in g1) + "); g2 got every record too")
    del seen_a

    # kill -9 one kcat member while records are flowing
    x = k1 if x_name == "k1" else k2
    survivors = [m for m in g1 if m is not x]
    x_parts = asg[x.name][1]
    n0 = len(x.recs)
    half = N_B // 2
    vals_b = [f"b{i}" for i in range(N_B)]
    env.produce(TOPIC, vals_b[:half], "before the kill")
    t0 = time.monotonic()
    while not any(v.startswith("b") for _, _, _, v in x.recs[n0:]):
        check(time.monotonic() - t0 < 60 and x.alive(), f"{x.name} printed none of the new records in 60s")
        time.sleep(0.005)
    time.sleep(rnd.uniform(0.0, 0.3))
    x.kill9()
    t_kill = x.killed_at
    committed = env.offset_fetch("g1")
    x_max = {p: x.maxo.get(p, -1) for p in x_parts}
    log(f"killed {x.name} owning {x_parts}: committed {dict((p, committed[p]) for p in x_parts)}, "
        f"printed up to {x_max}")
    env.produce(TOPIC, vals_b[half:], "after the kill")
    ends = env.end_offsets()
    check(sum(ends.values()) == N_A + N_B, f"end offsets after {N_A + N_B} records: {ends}")
    env.wait_caught_up(survivors, ends, f"g1 survivors after kill -9 of {x.name}")
    env.wait_caught_up(g2, ends, "g2 (2 members)")
    asg_after = env.wait_stable("g1", 2, "range", what=f"after kill -9 of {x.name}")
    check(sorted(asg_after) == sorted(m.name for m in survivors), f"g1 members after the kill: {sorted(asg_after)}")
    check_range(asg_after, 6, "g1 after the kill")
    time.sleep(1.0)

    # Analysis of g1 over everything so far.
    seen = index(g1)
    moved = {}
    for p in x_parts:
        mine = [(t, o, name) for (pp, o), lst in seen.items() if pp == p
                for name, _, t in lst if name != x.name]
        check(mine, f"no survivor got any record of {x.name}'s partition {p}")
        first_t = min(t for t, _, _ in mine)
        first_o = min(o for _, o, _ in mine)
        moved[p] = first_t - t_kill
        want = committed[p] if committed[p] >= 0 else 0
        check(first_o == want, f"partition {p} of the killed member: survivors started at offset {first_o}, "
              f"its committed offset is {committed[p]} (it printed up to {x_max[p]})")
        check(committed[p] <= x_max[p] + 1, f"partition {p}: committed offset {committed[p]} is beyond what "
              f"{x.name} printed ({x_max[p]})")
    limit = SESSION_MS / 1000 + MOVE_SLACK
    worst = max(moved.values())
    log(f"{x.name}'s partitions reached the survivors {', '.join(f'{p}: {moved[p]:.1f}s' for p in x_parts)} "
        f"after the kill (session.timeout.ms {SESSION_MS})")
    check(worst <= limit, f"partitions of the killed member took {worst:.1f}s to move (limit {limit:.0f}s = "
          f"session timeout + {MOVE_SLACK:.0f}s)")
    missing = [(p, o) for p in range(PARTS) for o in range(ends[p]) if (p, o) not in seen]
    check(not missing, f"g1: {len(missing)} records skipped, e.g. {missing[:10]}")
    extra = [k for k in seen if k[1] >= ends[k[0]]]
    check(not extra, f"g1: records beyond the end offsets: {extra[:5]}")
    redelivered = 0
    for (p, o), lst in seen.items():
        if len(lst) == 1:
            continue
        names = sorted(n for n, _, _ in lst)
        ok = (p in x_parts and o >= committed[p] and len(lst) == 2 and x.name in names
              and lst[0][1] == lst[1][1])
        check(ok, f"g1: record {p}/{o} delivered {len(lst)} times to {names}; only the killed member's "
              f"records at or after its last commit ({committed.get(p)}) may come twice; "
              f"{rebalance_notes(g1)}")
        redelivered += 1
    want_redelivered = sum(max(0, x_max[p] + 1 - max(committed[p], 0)) for p in x_parts)
    check(redelivered == want_redelivered, f"g1: {redelivered} records delivered twice, the killed member "
          f"printed {want_redelivered} records after its last commit")
    vals = sorted({lst[0][1] for lst in seen.values()})
    check(vals == sorted(vals_a + vals_b), "g1: the values printed are not those produced")
    log(f"kill -9: nothing skipped; {redelivered} records re-delivered, all after {x.name}'s last commit; "
        f"partitions moved within {worst:.1f}s")
    check_exactly_once(g2, ends, "g2 publish-subscribe (all records)", vals_a + vals_b)
    log("publish-subscribe: g2 received every record exactly once as well")

    for m in g2 + survivors:
        m.stop()
    log(f"part 1+2 took {time.monotonic() - t_part:.1f}s")
    return ends


def part_restart(env, ends):
    t_part = time.monotonic()
    log("== 3. committed offsets across a broker restart")
    err, state, _, members = env.describe_group("g1")
    check(err == 0 and state == "Empty" and not members,
          f"g1 after all members stopped: error {err}, state {state}, members {members}")
    before = env.offset_fetch("g1")
    check(before == ends, f"g1 committed offsets after every member closed {before}, log end {ends}")
    before2 = env.offset_fetch("g2")
    check(before2 == ends, f"g2 committed offsets after every member closed {before2}, log end {ends}")
    env.broker.restart()
    after = env.offset_fetch("g1")
    check(after == before, f"g1 committed offsets after the restart {after}, before {before}")
    check(env.offset_fetch("g2") == before2, "g2 committed offsets changed across the restart")
    err, state, _, members = env.describe_group("g1")
    check(err == 0 and state == "Empty" and not members,
          f"g1 after the restart: DescribeGroups error {err}, state {state!r}, members {members} (want Empty)")
    vals = [f"r{i}" for i in range(N_RESTART)]
    env.produce(TOPIC, vals, "after the restart")
    ends2 = env.end_offsets()
    k3 = env.kcat_member("k3", "g1")
    env.wait_stable("g1", 1, "range", what="(new member after the restart)")
    env.wait_caught_up([k3], ends2, "k3 after the restart")
    time.sleep(1.5)
    k3.stop()
    check_exactly_once([k3], ends2, "new g1 member after the restart", vals, starts=after)
    log(f"restart: the new member got exactly the {N_RESTART} records after the commit; "
        f"part 3 took {time.monotonic() - t_part:.1f}s")
    return ends2


def part_tool(env, ends):
    t_part = time.monotonic()
    log("== 4. kafka-consumer-groups: --list, --describe, --reset-offsets, --delete")
    committed = env.offset_fetch("g1")
    check(committed == ends, f"g1 committed {committed} after its member closed, log end {ends}")
    env.produce(TOPIC, [f"d{i}" for i in range(N_LAG)], "lag")
    ends2 = env.end_offsets()
    r = env.cgc("--list")
    listed = r.stdout.split()
    check("g1" in listed and "g2" in listed, f"--list shows {listed}, want g1 and g2")

    r = env.cgc("--describe", "--group", "g1")
    rows = [row for row in table(r.stdout) if row.get("TOPIC") == TOPIC]
    check(sorted(int(x["PARTITION"]) for x in rows) == list(range(PARTS)),
          f"--describe g1: rows for partitions {sorted(x['PARTITION'] for x in rows)} in {r.stdout!r}")
    total = 0
    for row in rows:
        p, cur, end, lag = int(row["PARTITION"]), row.get("CURRENT-OFFSET"), row.get("LOG-END-OFFSET"), row.get("LAG")
        check(cur == str(committed[p]) and end == str(ends2[p]) and lag == str(ends2[p] - committed[p]),
              f"--describe g1 partition {p}: CURRENT-OFFSET {cur} LOG-END-OFFSET {end} LAG {lag}; want "
              f"{committed[p]} {ends2[p]} {ends2[p] - committed[p]}")
        check(row.get("CONSUMER-ID") == "-", f"--describe g1 (no members) partition {p}: {row}")
        total += int(lag)
    check(total == N_LAG, f"--describe g1: total lag {total}, produced {N_LAG} since the last commit")
    check("has no active members" in r.stdout + r.stderr,
          "--describe of the inactive g1 does not say it has no active members")

    r = env.cgc("--reset-offsets", "--to-earliest", "--execute", "--group", "g1", "--topic", TOPIC)
    rows = [(int(x["PARTITION"]), x.get("NEW-OFFSET")) for x in table(r.stdout) if x.get("TOPIC") == TOPIC]
    check(sorted(rows) == [(p, "0") for p in range(PARTS)],
          f"--reset-offsets --to-earliest printed {rows}, want NEW-OFFSET 0 for {PARTS} partitions")
    reset = env.offset_fetch("g1")
    check(all(v == 0 for v in reset.values()), f"OffsetFetch g1 after --reset-offsets: {reset}")
    k4 = env.kcat_member("k4", "g1")
    t0 = time.monotonic()
    env.wait_caught_up([k4], ends2, "k4 re-reading g1 from the start", timeout=300)
    time.sleep(1.0)
    k4.stop()
    check_exactly_once([k4], ends2, "g1 after --reset-offsets --to-earliest")
    log(f"--reset-offsets: k4 re-read all {sum(ends2.values())} records from offset 0 "
        f"in {time.monotonic() - t0:.1f}s")

    r = env.cgc("--delete", "--group", "g2")
    check("Deletion of requested consumer groups ('g2') was successful." in r.stdout,
          f"--delete --group g2 printed {r.stdout!r}")
    r = env.cgc("--list")
    check("g2" not in r.stdout.split() and "g1" in r.stdout.split(), f"--list after deleting g2: {r.stdout.split()}")
    gone = env.offset_fetch("g2")
    check(all(v == -1 for v in gone.values()), f"OffsetFetch of the deleted g2: {gone}")
    log(f"part 4 took {time.monotonic() - t_part:.1f}s")


def part_assignors(env):
    t_part = time.monotonic()
    log("== 5. assignors: librdkafka cooperative-sticky, Java round-robin")
    with lib.Conn(env.broker.port) as c:
        check(c.ensure_topic(TOPIC2) == PARTS, f"{TOPIC2} does not have {PARTS} partitions")
    coop = ("-X", "partition.assignment.strategy=cooperative-sticky")
    vals = [f"s{i}" for i in range(N_ASSIGN)]
    half = N_ASSIGN // 2
    c1 = env.kcat_member("c1", "gc", TOPIC2, coop)
    jr = env.java_member("jr", "grr", TOPIC2,
                         ["partition.assignment.strategy=org.apache.kafka.clients.consumer.RoundRobinAssignor"])
    env.wait_stable("gc", 1, "cooperative-sticky")
    env.wait_stable("grr", 1, "roundrobin", timeout=120, what="(the Java member alone)")
    # The first half is consumed by the first member of each group alone; the second
    # members then join (gc: incremental cooperative rebalance, grr: eager) and take
    # over half of the partitions from the committed offsets.
    env.produce(TOPIC2, vals[:half], "assignors, first half")
    ends = env.end_offsets(TOPIC2)
    env.wait_caught_up([c1], ends, "gc (c1 alone)")
    env.wait_caught_up([jr], ends, "grr (jr alone)")
    t_second = time.monotonic()
    c2 = env.kcat_member("c2", "gc", TOPIC2, coop)
    kr = env.kcat_member("kr", "grr", TOPIC2, ("-X", "partition.assignment.strategy=roundrobin"))
    asg_c = env.wait_stable("gc", 2, "cooperative-sticky")
    check(sorted(len(ps) for _, ps in asg_c.values()) == [6, 6], f"cooperative-sticky split {asg_c}")
    asg_r = env.wait_stable("grr", 2, "roundrobin")
    order = sorted(asg_r.items(), key=lambda kv: kv[1][0])
    for i, (cid, (_, ps)) in enumerate(order):
        check(ps == list(range(i, PARTS, 2)), f"round-robin: {cid} (member #{i} by id) owns {ps}, "
              f"want {list(range(i, PARTS, 2))}")

    r = env.cgc("--delete", "--group", "gc", ok=False)
    check("GroupNotEmpty" in r.stdout + r.stderr or "not empty" in (r.stdout + r.stderr).lower(),
          f"--delete of the active group gc was not refused as non-empty: {r.stdout!r} {r.stderr[-1500:]!r}")

    # The second half is produced with all four members in place.
    env.produce(TOPIC2, vals[half:], "assignors, second half")
    ends = env.end_offsets(TOPIC2)
    check(all(ends.values()), f"{TOPIC2}: a partition got no record: {ends}")
    env.wait_caught_up([c1, c2], ends, "gc (cooperative-sticky)")
    env.wait_caught_up([jr, kr], ends, "grr (roundrobin)")
    time.sleep(1.0)
    check_exactly_once([c1, c2], ends, "gc (cooperative-sticky)", vals)
    check_exactly_once([jr, kr], ends, "grr (roundrobin)", vals)
    for m, asg in ((c2, asg_c), (kr, asg_r)):  # the members that joined second
        check_owned([m], asg, f"{m.group}")
    for m, asg in ((c1, asg_c), (jr, asg_r)):  # after the rebalance, only their own partitions
        stray = {p for t, p, _, _ in m.recs if t > t_second} - set(asg[m.name][1])
        check(not stray, f"{m.group}: {m.name} printed records of {sorted(stray)} after the rebalance")
    for m in (c1, c2, jr, kr):
        m.stop()
    log(f"assignors: cooperative-sticky and round-robin groups each consumed {N_ASSIGN} records exactly once; "
        f"part 5 took {time.monotonic() - t_part:.1f}s")


def test():
    kcat = lib.kcat_path()
    java = clients.Java()
    rnd = lib.rng()
    props = {"num.partitions": PARTS, "group.initial.rebalance.delay.ms": 0}
    with lib.Broker("groups", props) as broker:
        env = Env(broker, java, kcat)
        with lib.Conn(broker.port) as c:
            check(c.ensure_topic(TOPIC) == PARTS, f"{TOPIC} does not have {PARTS} partitions")
        try:
            ends = part_queue(env, rnd)
            ends = part_restart(env, ends)
            part_tool(env, ends)
            part_assignors(env)
            check(broker.alive(), "the broker died")
        except BaseException:
            for m in list(_members):
                log(f"--- {m.name} ({'alive' if m.alive() else f'exit {m.proc.returncode}'}) stderr tail:\n"
                    f"{m.stderr_tail(1500)}")
                if m.junk:
                    log(f"    unparsed output: {m.junk[:5]}")
            _kill_members()
            raise


if __name__ == "__main__":
    lib.main(test)
