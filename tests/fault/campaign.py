#!/usr/bin/env python3
"""Sluice's fault-injection campaign (issue 13): a seeded random schedule of faults
against a cluster of 3 controllers and 3 brokers (deploy/local-cluster.sh) while
idempotent producers and a consumer group run, then a checker that looks for every
anomaly Jepsen has found in Kafka-like systems. docs/fault-injection.md says how to run
it, what is injected and what is checked.

A run: the cluster comes up (on loopback; with --netns each node in its own network
namespace on a bridge), the workload (tests/fault/workload.py, confluent-kafka) creates
its topic with the replication factor asked for (default: 3 if the cluster accepts it,
else 1, stated) and starts; the nemesis (tests/fault/nemesis.py) runs its schedule for
--duration seconds; then every fault is healed, the campaign waits for the cluster to be
whole again (every node running, every broker unfenced, every partition led), lets the
workload run a little longer, stops it (producers flush, consumers catch up and commit,
two final reads of every partition) and checks its history (tests/fault/checker.py).

Every run prints its seed and its schedule; `--seed N` (with the same --duration and
--netns) runs the same schedule again. Exit status: 0 when every run found no anomaly,
1 when any found one or could not be checked (the workload did not run, a final read
did not reach the end, the cluster did not heal), 2 for bad usage.

    tests/fault/campaign.py                         # one run, 75 s of faults, random seed
    tests/fault/campaign.py --seed 42 --duration 300
    tests/fault/campaign.py --runs 10 --duration 300 --netns
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, HERE)
import checker  # noqa: E402
import clients  # noqa: E402
import lib  # noqa: E402
import nemesis  # noqa: E402
import netns  # noqa: E402
import probe  # noqa: E402

SCRIPT = os.path.join(lib.ROOT, "deploy", "local-cluster.sh")
TOPIC = "fault"
GROUP = "fault-group"
HEAL_WAIT_S = 120
SETTLE_S = 5
WORKLOAD_END_S = 420  # stop -> DONE: flush (message timeout), catch-up, two final reads

T0 = time.monotonic()
# options that change what a seed does, named in a run's "reproduce:" line when not default
NON_DEFAULT = [("--session-ms", "session_ms", 4000), ("--election-ms", "election_ms", 1000),
               ("--partitions", "partitions", 6), ("--producers", "producers", 3),
               ("--consumers", "consumers", 2), ("--rate", "rate", 80.0),
               ("--message-timeout-ms", "message_timeout_ms", 0), ("--roll-ms", "roll_ms", 5000)]


def now():
    return round(time.monotonic() - T0, 2)


_out = threading.Lock()


def say(msg):
    """One line of the run's output, whole even when threads say things at once."""
    with _out:
        sys.stdout.write(f"[{now():7.1f}s] {msg}\n")
        sys.stdout.flush()


def binary(env_name, rel):
    p = os.environ.get(env_name) or os.path.join(lib.ROOT, "build", rel)
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        raise lib.TestFailure(f"{env_name}: no executable at {p} (ninja -C build {rel})")
    return p


# ----------------------------------------------------------------- the cluster

class Cluster:
    """deploy/local-cluster.sh on one directory; nodes signalled by PID (ours only)."""

    def __init__(self, root, a, topo):
        self.dir = os.path.join(root, "cluster")
        self.a = a
        self.topo = topo  # netns.Topology or None (loopback)
        self.net = topo
        self.run_env = dict(os.environ, SLUICE_BROKER=binary("SLUICE_BROKER", "dataplane/sluice-broker"),
                            SLUICE_CONTROLLER=binary("SLUICE_CONTROLLER", "control/sluice-controller"),
                            SLUICE_CLUSTER_WAIT_S="90", SLUICE_CLUSTER_STOP_S="20")
        # A copy of the script as it was when the run began: bash reads a script as it
        # runs, and an edit during a long campaign would otherwise break a restart.
        self.script = os.path.join(root, "local-cluster.sh")
        shutil.copy2(SCRIPT, self.script)
        self.env = {}
        self.stopped = set()  # nodes we SIGSTOPped and have not continued yet
        self.probes = probe.Probes()

    def sh(self, *args, timeout=200):
        r = subprocess.run([self.script, *args], capture_output=True, text=True, timeout=timeout, env=self.run_env)
        self.load()
        return r

    def load(self):
        path = os.path.join(self.dir, "cluster.env")
        if not os.path.exists(path):
            return
        env = {}
        with open(path) as f:
            for ln in f:
                m = re.fullmatch(r'([A-Z_0-9]+)=("?)(.*)\2\n?', ln)
                if m:
                    env[m.group(1)] = m.group(3)
        self.env = env

    @property
    def brokers(self):
        return [int(x) for x in self.env["BROKERS"].split()]

    @property
    def controllers(self):
        return [int(x) for x in self.env["CONTROLLERS"].split()]

    def addr(self, node):
        host = self.env.get(f"HOST_{node}") or "127.0.0.1"
        return f"{host}:{self.env[f'PORT_{node}']}"

    @property
    def bootstrap(self):
        return ",".join(self.addr(b) for b in self.brokers)

    def pid(self, node):
        v = self.env.get(f"PID_{node}", "")
        return int(v) if v else None

    def ours(self, pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return self.dir.encode() in f.read()
        except OSError:
            return False

    def running(self, node):
        pid = self.pid(node)
        return pid is not None and self.ours(pid)

    def up(self):
        args = ["up", self.dir, "--base-port", str(self.a.base_port),
                "--set", f"broker.session.timeout.ms={self.a.session_ms}",
                "--set", f"broker.heartbeat.interval.ms={self.a.session_ms // 8}",
                "--set-controller", f"controller.quorum.election.timeout.ms={self.a.election_ms}",
                "--set-broker", "offsets.topic.num.partitions=6"]
        if self.a.roll_ms > 0:
            # segments roll every few seconds and the cleaner looks every 2 s: kills land
            # in rolls, index writes and compactions of __consumer_offsets
            args += ["--set-broker", f"log.roll.ms={self.a.roll_ms}", "--set-broker", "log.cleaner.backoff.ms=2000"]
        for kv in self.a.broker_set:
            args += ["--set-broker", kv]
        if self.topo:
            args += self.topo.cluster_args()
        say(f"$ deploy/local-cluster.sh {' '.join(args)}")
        r = self.sh(*args, timeout=300)
        if r.returncode != 0:
            raise lib.TestFailure(f"the cluster did not come up:\n{(r.stdout + r.stderr)[-3000:]}")

    def signal(self, node, sig):
        self.signal_many([node], sig)

    def signal_many(self, nodes, sig):
        """Signals every node at once (by PID), then for SIGKILL waits until each is gone:
        its sockets closed, so that a restart finds its ports free."""
        pids = []
        for node in nodes:
            pid = self.pid(node)
            if pid is None or not self.ours(pid):
                say(f"    node {node} is not running; nothing to signal")
                continue
            os.kill(pid, getattr(signal, "SIG" + sig))
            pids.append((node, pid))
            if sig == "STOP":
                self.stopped.add(node)
            elif sig == "CONT":
                self.stopped.discard(node)
        if sig in ("KILL", "TERM"):
            deadline = time.monotonic() + (10 if sig == "KILL" else 40)
            for node, pid in pids:
                while gone_or_zombie(pid) is False and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not gone_or_zombie(pid):
                    say(f"    node {node} (pid {pid}) still there after SIG{sig}: SIGKILL")
                    os.kill(pid, signal.SIGKILL)
                    while not gone_or_zombie(pid):
                        time.sleep(0.05)

    def start(self, node, wait=True):
        """Restarts a stopped node (by default waiting until it listens: a broker once
        registered and unfenced); returns None, or what went wrong."""
        if self.running(node):
            return None
        r = self.sh("start", self.dir, str(node), *([] if wait else ["--no-wait"]), timeout=200)
        if r.returncode != 0:
            return f"node {node} did not start again: {(r.stdout + r.stderr).strip()[-1500:]}"
        return None

    def out_log(self, node):
        kind = "controller" if node in self.controllers else "broker"
        return os.path.join(self.dir, f"{kind}-{node}", "out.log")

    def tail(self, node, n=15):
        try:
            with open(self.out_log(node), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no output)\n"

    # -- what the cluster looks like (probes; inside the clients' namespace with --netns)
    def metadata(self, broker, topics):
        if self.topo:
            return self.topo.probe("metadata", self.addr(broker), *topics)
        return self.probes.metadata(self.addr(broker), topics)

    def active_controller(self):
        addrs = [self.addr(c) for c in self.controllers]
        q = self.topo.probe("quorum", *addrs) if self.topo else self.probes.quorum(addrs)
        return q.get("leader", -1)

    def leader_of(self, topic, partition):
        for b in self.brokers:
            if self.running(b) and b not in self.stopped:
                md = self.metadata(b, [topic])
                if "leaders" in md:
                    return md["leaders"].get(f"{topic}/{partition}", -1)
        return -1

    def health(self, topics):
        """None when whole (every node running and not paused, a quorum leader, every
        broker listed by every broker, every partition of topics led), else why not."""
        down = [n for n in self.controllers + self.brokers if not self.running(n)]
        if down:
            return f"nodes not running: {down}"
        if self.stopped:
            return f"nodes paused: {sorted(self.stopped)}"
        if self.active_controller() < 0:
            return "no controller answers as the quorum leader"
        for b in self.brokers:
            md = self.metadata(b, topics)
            if "error" in md:
                return f"broker {b}: {md['error']}"
            if md["brokers"] != sorted(self.brokers):
                return f"broker {b} lists brokers {md['brokers']}"
            bad = {k: v for k, v in md["leaders"].items() if v < 0}
            if bad:
                return f"broker {b}: partitions without a leader: {dict(list(bad.items())[:6])}"
            if not any(k.startswith(topics[0] + "/") for k in md["leaders"]):
                return f"broker {b} does not know topic {topics[0]}"
        return None

    def cleanup(self):
        """Continue what we paused, `down`, then SIGKILL whatever still runs (ours only)."""
        self.probes.close()
        self.load()
        if not self.env:
            return
        for node in list(self.stopped):
            pid = self.pid(node)
            if pid and self.ours(pid):
                os.kill(pid, signal.SIGCONT)
        self.stopped.clear()
        try:
            self.sh("down", self.dir, timeout=150)
        except subprocess.TimeoutExpired:
            say("local-cluster.sh down timed out")
        for node in self.controllers + self.brokers:
            pid = self.pid(node)
            if pid and self.ours(pid):
                say(f"node {node} (pid {pid}) left running by down: SIGKILL")
                os.kill(pid, signal.SIGKILL)


def gone_or_zombie(pid):
    """True once the process is gone or a zombie whose threads are gone (it holds no
    sockets then)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((ln.split()[1] for ln in f if ln.startswith("State:")), "?")
        return state == "Z" and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (OSError, StopIteration):
        return True


# ----------------------------------------------------------------- the workload

class Workload:
    """tests/fault/workload.py in a child process; its stdout relayed and parsed."""

    def __init__(self, root, a, cluster, topo):
        self.history = os.path.join(root, "history.jsonl")
        self.log_path = os.path.join(root, "workload.log")
        py = venv_python()
        cmd = [py, os.path.join(HERE, "workload.py"), "--bootstrap", cluster.bootstrap, "--topic", TOPIC,
               "--group", GROUP, "--partitions", str(a.partitions), "--replication-factor", a.replication_factor,
               "--producers", str(a.producers), "--consumers", str(a.consumers), "--rate", str(a.rate),
               "--message-timeout-ms", str(a.message_timeout_ms), "--history", self.history, "--t0", repr(T0)]
        if topo:
            cmd = topo.client_cmd(cmd)
        self.logf = open(self.log_path, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.logf,
                                  text=True, bufsize=1)
        self.ready = threading.Event()
        self.done = threading.Event()
        self.rf = None
        self.refusal = None
        self.last = ""
        threading.Thread(target=self.relay, daemon=True).start()

    def relay(self):
        for ln in self.p.stdout:
            ln = ln.rstrip("\n")
            self.last = ln
            if ln.startswith("READY"):
                m = re.match(r"READY rf=(\d+) refused3=(.*)", ln)
                self.rf = int(m.group(1))
                self.refusal = json.loads(m.group(2))
                self.ready.set()
            elif ln.startswith("DONE"):
                self.done.set()
            say(f"  workload: {ln}")
        self.ready.set()
        self.done.set()

    def stop(self):
        try:
            self.p.stdin.write("stop\n")
            self.p.stdin.flush()
        except OSError:
            pass

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        self.logf.close()

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def venv_python():
    """confluent-kafka's venv (clients.py installs it). Unavailable is a failure: this
    check cannot run without it."""
    try:
        return clients.venv_python()
    except SystemExit as e:
        raise lib.TestFailure("confluent-kafka could not be installed (see above): the campaign cannot run") from e


# ----------------------------------------------------------------- one run

def run_once(a, seed):
    """One run with one seed; returns (report or None, facts)."""
    root = tempfile.mkdtemp(prefix=f"sluice-fault-{seed}-", dir=a.workdir)
    facts = {"seed": seed, "faults": 0, "records": 0, "anomalies": 0, "dir": root}
    schedule = nemesis.make_schedule(seed, a.duration, [1, 2, 3], [1001, 1002, 1003], a.partitions,
                                     a.session_ms, a.netns)
    say(f"=== run with seed {seed}: {a.duration}s of faults, {'network namespaces' if a.netns else 'loopback'}, "
        f"session timeout {a.session_ms} ms, election timeout {a.election_ms} ms, log.roll.ms {a.roll_ms or 'default'}; "
        f"directory {root}")
    say(f"reproduce: tests/fault/campaign.py --seed {seed} --duration {a.duration}"
        f"{' --netns' if a.netns else ''} --replication-factor {a.replication_factor}"
        + "".join(f" {opt} {getattr(a, name)}" for opt, name, dflt in NON_DEFAULT if getattr(a, name) != dflt)
        + "".join(f" --broker-set {kv}" for kv in a.broker_set))
    say("schedule (a run starts no step after the duration has passed):")
    for s in schedule:
        print(f"    #{s['i']:<3} after {s['gap']}s: {s['text']}", flush=True)
    topo = cluster = work = None
    ok = False
    try:
        if a.netns:
            topo = netns.Topology(os.getpid(), [1, 2, 3], [1001, 1002, 1003], say)
            topo.create()
        cluster = Cluster(root, a, topo)
        cluster.up()
        say(f"cluster up: bootstrap {cluster.bootstrap}")
        work = Workload(root, a, cluster, topo)
        if not work.ready.wait(180) or work.rf is None:
            raise lib.TestFailure(f"the workload did not start: {work.last}\n{work.log_tail()}")
        facts["rf"] = work.rf
        why = f" (the cluster refused 3: {work.refusal})" if work.refusal else ""
        say(f"replication factor: {work.rf}{why}")
        time.sleep(3)  # let the workload get going before the first fault
        nem = nemesis.Nemesis(cluster, TOPIC, now, say)
        t_end = time.monotonic() + a.duration
        for s in schedule:
            time.sleep(s["gap"])
            if time.monotonic() >= t_end or work.p.poll() is not None:
                break
            nem.run_step(s)
        facts["faults"] = len(nem.ran)
        say(f"faults over: {len(nem.ran)} injected; healing")
        problems = list(nem.problems)
        for node in cluster.controllers + cluster.brokers:
            if node in cluster.stopped:
                cluster.signal(node, "CONT")
            err = cluster.start(node)
            if err:
                problems.append(f"heal: {err}")
        if topo:
            topo.heal_all()
        deadline = time.monotonic() + HEAL_WAIT_S
        while (why := cluster.health([TOPIC, "__consumer_offsets"])) and time.monotonic() < deadline:
            time.sleep(1)
        if why:
            problems.append(f"the cluster did not heal within {HEAL_WAIT_S}s after the last fault: {why}")
            say(f"NOT HEALED: {why}")
        else:
            say("healed: every node running, every broker unfenced, every partition led")
        time.sleep(SETTLE_S)
        say("stopping the workload: producers flush, consumers catch up, final reads")
        work.stop()
        rc = work.wait(WORKLOAD_END_S)
        if rc is None:
            problems.append(f"the workload did not finish within {WORKLOAD_END_S}s of 'stop'")
        elif rc != 0:
            problems.append(f"the workload exited {rc}: {work.last}\n{work.log_tail()}")
        faults = nem.ran
        with open(os.path.join(root, "run.json"), "w") as f:
            json.dump({"seed": seed, "partitions": a.partitions, "rf": work.rf, "schedule": schedule,
                       "faults": faults, "problems": problems}, f, indent=1)
        report = checker.check(work.history, faults, a.partitions)
        for p in problems:
            report.add("unhealed", p)
        facts["records"] = report.stats.get("acknowledged", 0)
        facts["anomalies"] = report.count() + len(report.errors)
        say(f"--- checker (seed {seed}, replication factor {work.rf}):")
        checker.render(report, lambda ln: print(ln, flush=True))
        ok = report.ok()
        if not ok:
            for node in cluster.controllers + cluster.brokers:
                print(f"--- last lines of node {node}'s output:\n{cluster.tail(node)}", flush=True)
        say(f"=== seed {seed}: {'OK, no anomaly' if ok else 'FAILED'} "
            f"({facts['faults']} faults, {facts['records']} acknowledged records)")
        return report, facts
    finally:
        if work:
            work.kill()
        if cluster:
            cluster.cleanup()
        if topo:
            topo.destroy()
        if ok and not a.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"kept {root} (history.jsonl, run.json, workload.log, cluster/*/out.log; "
            f"tests/fault/checker.py {root} checks it again)")


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Sluice fault-injection campaign (docs/fault-injection.md)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the first run (default: SLUICE_TEST_SEED, else random)")
    ap.add_argument("--runs", type=int, default=1, help="runs, with seeds SEED, SEED+1, ...")
    ap.add_argument("--duration", type=int, default=75, help="seconds of faults per run")
    ap.add_argument("--netns", action="store_true", help="each node in its own network namespace; network faults")
    ap.add_argument("--replication-factor", default="auto",
                    help="of the topic: auto (3 if the cluster accepts it, else 1), or a number")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=80, help="values/s per producer")
    ap.add_argument("--message-timeout-ms", type=int, default=0,
                    help="of the producers; 0: 12000 with RF=1, 60000 with RF>1 (longer than any "
                         "fault, so that librdkafka never times a value out: see docs/fault-injection.md)")
    ap.add_argument("--session-ms", type=int, default=4000, help="broker.session.timeout.ms")
    ap.add_argument("--election-ms", type=int, default=1000, help="controller.quorum.election.timeout.ms")
    ap.add_argument("--roll-ms", type=int, default=5000,
                    help="log.roll.ms of the brokers (0: the default, a week); the cleaner then looks every 2 s")
    ap.add_argument("--base-port", type=int, default=21000, help="brokers P..P+2, controllers P+100..P+105")
    ap.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a property for every broker (repeatable), e.g. replica.lag.time.max.ms=5000")
    ap.add_argument("--workdir", default=None, help="where each run's directory goes (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (else only failed ones)")
    a = ap.parse_args(argv)
    if a.replication_factor != "auto" and not a.replication_factor.isdigit():
        ap.error("--replication-factor: auto or a number")
    if a.netns and os.geteuid() != 0:
        ap.error("--netns needs root (ip netns, iptables, tc)")
    return a


def main(argv):
    a = parse_args(argv)
    if a.seed is None and os.environ.get("SLUICE_TEST_SEED", "").isdigit():
        a.seed = int(os.environ["SLUICE_TEST_SEED"])
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    totals = {"runs": 0, "failed": 0, "faults": 0, "records": 0, "anomalies": 0}
    failed_seeds = []
    for i in range(a.runs):
        s = seed + i
        try:
            report, facts = run_once(a, s)
            ok = report.ok()
        except (lib.TestFailure, RuntimeError, OSError, subprocess.SubprocessError) as e:
            say(f"=== seed {s}: FAILED, the campaign could not run: {type(e).__name__}: {e}")
            facts, ok = {"faults": 0, "records": 0, "anomalies": 1}, False
        totals["runs"] += 1
        for k in ("faults", "records", "anomalies"):
            totals[k] += facts.get(k, 0)
        if not ok:
            totals["failed"] += 1
            failed_seeds.append(s)
    say(f"TOTALS: {totals['runs']} runs, {totals['faults']} faults injected, {totals['records']} acknowledged "
        f"records, {totals['anomalies']} anomalies; failed seeds: {failed_seeds or 'none'}")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
