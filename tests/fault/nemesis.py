"""The fault campaign's nemesis: a schedule of faults drawn from a seed, and the code
that injects and heals each one (tests/fault/campaign.py runs it).

The schedule is a list of steps, each a fault with its targets and durations, drawn
entirely from random.Random(seed): the same seed gives the same schedule. Steps run one
after another (a fault is healed before the next begins, after a short gap), so a
step's targets are concrete nodes, or a role resolved when the step runs ("the active
controller", "the leader of partition 3"), which the run's output names.

Faults (every mode):
  kill-broker         kill -9 of a broker, down for a while, restarted on its data
  stop-broker         SIGTERM (controlled shutdown), restarted
  kill-controller     kill -9 of a controller (often the active one), restarted
  kill-leader+controller  kill -9 of the active controller and of a partition's leader at
                      once, both restarted
  kill-two-brokers    kill -9 of two brokers at once, both restarted
  kill-in-restart     kill -9 of a broker, restarted, killed again while it starts (0.1-3 s
                      in: recovery, registration), then restarted for good
  kill-quorum         kill -9 of two controllers (the quorum's majority) at once, restarted
  pause-broker        SIGSTOP ... SIGCONT, shorter or longer than the broker session timeout
  pause-controller    the same for a controller (often the active one)
Network faults (--netns only: each node in its own namespace):
  partition-brokers   a broker cut from the other brokers (iptables DROP in its namespace)
  partition-controllers  a broker cut from every controller
  isolate-broker      a broker cut from every other node (clients still reach it)
  isolate-controller  a controller cut from every other node
  loss                a node drops a share of its incoming packets (iptables statistic)
  slow                a node's outgoing link limited to a low rate (tc tbf)
"""
import random
import time

PROCESS_KINDS = {
    "kill-broker": 3, "stop-broker": 1, "kill-controller": 2, "kill-leader+controller": 2,
    "pause-broker": 2, "pause-controller": 2, "kill-two-brokers": 1, "kill-in-restart": 1,
    "kill-quorum": 1,
}
NETWORK_KINDS = {
    "partition-brokers": 1, "partition-controllers": 2, "isolate-broker": 2,
    "isolate-controller": 1, "loss": 2, "slow": 2,
}
STEPS_MAX = 1000


def make_schedule(seed, duration_s, brokers, controllers, partitions, session_ms, netns):
    """Steps enough to fill duration_s twice over: a run starts no step once duration_s has
    passed, so how many run depends on how long restarts take."""
    rng = random.Random(seed)
    kinds = dict(PROCESS_KINDS)
    if netns:
        kinds.update(NETWORK_KINDS)
    names, weights = zip(*sorted(kinds.items()))
    session_s = session_ms / 1000
    steps, budget = [], 0.0
    while budget < 2 * duration_s and len(steps) < STEPS_MAX:
        kind = rng.choices(names, weights)[0]
        s = {"i": len(steps) + 1, "kind": kind, "gap": round(rng.uniform(1.0, 3.0), 1)}
        if kind in ("kill-broker", "stop-broker"):
            s["node"] = rng.choice(brokers)
            # now and then down longer than the producers' message timeout
            s["hold"] = round(rng.uniform(0.0, 4.0) if rng.random() < 0.8 else rng.uniform(10.0, 16.0), 1)
        elif kind == "kill-two-brokers":
            s["nodes"] = sorted(rng.sample(brokers, 2))
            s["hold"] = round(rng.uniform(0.0, 4.0), 1)
        elif kind == "kill-in-restart":
            s["node"] = rng.choice(brokers)
            s["hold"] = round(rng.uniform(0.0, 2.0), 1)
            s["again"] = round(rng.uniform(0.1, 3.0), 1)
        elif kind == "kill-quorum":
            s["nodes"] = sorted(rng.sample(controllers, 2))
            s["hold"] = round(rng.uniform(1.0, 6.0), 1)
        elif kind == "kill-controller":
            s["node"] = "active" if rng.random() < 0.5 else rng.choice(controllers)
            s["hold"] = round(rng.uniform(0.0, 4.0), 1)
        elif kind == "kill-leader+controller":
            s["partition"] = rng.randrange(partitions)
            s["hold"] = round(rng.uniform(0.0, 4.0), 1)
        elif kind in ("pause-broker", "pause-controller"):
            if kind == "pause-broker":
                s["node"] = rng.choice(brokers)
            else:
                s["node"] = "active" if rng.random() < 0.5 else rng.choice(controllers)
            s["long"] = rng.random() < 0.5
            lo, hi = (1.3, 2.5) if s["long"] else (0.15, 0.8)
            s["hold"] = round(rng.uniform(lo, hi) * session_s, 1)
        elif kind in ("partition-brokers", "partition-controllers", "isolate-broker"):
            s["node"] = rng.choice(brokers)
            s["long"] = rng.random() < 0.5
            lo, hi = (1.3, 2.5) if s["long"] else (0.15, 0.8)
            s["hold"] = round(rng.uniform(lo, hi) * session_s, 1)
        elif kind == "isolate-controller":
            s["node"] = "active" if rng.random() < 0.5 else rng.choice(controllers)
            s["hold"] = round(rng.uniform(1.0, 8.0), 1)
        elif kind == "loss":
            s["node"] = rng.choice(brokers + controllers)
            s["loss"] = round(rng.choice([0.05, 0.1, 0.2, 0.3, 0.5]), 2)
            s["hold"] = round(rng.uniform(4.0, 10.0), 1)
        elif kind == "slow":
            s["node"] = rng.choice(brokers + controllers)
            s["rate_kbit"] = rng.choice([128, 512, 2048])
            s["hold"] = round(rng.uniform(4.0, 10.0), 1)
        s["text"] = describe(s)
        steps.append(s)
        # kills cost a restart (a broker's at least the session timeout)
        budget += s["gap"] + s["hold"] + (session_s + 2 if "kill" in kind or "stop" in kind else 0.5)
    return steps


def describe(s):
    k = s["kind"]
    node = s.get("node")
    who = ("the active controller" if node == "active" else
           f"{'controller' if isinstance(node, int) and node > 1000 else 'broker'} {node}")
    length = "" if "long" not in s else (" (longer than the session timeout)" if s["long"]
                                         else " (shorter than the session timeout)")
    if k == "kill-broker" or k == "kill-controller":
        return f"kill -9 {who}, restart after {s['hold']}s"
    if k == "kill-two-brokers":
        return f"kill -9 brokers {s['nodes'][0]} and {s['nodes'][1]}, restart after {s['hold']}s"
    if k == "kill-in-restart":
        return (f"kill -9 {who}, restart after {s['hold']}s, kill -9 again {s['again']}s into its start, "
                "restart")
    if k == "kill-quorum":
        return f"kill -9 controllers {s['nodes'][0]} and {s['nodes'][1]} (a majority), restart after {s['hold']}s"
    if k == "stop-broker":
        return f"SIGTERM {who}, restart after {s['hold']}s"
    if k == "kill-leader+controller":
        return f"kill -9 the active controller and the leader of partition {s['partition']}, restart after {s['hold']}s"
    if k.startswith("pause"):
        return f"SIGSTOP {who} for {s['hold']}s{length}"
    if k == "partition-brokers":
        return f"cut {who} from the other brokers for {s['hold']}s{length}"
    if k == "partition-controllers":
        return f"cut {who} from every controller for {s['hold']}s{length}"
    if k == "isolate-broker":
        return f"cut {who} from every other node for {s['hold']}s{length}"
    if k == "isolate-controller":
        return f"cut {who} from every other node for {s['hold']}s"
    if k == "loss":
        return f"{who} drops {int(s['loss'] * 100)}% of incoming packets for {s['hold']}s"
    if k == "slow":
        return f"{who}'s outgoing link limited to {s['rate_kbit']} kbit/s for {s['hold']}s"
    return k


class Nemesis:
    """Runs steps against a cluster (campaign.Cluster) and records what it did: each
    fault's text with the nodes it resolved to, and when it began and was healed."""

    def __init__(self, cluster, topic, now, say):
        self.c = cluster
        self.topic = topic
        self.now = now
        self.say = say
        self.ran = []  # {i, text, t_start, t_end}
        self.problems = []  # nodes that could not be restarted, etc.

    def resolve(self, node):
        if node == "active":
            lead = self.c.active_controller()
            if lead < 0:
                lead = self.c.controllers[0]
                self.say(f"    no active controller found; taking controller {lead}")
            return lead
        return node

    def run_step(self, s):
        kind = s["kind"]
        rec = {"i": s["i"], "text": s["text"], "t_start": self.now()}
        self.ran.append(rec)
        if kind in ("kill-broker", "kill-controller", "stop-broker"):
            node = self.resolve(s["node"])
            rec["text"] = s["text"].replace("the active controller", f"the active controller ({node})")
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.signal(node, "TERM" if kind == "stop-broker" else "KILL")
            time.sleep(s["hold"])
            self.restart([node], rec)
        elif kind in ("kill-two-brokers", "kill-quorum"):
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.signal_many(s["nodes"], "KILL")
            time.sleep(s["hold"])
            self.restart(s["nodes"], rec)
        elif kind == "kill-in-restart":
            node = s["node"]
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.signal(node, "KILL")
            time.sleep(s["hold"])
            err = self.c.start(node, wait=False)
            if err:
                self.problems.append(f"fault #{rec['i']}: {err}")
            time.sleep(s["again"])
            self.c.signal(node, "KILL")
            self.restart([node], rec)
        elif kind == "kill-leader+controller":
            ctl = self.resolve("active")
            leader = self.c.leader_of(self.topic, s["partition"])
            if leader < 0:
                leader = self.c.brokers[s["partition"] % len(self.c.brokers)]
                self.say(f"    partition {s['partition']} has no leader now; taking broker {leader}")
            rec["text"] = f"{s['text']} (controller {ctl}, broker {leader})"
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.signal_many([ctl, leader], "KILL")
            time.sleep(s["hold"])
            self.restart([ctl, leader], rec)
        elif kind.startswith("pause"):
            node = self.resolve(s["node"])
            rec["text"] = s["text"].replace("the active controller", f"the active controller ({node})")
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.signal(node, "STOP")
            try:
                time.sleep(s["hold"])
            finally:
                self.c.signal(node, "CONT")
        else:
            node = self.resolve(s["node"])
            rec["text"] = s["text"].replace("the active controller", f"the active controller ({node})")
            self.say(f"  #{s['i']} {rec['text']}")
            self.c.net.apply(kind, node, s)
            try:
                time.sleep(s["hold"])
            finally:
                self.c.net.heal_node(node)
        rec["t_end"] = self.now()

    def restart(self, nodes, rec):
        # controllers first: a broker needs a quorum to register
        for node in sorted(nodes, key=lambda n: -n):
            err = self.c.start(node)
            if err:
                self.problems.append(f"fault #{rec['i']}: {err}")
                self.say(f"    RESTART FAILED: {err}")
