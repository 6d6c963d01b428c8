"""Network namespaces for the fault campaign (--netns): every node of the cluster, and
the clients, in a namespace of their own, joined by veth links to a bridge that lives in
one more namespace, so that links between nodes can be cut, made lossy or slow.

Names: slh-<campaign pid>-<node id> for the nodes, slh-<pid>-cl for the clients,
slh-<pid>-sw for the bridge. Addresses 10.213.0.0/24, assigned only inside those
namespaces: broker N is 10.213.0.N, controller 100M is 10.213.0.(100+M), the clients
10.213.0.200. Nothing is added to the machine's own namespace. The campaign removes the
namespaces on every exit path (destroy(), also at interpreter exit), and removes
namespaces of earlier campaigns whose process is gone, with the nodes still running in
them (a SIGKILLed run cannot clean up).

Faults, each applied inside the namespace of the node it targets and healed by
flushing that namespace's rules:
  cut node from peers   iptables -A INPUT -i eth0 -s PEER -j DROP (and OUTPUT -d PEER)
  loss                  iptables -A INPUT -i eth0 -m statistic --mode random
                        --probability P -j DROP (this kernel has no netem)
  slow                  tc qdisc add dev eth0 root tbf rate R burst 32kbit latency 400ms
"""
import atexit
import json
import os
import re
import signal
import subprocess
import sys

PREFIX = "slh-"
SUBNET = "10.213.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def sh(*cmd, check=True, timeout=30):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return r


def remove_stale(say):
    """Namespaces slh-<pid>-* of campaigns that no longer run."""
    r = sh("ip", "netns", "list", check=False)
    for ln in r.stdout.splitlines():
        name = ln.split()[0] if ln.split() else ""
        m = re.fullmatch(PREFIX + r"(\d+)-\w+", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            # the nodes a SIGKILLed campaign started are still running in there
            pids = sh("ip", "netns", "pids", name, check=False).stdout.split()
            say(f"removing network namespace {name} left by campaign process {m.group(1)}, which is gone"
                + (f"; SIGKILL of the processes still in it: {' '.join(pids)}" if pids else ""))
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ValueError, OSError):
                    pass
            sh("ip", "netns", "del", name, check=False)


class Topology:
    def __init__(self, pid, brokers, controllers, say):
        self.pid = pid
        self.brokers = list(brokers)
        self.controllers = list(controllers)
        self.say = say
        self.created = []
        self.addr = {b: f"{SUBNET}.{b}" for b in self.brokers}
        self.addr.update({c: f"{SUBNET}.{100 + c - 1000}" for c in self.controllers})
        self.client_addr = f"{SUBNET}.200"
        atexit.register(self.destroy)

    def ns(self, node):
        return f"{PREFIX}{self.pid}-{node}"

    @property
    def client_ns(self):
        return f"{PREFIX}{self.pid}-cl"

    @property
    def switch_ns(self):
        return f"{PREFIX}{self.pid}-sw"

    def nodes(self):
        return self.brokers + self.controllers

    # -- life cycle
    def create(self):
        remove_stale(self.say)
        sw = self.switch_ns
        self._add_ns(sw)
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        members = [(n, self.ns(n), self.addr[n]) for n in self.nodes()] + [("cl", self.client_ns, self.client_addr)]
        for tag, name, addr in members:
            self._add_ns(name)
            sh("ip", "-n", sw, "link", "add", f"v{tag}", "type", "veth", "peer", "name", "eth0", "netns", name)
            sh("ip", "-n", sw, "link", "set", f"v{tag}", "master", "br0")
            sh("ip", "-n", sw, "link", "set", f"v{tag}", "up")
            sh("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", name, "link", "set", "eth0", "up")
            sh("ip", "-n", name, "link", "set", "lo", "up")
        # every node reaches every other before anything starts
        # (a refused connection to a closed port proves the address answers)
        reach = ("import socket, sys\nfor a in sys.argv[1:]:\n    try:\n"
                 "        socket.create_connection((a, 9), timeout=2).close()\n"
                 "    except ConnectionRefusedError:\n        pass\n")
        r = sh("ip", "netns", "exec", self.client_ns, sys.executable, "-c", reach,
               *[self.addr[n] for n in self.nodes()], check=False)
        if r.returncode != 0:
            raise RuntimeError(f"a node's namespace is unreachable from the clients' namespace: {r.stderr[-300:]}")
        self.say(f"network namespaces: {', '.join(self.created)} (bridge in {sw}); "
                 f"brokers {', '.join(self.addr[b] for b in self.brokers)}, "
                 f"controllers {', '.join(self.addr[c] for c in self.controllers)}, clients {self.client_addr}")

    def _add_ns(self, name):
        sh("ip", "netns", "add", name)
        self.created.append(name)

    def destroy(self):
        for name in reversed(self.created):
            sh("ip", "netns", "del", name, check=False)
        self.created = []

    # -- what the campaign needs from it
    def cluster_args(self):
        args = []
        for n in self.nodes():
            args += ["--host-of", f"{n}={self.addr[n]}", "--netns-of", f"{n}={self.ns(n)}"]
        return args

    def client_cmd(self, cmd):
        return ["ip", "netns", "exec", self.client_ns] + list(cmd)

    def probe(self, kind, *args):
        r = sh("ip", "netns", "exec", self.client_ns, sys.executable, os.path.join(HERE, "probe.py"), kind, *args,
               check=False, timeout=30)
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"probe {kind}: {r.stderr.strip()[-300:]}", "leader": -1}

    # -- faults
    def _ipt(self, node, *rule):
        sh("ip", "netns", "exec", self.ns(node), "iptables", "-w", "5", *rule)

    def cut(self, node, peers):
        for p in peers:
            self._ipt(node, "-A", "INPUT", "-i", "eth0", "-s", self.addr[p], "-j", "DROP")
            self._ipt(node, "-A", "OUTPUT", "-o", "eth0", "-d", self.addr[p], "-j", "DROP")

    def apply(self, kind, node, step):
        others_b = [b for b in self.brokers if b != node]
        others_c = [c for c in self.controllers if c != node]
        if kind == "partition-brokers":
            self.cut(node, others_b)
        elif kind == "partition-controllers":
            self.cut(node, self.controllers)
        elif kind == "isolate-broker":
            self.cut(node, others_b + self.controllers)
        elif kind == "isolate-controller":
            self.cut(node, self.brokers + others_c)
        elif kind == "loss":
            self._ipt(node, "-A", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
                      "--probability", str(step["loss"]), "-j", "DROP")
        elif kind == "slow":
            sh("ip", "netns", "exec", self.ns(node), "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
               "rate", f"{step['rate_kbit']}kbit", "burst", "32kbit", "latency", "400ms")
        else:
            raise ValueError(f"unknown network fault {kind}")

    def heal_node(self, node):
        self._ipt(node, "-F", "INPUT")
        self._ipt(node, "-F", "OUTPUT")
        sh("ip", "netns", "exec", self.ns(node), "tc", "qdisc", "del", "dev", "eth0", "root", check=False)

    def heal_all(self):
        for n in self.nodes():
            self.heal_node(n)
