#!/usr/bin/env python3
"""The dpdk transport against the io_uring transport, side by side in one run (issue 14,
the TAP half). perf/dpdk-vs-uring.sh builds the broker and calls this; see its header
and docs/benchmarks.md, "DPDK vs io_uring through a TAP".

The same broker binary is started, one network core and one storage core, in three
set-ups, each in network namespaces this script creates (prefix sluice-bench-) with
198.18.x.x addresses:

  dpdk        sluice.transport=dpdk on a net_tap device in namespace NS-dpdk (EAL
              --no-huge --no-pci -m 256, a unique --file-prefix); the broker is
              198.18.0.2, the clients reach it through the kernel's side of the TAP
              (198.18.0.1) from the same namespace.
  uring-veth  sluice.transport=uring (kernel TCP through io_uring) in NS-srv at
              198.18.1.2, the clients in NS-cli at 198.18.1.1, joined by a veth pair:
              the comparable path, a virtual link crossed by every byte. A veth
              carries TCP's segmentation-offload packets (up to 64 KiB) whole.
  uring-veth-nogso  (not run by default) the same veth with gso_max_segs 1 on both
              ends: every frame at most one MSS, as on the TAP (whose DPDK side has no
              offloads). On this 2-core machine its frames arrive out of order (the kernel
              counts SACK reordering and spurious retransmissions; likely cause: veth
              queues each frame on the sending CPU's backlog, and a sender that moves
              between CPUs overtakes its own frames); the figures then measure that, not
              the frame size.
  uring-lo    the same broker and clients both in NS-srv over 127.0.0.1: the loopback
              reference (no link at all).

For each workload (phase), each set-up in turn gets a fresh broker and data directory,
sluice-perf runs against it, and the broker's CPU time is read from /proc/PID/stat (the
whole process) and /proc/PID/task/*/stat (per thread: sluice-net0, sluice-store0, the
rest) just before the client starts and after it exits. The broker is then stopped
(SIGTERM) and its data deleted. Only processes this script started are signalled, by PID;
the namespaces and DPDK runtime directories it created are deleted at the end, also on
an error or a signal.
"""
import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time

# Single-record requests: linger.ms 0 and batch.num.messages 1 make every Produce request
# carry one record (librdkafka sends one partition per request); queue.buffering.max.messages
# bounds the records a producer has outstanding (queued or in flight), so the latency is
# that of the requests, not of a client-side queue.
SINGLE = ["-p", "1", "--linger-ms", "0", "-P", "batch.num.messages=1"]
PHASES = {
    # name: (title, sluice-perf arguments)
    "throughput": ("1 producer, 6 partitions, linger.ms 5 (librdkafka's batching), as fast as possible",
                   ["-p", "6", "--linger-ms", "5", "--producers", "1"]),
    "single-1": ("single-record requests, 1 partition, 1 producer with 1 request outstanding",
                 SINGLE + ["--producers", "1", "-P", "queue.buffering.max.messages=1",
                           "-P", "max.in.flight.requests.per.connection=1"]),
    "single-4": ("single-record requests, 1 partition, 4 producers with 1 request outstanding each",
                 SINGLE + ["--producers", "4", "-P", "queue.buffering.max.messages=1",
                           "-P", "max.in.flight.requests.per.connection=1"]),
    "single-32": ("single-record requests, 1 partition, 1 producer with up to 32 requests outstanding",
                  SINGLE + ["--producers", "1", "-P", "queue.buffering.max.messages=32"]),
    "latency": ("1 producer, 6 partitions, linger.ms 0, a fixed rate (--rate)",
                ["-p", "6", "--linger-ms", "0", "--producers", "1"]),
}
TRANSPORTS = ["dpdk", "uring-veth", "uring-veth-nogso", "uring-lo"]
BROKER_HOST = {"dpdk": "198.18.0.2", "uring-veth": "198.18.1.2", "uring-veth-nogso": "198.18.1.2",
               "uring-lo": "127.0.0.1"}
PORT = 9092
DPDK_KERNEL_IP, DPDK_BROKER_IP = "198.18.0.1", BROKER_HOST["dpdk"]
VETH_CLIENT_IP, VETH_BROKER_IP = "198.18.1.1", BROKER_HOST["uring-veth"]
FLUSH_MODE = "default: acknowledged when the O_DIRECT write completes, no fsync"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(*args, check=True, timeout=60):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    return r


# ------------------------------------------------------------------ CPU sampling

def stat_fields(path):
    """Fields after the command name of a /proc stat file (the name may hold spaces)."""
    with open(path) as f:
        s = f.read()
    return s[s.rindex(")") + 2:].split()


def ctx_switches(path):
    vol = invol = 0
    with open(path) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                invol = int(line.split()[1])
    return vol, invol


def sample_process(pid):
    """The process's utime+stime in ticks (every thread, live or gone) and, per live thread,
    its name, ticks and voluntary context switches (how often it slept and woke)."""
    f = stat_fields(f"/proc/{pid}/stat")
    proc = int(f[11]) + int(f[12])  # fields 14 and 15 of proc(5), counted from field 3
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            tf = stat_fields(f"/proc/{pid}/task/{tid}/stat")
            with open(f"/proc/{pid}/task/{tid}/comm") as c:
                name = c.read().strip()
            vol, _ = ctx_switches(f"/proc/{pid}/task/{tid}/status")
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the read
        threads[tid] = {"name": name, "ticks": int(tf[11]) + int(tf[12]), "wakes": vol}
    return {"t": time.monotonic(), "proc_ticks": proc, "threads": threads}


def machine_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v[:8]), idle


def cpu_delta(a, b):
    """Broker CPU between two samples, in seconds: the process, its network core
    (sluice-net*), its storage core (sluice-store*) and the rest, and the wakes of the
    threads other than the two cores. A thread born after the first sample counts from 0."""
    out = {"process_s": (b["proc_ticks"] - a["proc_ticks"]) / CLK_TCK, "net_s": 0.0, "store_s": 0.0,
           "other_wakes": 0, "net_wakes": 0}
    for tid, t in b["threads"].items():
        before = a["threads"].get(tid, {"ticks": 0, "wakes": 0})
        d = (t["ticks"] - before["ticks"]) / CLK_TCK
        w = t["wakes"] - before["wakes"]
        if t["name"].startswith("sluice-net"):
            out["net_s"] += d
            out["net_wakes"] += w
        elif t["name"].startswith("sluice-store"):
            out["store_s"] += d
        else:
            out["other_wakes"] += w
    out["other_s"] = max(0.0, out["process_s"] - out["net_s"] - out["store_s"])
    out["wall_s"] = b["t"] - a["t"]
    return out


def kernel_tcp(ns):
    """The namespace's kernel TCP counters (/proc/net/snmp and netstat are per namespace)."""
    r = sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp", "/proc/net/netstat", check=False)
    out, lines = {}, r.stdout.splitlines()
    for head, vals in zip(lines[0::2], lines[1::2]):
        h, v = head.split(), vals.split()
        if h and v and h[0] == v[0] and h[0] in ("Tcp:", "TcpExt:"):
            for k, x in zip(h[1:], v[1:]):
                out[h[0][:-1] + "." + k] = int(x)
    return out


def link_counters(namespaces):
    """Frames and drops of every link but loopback in the namespaces, by name."""
    out = {}
    for ns in namespaces:
        r = sh("ip", "-n", ns, "-s", "-j", "link", "show", check=False)
        try:
            links = json.loads(r.stdout or "[]")
        except ValueError:
            continue
        for ln in links:
            st = ln.get("stats64") or {}
            if ln.get("ifname") == "lo":
                continue
            out[ln["ifname"]] = {f"{d}_{k}": (st.get(d) or {}).get(k, 0) for d in ("rx", "tx")
                                 for k in ("packets", "dropped", "errors")}
    return out


def delta(a, b):
    return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}


TCP_SHOWN = ["Tcp.OutSegs", "Tcp.RetransSegs", "TcpExt.TCPLossProbes", "TcpExt.TCPTimeouts",
             "TcpExt.DelayedACKs", "TcpExt.TCPAutoCorking"]


def idle_share(seconds=1.0):
    t0, i0 = machine_ticks()
    time.sleep(seconds)
    t1, i1 = machine_ticks()
    return (i1 - i0) / max(1, t1 - t0)


# ------------------------------------------------------------------ namespaces

class Bench:
    def __init__(self, args):
        self.args = args
        self.tag = args.tag
        self.ns = {"dpdk": f"sluice-bench-{self.tag}-dpdk", "srv": f"sluice-bench-{self.tag}-srv",
                   "cli": f"sluice-bench-{self.tag}-cli"}
        self.veth = (f"sbv{self.tag}a", f"sbv{self.tag}b")
        self.starts = 0
        self.prefixes = []
        self.broker = None
        self.broker_log = None
        self.client = None
        self.quiet_total = 0.0

    def setup(self):
        for name in self.ns.values():
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        a, b = self.veth
        sh("ip", "link", "add", a, "netns", self.ns["cli"], "type", "veth", "peer", "name", b, "netns",
           self.ns["srv"])
        sh("ip", "-n", self.ns["cli"], "addr", "add", f"{VETH_CLIENT_IP}/24", "dev", a)
        sh("ip", "-n", self.ns["srv"], "addr", "add", f"{VETH_BROKER_IP}/24", "dev", b)
        sh("ip", "-n", self.ns["cli"], "link", "set", a, "up")
        sh("ip", "-n", self.ns["srv"], "link", "set", b, "up")
        d = sh("ip", "-n", self.ns["cli"], "-d", "-j", "link", "show", a).stdout
        self.gso_segs = json.loads(d)[0].get("gso_max_segs", 65535)

    def veth_gso(self, segs):
        """gso_max_segs on both ends of the veth; TCP reads it when a connection starts."""
        a, b = self.veth
        sh("ip", "-n", self.ns["cli"], "link", "set", "dev", a, "gso_max_segs", str(segs))
        sh("ip", "-n", self.ns["srv"], "link", "set", "dev", b, "gso_max_segs", str(segs))

    def teardown(self):
        c, self.client = self.client, None
        if c is not None and c.returncode is None:
            c.kill()
            c.wait(10)
        self.stop_broker(quiet=True)
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for p in self.prefixes:  # the EAL's runtime directory of each broker started
            subprocess.run(["rm", "-rf", f"/var/run/dpdk/{p}"], capture_output=True)

    # -------------------------------------------------------------- the broker

    def properties(self, transport, datadir):
        host = BROKER_HOST[transport]
        lines = [f"listeners=PLAINTEXT://{host}:{PORT}", f"advertised.listeners=PLAINTEXT://{host}:{PORT}",
                 f"log.dirs={datadir}", "num.partitions=1", "auto.create.topics.enable=true",
                 "log.segment.bytes=1073741824", "message.max.bytes=1048588", "num.network.threads=1",
                 "sluice.storage.threads=1", "sluice.cpu.affinity=false"]
        if transport == "dpdk":
            self.starts += 1
            prefix = f"sluice-bench-{self.tag}-{self.starts}"
            self.prefixes.append(prefix)
            self.tap = f"sbt{self.tag}x{self.starts}"
            eal = (f"--no-huge --no-pci -m 256 --file-prefix={prefix} --vdev=net_tap0,iface={self.tap} -l 0 "
                   f"--log-level=lib.eal:warning")
            lines += ["sluice.transport=dpdk", f"sluice.dpdk.eal.args={eal}",
                      f"sluice.dpdk.ipv4.address={DPDK_BROKER_IP}/24"]
        else:
            lines += ["sluice.transport=uring"]
        return "\n".join(lines) + "\n"

    def start_broker(self, transport, pdir):
        datadir = os.path.join(self.args.workdir, f"data-{transport}")
        subprocess.run(["rm", "-rf", datadir])
        os.makedirs(datadir)
        props = os.path.join(pdir, "broker.properties")
        with open(props, "w") as f:
            f.write(self.properties(transport, datadir))
        ns = self.ns["dpdk"] if transport == "dpdk" else self.ns["srv"]
        self.broker_log = os.path.join(pdir, "broker.log")
        lf = open(self.broker_log, "w")
        # ip netns exec execs the broker, so this PID is the broker's own.
        self.broker = subprocess.Popen(["ip", "netns", "exec", ns, self.args.broker, props], stdout=lf,
                                       stderr=subprocess.STDOUT, cwd=pdir)
        lf.close()
        with open(self.args.pidfile, "a") as f:
            f.write(f"{self.broker.pid}\n")
        deadline = time.monotonic() + 30
        want = f"transport {'dpdk' if transport == 'dpdk' else 'uring'}"
        while True:
            text = self.broker_text()
            if "unknown transport 'dpdk'" in text:
                raise RuntimeError("this sluice-broker was built without DPDK (install libdpdk-dev, reconfigure)")
            if self.broker.poll() is not None:
                raise RuntimeError(f"the broker exited ({self.broker.returncode}):\n{text[-2000:]}")
            if "listening on" in text and want in text:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not come up in 30 s:\n{text[-2000:]}")
            time.sleep(0.1)
        if transport == "dpdk":
            self.tap_up()
        self.reachable(transport)
        return self.broker.pid

    def tap_up(self):
        ns = self.ns["dpdk"]
        deadline = time.monotonic() + 20
        while sh("ip", "-n", ns, "link", "show", self.tap, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no TAP {self.tap} in {ns} after 20 s")
            time.sleep(0.1)
        sh("ip", "-n", ns, "addr", "add", f"{DPDK_KERNEL_IP}/24", "dev", self.tap)
        sh("ip", "-n", ns, "link", "set", self.tap, "up")

    def reachable(self, transport):
        if transport == "uring-lo":
            return
        ns, ip = (self.ns["dpdk"], DPDK_BROKER_IP) if transport == "dpdk" else (self.ns["cli"], VETH_BROKER_IP)
        for _ in range(20):
            if sh("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", ip, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{ip} does not answer ping from {ns}")

    def broker_text(self):
        try:
            with open(self.broker_log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop_broker(self, quiet=False):
        p, self.broker = self.broker, None
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
            if not quiet:
                raise RuntimeError("the broker did not stop within 30 s of SIGTERM")
            return None

    # -------------------------------------------------------------- a phase

    def client_ns(self, transport):
        return {"dpdk": self.ns["dpdk"], "uring-lo": self.ns["srv"]}.get(transport, self.ns["cli"])

    def bootstrap(self, transport):
        return f"{BROKER_HOST[transport]}:{PORT}"

    def quiet(self):
        """Waits (up to --quiet-wait s per phase, 180 s in all) for the machine's CPUs to be
        at least 70% idle over a second, so that other work on a shared machine disturbs
        the figures less. Returns the last idle share seen and the seconds waited."""
        t0 = time.monotonic()
        idle = idle_share()
        while idle < 0.7 and time.monotonic() - t0 < self.args.quiet_wait and self.quiet_total < 180:
            idle = idle_share()
            self.quiet_total += 1
        return idle, time.monotonic() - t0

    def wait_client(self, p, pid, s0):
        """Waits for the client, sampling the broker every second so that a broker that dies
        leaves its last figures; a client still running 5 s after the broker died, or 60 s
        after its run should have ended, is killed. Returns its wait status, its rusage (the
        client's own CPU time), the broker's last sample and whether the broker died."""
        a = self.args
        deadline = time.monotonic() + a.warmup + a.duration + 10 + 60
        last, died_at, next_sample = s0, None, time.monotonic() + 1
        while True:
            wpid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if wpid:
                break
            now = time.monotonic()
            if died_at is None and self.broker.poll() is not None:
                died_at = now
            if died_at is None and now >= next_sample:
                try:
                    last, next_sample = sample_process(pid), now + 1
                except (OSError, ValueError):
                    pass
            if (died_at is not None and now - died_at > 5) or now > deadline:
                p.kill()
            time.sleep(0.05)
        if died_at is None:
            try:
                last = sample_process(pid)
            except (OSError, ValueError):
                died_at = time.monotonic()
        return status, ru, last, died_at is not None

    def run_phase(self, phase, transport):
        a = self.args
        pdir = os.path.join(a.out, phase, transport)
        os.makedirs(pdir, exist_ok=True)
        self.veth_gso(1 if transport == "uring-veth-nogso" else self.gso_segs)
        idle, waited = self.quiet()
        load = open("/proc/loadavg").read().split()[:3]
        pid = self.start_broker(transport, pdir)
        title, extra = PHASES[phase]
        stats = os.path.join(a.workdir, f"{phase}-{transport}.stats.jsonl")
        subprocess.run(["rm", "-f", stats])
        cmd = ["ip", "netns", "exec", self.client_ns(transport), a.perf, "produce", "-b", self.bootstrap(transport),
               "-t", f"bench-{phase}", "--create", "-s", str(a.record_size), "--acks", "1",
               "--warmup", str(a.warmup), "-d", str(a.duration), "--interval", "1", "--tail", "10",
               "--json", os.path.join(pdir, "perf.json"), "--stats", stats] + extra
        if phase == "latency":
            cmd += ["--rate", str(a.rate)]
        with open(os.path.join(pdir, "command.txt"), "w") as f:
            f.write(" ".join(cmd[4:]) + "\n")
        link_ns = [self.ns["dpdk"]] if transport == "dpdk" else [self.ns["srv"], self.ns["cli"]]
        tcp0, links0 = kernel_tcp(self.client_ns(transport)), link_counters(link_ns)
        m0 = machine_ticks()
        s0 = sample_process(pid)
        with open(os.path.join(pdir, "perf.log"), "w") as out:
            p = self.client = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            status, ru, s1, died = self.wait_client(p, pid, s0)
            p.returncode = os.waitstatus_to_exitcode(status)
            self.client = None
        m1 = machine_ticks()
        # Before the broker stops: its TAP goes with it.
        tcp1, links1 = kernel_tcp(self.client_ns(transport)), link_counters(link_ns)
        alive = self.broker.poll() is None
        rc_broker = self.stop_broker()
        text = self.broker_text()
        if died:
            log(f"  {phase}/{transport}: THE BROKER DIED during the run (exit {rc_broker}): "
                f"{text.strip().splitlines()[-1] if text.strip() else ''}")
        res = {"phase": phase, "transport": transport, "title": title, "client_rc": p.returncode,
               "broker_alive_after": alive, "broker_died": died, "broker_rc": rc_broker,
               "broker_last_line": (text.strip().splitlines() or [""])[-1], "idle_before": idle, "quiet_wait_s": waited,
               "load_before": load,
               "broker_cpu": cpu_delta(s0, s1),
               "client_cpu_s": ru.ru_utime + ru.ru_stime,
               "machine_busy_s": ((m1[0] - m0[0]) - (m1[1] - m0[1])) / CLK_TCK,
               "threads_end": sorted({t["name"] for t in s1["threads"].values()}),
               "requests": produce_requests(stats),
               "client_kernel_tcp": delta(tcp0, tcp1),
               "links": {name: delta(links0.get(name, {}), c) for name, c in links1.items()},
               "dpdk_counters": [ln.split("INFO  net: ", 1)[1] for ln in text.splitlines()
                                 if "INFO  net:" in ln and ("frames in" in ln or "connections ended" in ln)]}
        try:
            with open(os.path.join(pdir, "perf.json")) as f:
                res["perf"] = json.load(f)
        except (OSError, ValueError):
            res["perf"] = None
        with open(os.path.join(pdir, "result.json"), "w") as f:
            json.dump(res, f, indent=1)
        subprocess.run(["rm", "-rf", os.path.join(a.workdir, f"data-{transport}"), stats])
        if p.returncode != 0:
            log(f"  {phase}/{transport}: sluice-perf exited {p.returncode}; see {pdir}/perf.log")
        if rc_broker != 0:
            log(f"  {phase}/{transport}: the broker exited {rc_broker} after SIGTERM; see {pdir}/broker.log")
        return res


def produce_requests(path):
    """Produce requests sent by all of a phase's clients: the last librdkafka statistics
    line of each client (emitted every 100 ms, so up to 100 ms of the end may be missing)."""
    last = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                n = sum((b.get("req") or {}).get("Produce", 0) for b in d.get("brokers", {}).values())
                last[d.get("name", "?")] = n
    except OSError:
        return None
    return sum(last.values()) if last else None


# ------------------------------------------------------------------ the report

def derived(r):
    p = (r.get("perf") or {})
    pr = p.get("produce") or {}
    lat = pr.get("latency_us") or {}
    delivered = p.get("delivered") or 0
    cpu = r["broker_cpu"]
    reqs = r.get("requests") or 0
    wall = cpu["wall_s"] or 1
    d = {"records_per_s": pr.get("records_per_s"), "mb_per_s": pr.get("mb_per_s"), "delivered": delivered,
         "p50_ms": lat["p50"] / 1000 if "p50" in lat else None, "p99_ms": lat["p99"] / 1000 if "p99" in lat else None,
         "requests": reqs, "records_per_request": delivered / reqs if reqs else None,
         # the measured window's records/s in requests, at the whole run's records per request
         "requests_per_s": pr.get("records_per_s") * reqs / delivered if reqs and delivered and
         pr.get("records_per_s") else None,
         "cpu_us_per_record": cpu["process_s"] * 1e6 / delivered if delivered else None,
         "cpu_us_per_request": cpu["process_s"] * 1e6 / reqs if reqs else None,
         "net_us_per_record": cpu["net_s"] * 1e6 / delivered if delivered else None,
         "net_busy": cpu["net_s"] / wall, "process_cores": cpu["process_s"] / wall,
         "records_per_net_cpu_s": delivered / cpu["net_s"] if cpu["net_s"] else None,
         "client_us_per_record": r["client_cpu_s"] * 1e6 / delivered if delivered else None,
         "other_wakes_per_s": cpu["other_wakes"] / wall,
         "unsent": p.get("unsent"), "errors": pr.get("errors"),
         "ok": r["client_rc"] == 0 and r["broker_rc"] == 0 and not r.get("broker_died")}
    return d


def fmt(v, spec=",.0f", none="–"):
    return none if v is None else format(v, spec)


def table(rows, header):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def report(results, meta):
    lines = [f"# DPDK vs io_uring through a TAP: run {meta['run']}", "",
             f"Commit `{meta['commit']}`, {meta['machine']}; {meta['date']}.",
             f"Broker: `{meta['broker']}`, 1 network core (`num.network.threads=1`), 1 storage core, "
             f"`sluice.cpu.affinity=false`. Flush mode: {FLUSH_MODE}.",
             f"Records: {meta['record_size']} B values, no key, no compression, acks=1; "
             f"{meta['warmup']} s warm-up + {meta['duration']} s measured per phase; client sluice-perf "
             f"(librdkafka {meta.get('librdkafka', '?')}), one process, in the client's namespace.",
             "Set-ups: **dpdk**: the broker on `net_tap` (EAL `--no-huge --no-pci -m 256`), client in the same "
             "namespace through the kernel's side of the TAP; **uring-veth**: the broker (kernel TCP, io_uring) and "
             "the client in two namespaces joined by a veth pair, which carries TCP's segmentation-offload "
             "packets whole; " + ("**uring-veth-nogso**: the same veth with `gso_max_segs 1`, so that every frame "
                                  "holds at most one MSS as on the TAP; " if "uring-veth-nogso" in meta["transports"]
                                  else "") +
             "**uring-lo**: both in one namespace over loopback (reference).", ""]
    hdr = ["phase", "set-up", "records/s", "MB/s", "Produce req/s", "rec/req", "p50 ms", "p99 ms",
           "broker CPU µs/record", "µs/request", "net core busy", "net core µs/record", "records per net-core CPU s",
           "broker cores", "client µs/record", "ok"]
    rows = []
    for r in results:
        d = derived(r)
        rows.append([r["phase"], r["transport"], fmt(d["records_per_s"]), fmt(d["mb_per_s"], ".1f"),
                     fmt(d["requests_per_s"]), fmt(d["records_per_request"], ".1f"), fmt(d["p50_ms"], ".2f"),
                     fmt(d["p99_ms"], ".2f"), fmt(d["cpu_us_per_record"], ".2f"), fmt(d["cpu_us_per_request"], ".1f"),
                     fmt(d["net_busy"] * 100, ".0f") + "%", fmt(d["net_us_per_record"], ".2f"),
                     fmt(d["records_per_net_cpu_s"]), fmt(d["process_cores"], ".2f"),
                     fmt(d["client_us_per_record"], ".2f"),
                     "yes" if d["ok"] else "**broker died**" if r.get("broker_died") else "**no**"])
    lines += [table(rows, hdr), ""]
    for r in results:
        if r.get("broker_died"):
            lines += [f"**{r['phase']} / {r['transport']}: the broker died during the run** (exit status "
                      f"{r['broker_rc']}); its last line: `{r.get('broker_last_line', '')}`. Its figures above cover "
                      "only what was done before.", ""]
    # Ratios of dpdk to each kernel set-up over a link, per phase.
    by = {(r["phase"], r["transport"]): derived(r) for r in results}
    rr = []
    for ref in ("uring-veth", "uring-veth-nogso"):
        for phase in meta["phases"]:
            a, b = by.get((phase, "dpdk")), by.get((phase, ref))
            if not a or not b or not a["ok"] or not b["ok"]:
                continue

            def ratio(k):
                return fmt(a[k] / b[k], ".2f") + "x" if a.get(k) and b.get(k) else "–"
            rr.append([phase, ref, ratio("records_per_s"), ratio("requests_per_s"), ratio("p50_ms"), ratio("p99_ms"),
                       ratio("cpu_us_per_record"), ratio("net_us_per_record"), ratio("client_us_per_record")])
    if rr:
        lines += ["Ratios, dpdk / a kernel set-up over a link (same run): above 1x means dpdk's figure is higher.", "",
                  table(rr, ["phase", "dpdk /", "records/s", "Produce req/s", "p50", "p99", "broker CPU/record",
                             "net core CPU/record", "client CPU/record"]), ""]
    cond = []
    for r in results:
        c, k = r["broker_cpu"], r.get("client_kernel_tcp") or {}
        links = r.get("links") or {}
        drops = sum(v for link in links.values() for n, v in link.items() if n.endswith("_dropped"))
        # Frames both ways on the link the client's traffic crosses: the TAP, or the client's veth end.
        one = [c for name, c in links.items() if name.startswith("sbt") or name.endswith("a")]
        frames = sum(c.get("rx_packets", 0) + c.get("tx_packets", 0) for c in one) if r["transport"] != "uring-lo" \
            else None
        cond.append([r["phase"], r["transport"], fmt(r["idle_before"] * 100, ".0f") + "%", " ".join(r["load_before"]),
                     fmt(c["process_s"], ".2f"), fmt(c["net_s"], ".2f"), fmt(c["store_s"], ".2f"),
                     fmt(c["other_s"], ".2f"), fmt(c["other_wakes"] / (c["wall_s"] or 1)),
                     fmt(r["client_cpu_s"], ".2f"),
                     fmt(r["machine_busy_s"], ".2f"),
                     fmt(max(0.0, r["machine_busy_s"] - c["process_s"] - r["client_cpu_s"]), ".2f"),
                     fmt(c["wall_s"], ".1f"), fmt(frames),
                     fmt(k.get("Tcp.RetransSegs", 0)), fmt(k.get("TcpExt.TCPLossProbes", 0)), fmt(drops),
                     fmt((r.get("perf") or {}).get("unsent"))])
    lines += ["Per phase: the machine's idle share in the second before (after waiting up to --quiet-wait "
              "seconds for 70%), the load average, the broker's CPU "
              "seconds over the client's run (process; network core; storage core; the other threads), how often "
              "the broker's other threads woke per second, the client's CPU seconds, the whole machine's busy CPU "
              "seconds and what of it was neither the broker nor the client (other sessions, kernel threads), "
              "the client's wall time, the frames that crossed the link (both "
              "ways), the segments the kernel TCP of the "
              "client's namespace retransmitted and its tail loss probes (uring-lo: both ends are that kernel's), "
              "frames dropped on the links (TAP or veth, both directions), and records scheduled but not sent.", "",
              table(cond, ["phase", "set-up", "idle before", "load", "broker CPU s", "net", "store", "other",
                           "other threads' wakes/s", "client CPU s", "machine busy s", "rest of the machine s",
                           "wall s", "link frames",
                           "kernel retrans", "loss probes", "link drops", "unsent"]), ""]
    dc = [[r["phase"], "; ".join(r["dpdk_counters"])] for r in results if r["transport"] == "dpdk"]
    if dc:
        lines += ["The dpdk broker's counters at each stop:", "", table(dc, ["phase", "counters"]), ""]
    lines += ["How each column is computed: docs/benchmarks.md, \"DPDK vs io_uring through a TAP\". "
              "Raw files: `<phase>/<set-up>/` (perf.json, perf.log, broker.log, broker.properties, command.txt, "
              "result.json)."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--render", metavar="DIR", help="only write DIR/results.md again from DIR/results.json")
    ap.add_argument("--broker")
    ap.add_argument("--perf")
    ap.add_argument("--out")
    ap.add_argument("--workdir")
    ap.add_argument("--tag", help="a short unique tag for the namespaces (the caller's PID)")
    ap.add_argument("--pidfile")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--phases", default=" ".join(PHASES))
    ap.add_argument("--transports", default="dpdk uring-veth uring-lo")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--run", default="?")
    a = ap.parse_args()
    if a.render:
        with open(os.path.join(a.render, "results.json")) as f:
            data = json.load(f)
        md = report(data["results"], data["meta"])
        with open(os.path.join(a.render, "results.md"), "w") as f:
            f.write(md)
        print(md)
        return 0
    for need in ("broker", "perf", "out", "workdir", "tag", "pidfile"):
        if not getattr(a, need):
            ap.error(f"--{need} is required")
    phases, transports = a.phases.split(), a.transports.split()
    for p in phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p} ({' '.join(PHASES)})")
    for t in transports:
        if t not in TRANSPORTS:
            ap.error(f"unknown set-up {t} ({' '.join(TRANSPORTS)})")
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.workdir, exist_ok=True)

    def on_signal(sig, _frame):
        raise KeyboardInterrupt(f"signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = {"run": a.run, "commit": a.commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "machine": f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, kernel "
        f"{platform.release()}; clients and broker share the cores", "broker": a.broker,
        "record_size": a.record_size, "acks": "1", "flush_mode": FLUSH_MODE, "warmup": a.warmup,
        "duration": a.duration, "latency_rate": a.rate, "phases": phases, "transports": transports,
        "batching": {p: PHASES[p][0] for p in phases}}
    b = Bench(a)
    results = []
    t0 = time.monotonic()
    try:
        b.setup()
        # Phase by phase, each set-up in turn, so that the machine's drift touches all alike.
        for phase in phases:
            for t in transports:
                log(f"{phase} / {t}")
                r = b.run_phase(phase, t)
                d = derived(r)
                log(f"  {fmt(d['records_per_s'])} records/s, {fmt(d['requests_per_s'])} Produce requests/s, "
                    f"p50 {fmt(d['p50_ms'], '.2f')} p99 {fmt(d['p99_ms'], '.2f')} ms, broker "
                    f"{fmt(d['cpu_us_per_record'], '.2f')} µs/record, net core busy {d['net_busy'] * 100:.0f}%")
                results.append(r)
    finally:
        b.teardown()
    if results:
        p = (results[0].get("perf") or {})
        meta["librdkafka"] = p.get("librdkafka", "?")
    meta["elapsed_s"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": [dict(r, derived=derived(r)) for r in results]}, f, indent=1)
    md = report(results, meta)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    print(md)
    bad = [f"{r['phase']}/{r['transport']}" for r in results if not derived(r)["ok"]]
    if bad:
        log(f"phases that did not finish cleanly: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaned up")
        sys.exit(130)
