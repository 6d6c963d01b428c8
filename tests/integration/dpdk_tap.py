#!/usr/bin/env python3
"""The broker on the dpdk transport (issue 14): sluice.transport=dpdk on a net_tap
device inside a network namespace this test creates (no hugepages, no NIC), with the
kernel's TCP on the other side of the TAP as the clients' stack. Every byte of the
Kafka listener goes through Sluice's own TCP/IP stack (dataplane/stack) on a DPDK
queue. Proves:

- the broker comes up on DPDK (EAL with --no-huge, the TAP port, its address) and
  answers ARP and ICMP echo: the kernel's ping gets every reply;
- the kernel side taking a new MAC mid-connection and announcing it (gratuitous ARP):
  the open connection's next answer reaches the new MAC (the ARP cache followed);
- kcat round trip over it, once per codec (none, gzip, snappy, lz4, zstd): 100,000
  keyed records of 10-300 bytes produced to a 3-partition topic and consumed back,
  every record exactly once, byte for byte, in order within its partition;
- confluent-kafka over it: an idempotent producer (acks=all) and a consumer in a
  group (JoinGroup, SyncGroup, OffsetCommit, then a second consumer of the group
  resuming from the committed offsets), every record once;
- loss both ways (the kernel side of the TAP drops 3% of the frames in each direction:
  iptables statistic match, this kernel has no netem): a kcat round trip of 20,000
  records still completes byte for byte, and the broker's stack counts retransmissions
  (its frames lost) and duplicate ACKs or out-of-order segments (the kernel's lost);
- malformed frames (a negative size, one past socket.request.max.bytes, a cut header,
  an unknown API key): each connection closed or answered, the broker alive after;
- 1,000 connections open at once, each answering ApiVersions, then closed: the broker
  keeps serving; and a clean SIGTERM stop, whose log line gives the stack's counters;
- checksum offloads: net_tap offers them, so the first broker leaves the checksums of
  what it sends to the port and trusts those the port verified; the second runs with
  sluice.dpdk.checksum.offload=false, every checksum in software; likewise the first
  broker's idle core sleeps until a frame arrives (the TAP queue's Rx interrupt), the
  second's naps 1 ms at a time (sluice.dpdk.rx.interrupts=false);
- zero copy: the first broker sends the consumers' fetch responses out of the storage
  cores' cache extents by reference (mbufs attached to the pinned extents, held until
  the peer acknowledges them; its stop line counts the bytes, which must be more than
  0), through every round trip above, the lossy one included (resent from the
  extents); the second copies them (sluice.dpdk.zero.copy=false, 0 bytes by reference)
  through the reordering, duplication and corruption below;
- segmentation offload: net_tap offers TSO (its driver cuts in software), so the first
  broker hands it segments of up to 64 KB of new data (its stop line counts them, more
  than 0), every round trip above byte for byte; the second, without checksum offloads,
  cuts every segment itself (0 such frames);
- reordering, duplication and corruption: started again with the stack's receive-path
  test hook (SLUICE_DPDK_RX_CHAOS: 3% of the frames held back behind the next one, 2%
  handed in twice, 2% with a byte flipped), a kcat round trip of 20,000 records completes
  byte for byte; the stack kept out-of-order segments, and dropped the corrupted frames
  (checksums);
- a SYN flood: 8,000 SYNs from addresses on the link that never answer leave at most
  sluice.dpdk.syn.backlog (1,024) connections half-open, the oldest dropped for each
  newer SYN, and real clients are served during and after;
- max.connections=50: of 60 connections 50 are answered and 10 refused with a reset
  from inside the stack's own callback, and the broker serves new ones after;
- two network cores (lcores 1 and 2): on one TAP port with two queue pairs (RSS
  configured; the kernel's tun driver steers each flow to a queue), and with a TAP
  port per core (the kernel spreads connections by a port-hashed multipath route to
  the one address): each a kcat round trip and 200 connections, both cores serving;
  and the refusals at start (exit 1, naming the key, log.dirs untouched): an lcore
  the EAL does not have, a port it did not find, ports that do not match the cores,
  a listener that is not the broker's;
- peers that vanish: 50 connections whose requests the broker answers into a void (the
  kernel side drops every frame from the broker) are each dropped after
  sluice.dpdk.tcp.retries (3 here) retransmissions, counted as timed out, and the broker
  serves new connections after.

Needs root (a network namespace, a TAP device) and a broker built with DPDK
(libdpdk-dev); without either it exits 77, which the test command counts as a
failure. Addresses: 198.18.0.1 (the kernel) and 198.18.0.2 (the broker), only inside
the namespace it creates and deletes; it kills only the broker it started, by PID.
"""
import os
import random
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

N = int(os.environ.get("SLUICE_DPDK_RECORDS", "100000"))
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
KERNEL_IP, BROKER_IP, PORT = "198.18.0.1", "198.18.0.2", 9092
BOOT = f"{BROKER_IP}:{PORT}"


def skip(why):
    log(f"SKIP: {why}")
    sys.exit(77)


def sh(*args, timeout=60, check_rc=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise lib.TestFailure(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
    return r


class Netns:
    def __init__(self):
        tag = os.getpid() % 100000
        self.name, self.tap, self.prefix = f"sluice-dpdk-{tag}", f"sltap{tag}", f"sluice-dpdk-{tag}"

    def __enter__(self):
        sh("ip", "netns", "add", self.name)
        sh("ip", "-n", self.name, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        shutil.rmtree(f"/var/run/dpdk/{self.prefix}", ignore_errors=True)  # the EAL's runtime files

    def run(self, *args, timeout=120, check_rc=True, stdin=None):
        r = subprocess.run(["ip", "netns", "exec", self.name, *args], capture_output=True, timeout=timeout,
                           input=stdin)
        if check_rc and r.returncode != 0:
            raise lib.TestFailure(f"in the namespace, {' '.join(args)[:200]}: exit {r.returncode}: "
                                  f"{r.stderr.decode(errors='replace').strip()[-400:]}")
        return r


class DpdkBroker:
    def __init__(self, ns, workdir, env=None, extra="", devices=None, lcores="-l 0"):
        self.ns, self.dir, self.env = ns, workdir, env
        self.props = os.path.join(workdir, "broker.properties")
        self.out = os.path.join(workdir, "out.log")
        devices = devices or f"--vdev=net_tap0,iface={ns.tap}"
        eal = (f"--no-huge -m 512 --no-pci --file-prefix={ns.prefix} {devices} {lcores} "
               f"--log-level=lib.eal:warning")
        with open(self.props, "w") as f:
            f.write(f"listeners=PLAINTEXT://{BOOT}\nadvertised.listeners=PLAINTEXT://{BOOT}\n"
                    f"log.dirs={workdir}/data\nnum.partitions=3\nsluice.transport=dpdk\n"
                    f"sluice.dpdk.eal.args={eal}\nsluice.dpdk.ipv4.address={BROKER_IP}/24\n"
                    f"num.network.threads=1\nsluice.storage.threads=1\nsluice.cpu.affinity=false\n"
                    f"offsets.topic.num.partitions=3\ngroup.initial.rebalance.delay.ms=0\n{extra}")
        self.p = None

    def start(self):
        broker = os.environ.get("SLUICE_BROKER", "")
        if not os.access(broker, os.X_OK):
            skip(f"no sluice-broker at {broker!r}")
        self.log_f = open(self.out, "w")
        self.p = subprocess.Popen(["ip", "netns", "exec", self.ns.name, broker, self.props], stdout=self.log_f,
                                  stderr=subprocess.STDOUT, cwd=self.dir, env={**os.environ, **(self.env or {})})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.text()
            if "unknown transport 'dpdk'" in text:
                skip("this sluice-broker was built without DPDK (install libdpdk-dev and reconfigure)")
            if self.p.poll() is not None:
                raise lib.TestFailure(f"the broker exited ({self.p.returncode}):\n{text[-2000:]}")
            if "listening on" in text and "transport dpdk" in text:
                return
            time.sleep(0.1)
        raise lib.TestFailure(f"the broker did not come up on DPDK in 30 s:\n{self.text()[-2000:]}")

    def start_fails(self, want):
        """The broker refuses to start: exit 1, its message naming what is wrong."""
        broker = os.environ.get("SLUICE_BROKER", "")
        with open(self.out, "w") as f:
            r = subprocess.run(["ip", "netns", "exec", self.ns.name, broker, self.props], stdout=f,
                               stderr=subprocess.STDOUT, cwd=self.dir, timeout=60)
        text = self.text()
        check(r.returncode == 1 and want in text, f"want exit 1 saying {want!r}; got exit {r.returncode}:\n"
              f"{text[-1500:]}")
        check(not os.path.exists(os.path.join(self.dir, "data")), "a refused start touched log.dirs")
        log(f"refused, exit 1: {[ln for ln in text.splitlines() if want in ln][0].split('net: ', 1)[-1][:200]}")

    def text(self):
        with open(self.out, errors="replace") as f:
            return f.read()

    def alive(self):
        return self.p and self.p.poll() is None

    def stop(self, sig=signal.SIGTERM, wait=30):
        if not self.alive():
            return self.p.returncode if self.p else None
        self.p.send_signal(sig)
        try:
            return self.p.wait(wait)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)
            raise lib.TestFailure(f"the broker did not stop in {wait} s after {sig.name}")


def check_signal_steering(b):
    """net_tap's per-frame signal is blocked in every thread of the broker but its
    network core (a frame woke the core before the signal's handler had run
    elsewhere, and the core slept again with the frame waiting: 4 ms per request)."""
    import re
    m = re.search(r"raises signal (\d+) per frame", b.text())
    check(m is not None, "the broker did not say which signal net_tap raises")
    bit = 1 << (int(m.group(1)) - 1)
    threads = {}
    for tid in os.listdir(f"/proc/{b.p.pid}/task"):
        with open(f"/proc/{b.p.pid}/task/{tid}/comm") as f:
            name = f.read().strip()
        with open(f"/proc/{b.p.pid}/task/{tid}/status") as f:
            blk = int(re.search(r"SigBlk:\s*([0-9a-f]+)", f.read()).group(1), 16)
        threads[f"{name}/{tid}"] = bool(blk & bit)
    open_to = [t for t, blocked in threads.items() if not blocked and not t.startswith("iou-wrk")]
    check(len(open_to) == 1 and open_to[0].startswith("sluice-net0"),
          f"signal {m.group(1)} is open to {open_to}, want the network core alone")
    log(f"net_tap's signal {m.group(1)} reaches the network core alone ({len(threads)} threads)")


def link_up(ns):
    """The kernel's side of the TAP (created by the broker's EAL) gets 198.18.0.1/24."""
    deadline = time.monotonic() + 20
    while ns.run("ip", "link", "show", ns.tap, check_rc=False).returncode != 0:
        check(time.monotonic() < deadline, f"no TAP {ns.tap} in the namespace after 20 s")
        time.sleep(0.1)
    ns.run("ip", "addr", "add", f"{KERNEL_IP}/24", "dev", ns.tap)
    ns.run("ip", "link", "set", ns.tap, "up")


def check_ping(ns):
    if not shutil.which("ping"):
        raise lib.TestFailure("ping is missing (iputils-ping; tests/install-deps.sh installs it)")
    r = ns.run("ping", "-c", "3", "-i", "0.2", "-W", "2", BROKER_IP, check_rc=False, timeout=30)
    out = r.stdout.decode()
    check(r.returncode == 0 and " 0% packet loss" in out, f"ping through DPDK: {out.strip()[-300:]}")
    log(f"ICMP echo through DPDK: {out.strip().splitlines()[-1]}")


MACSWAP = r'''
import socket, struct, subprocess, sys, time
host, port, tap, kernel_ip = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port), timeout=5)
req = struct.pack(">hhih", 18, 0, 3, 4) + b"swap"
def ask():
    s.sendall(struct.pack(">i", len(req)) + req)
    n = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    assert struct.unpack(">i", s.recv(n, socket.MSG_WAITALL)[:4])[0] == 3
ask()
new = bytes([0x02, 0x00, 0x5e, 0x10, 0x77, 0x01])
subprocess.run(["ip", "link", "set", "dev", tap, "address", ":".join("%02x" % b for b in new)], check=True)
pk = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
pk.bind((tap, 0))
ip = socket.inet_aton(kernel_ip)
pk.send(b"\xff" * 6 + new + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + new + ip + b"\0" * 6 + ip)
t = time.monotonic()
ask()
print("%.1f" % ((time.monotonic() - t) * 1000))
'''


def mac_change(ns):
    """The kernel's side of the TAP takes a new MAC mid-connection and announces it
    (a gratuitous ARP, as a router's failover does): the open connection's next
    answer goes to the new MAC (before, every connection kept the MAC its SYN came
    from, and its frames were lost at the old one)."""
    r = ns.run(sys.executable, "-c", MACSWAP, BROKER_IP, str(PORT), ns.tap, KERNEL_IP, timeout=30)
    log(f"a new MAC announced mid-connection: the next answer came to it in {r.stdout.decode().strip()} ms")


def records(n, seed):
    rnd = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?-_/"
    out = []
    for i in range(n):
        v = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(10, 300)))
        out.append((f"k{i % 997}", f"{i:06d}:{v}"))
    return out


def kcat_roundtrip(ns, codec, n=N, topic=None):
    topic = topic or f"dpdk-kcat-{codec}"
    recs = records(n, codec)
    data = "".join(f"{k}\t{v}\n" for k, v in recs).encode()
    t0 = time.monotonic()
    ns.run("kcat", "-b", BOOT, "-P", "-t", topic, "-K", "\t", "-z", codec, "-X", "acks=all", stdin=data, timeout=300)
    r = ns.run("kcat", "-b", BOOT, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p\t%o\t%k\t%s\n",
               timeout=300)
    lines = r.stdout.decode().splitlines()
    check(len(lines) == n, f"{codec}: {len(lines)} records consumed, {n} produced")
    by_part, got = {}, {}
    for ln in lines:
        p, o, k, v = ln.split("\t", 3)
        by_part.setdefault(int(p), []).append((int(o), v))
        got[v] = k
    want = dict((v, k) for k, v in recs)
    check(got == want, f"{codec}: the records consumed are not the records produced")
    for p, lst in by_part.items():
        offs = [o for o, _ in lst]
        check(offs == list(range(len(lst))), f"{codec}: partition {p} offsets not contiguous from 0")
        seq = [int(v.split(":", 1)[0]) for _, v in lst]
        check(seq == sorted(seq), f"{codec}: partition {p} out of production order")
    check(len(by_part) == 3, f"{codec}: {len(by_part)} partitions used, want 3")
    log(f"kcat {codec} ({topic}): {n} records produced and consumed back exactly once, in order, "
        f"{time.monotonic() - t0:.1f} s")


CONFLUENT = r'''
import sys
from confluent_kafka import Consumer, Producer
boot, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
errs = []
for i in range(n):
    p.produce(topic, key=str(i % 13), value=("v%06d" % i).encode(),
              on_delivery=lambda e, m: errs.append(e) if e else None)
    p.poll(0)
left = p.flush(60)
assert left == 0 and not errs, (left, errs[:3])
def consume(group, want):
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    import time
    deadline = time.time() + 60
    while len(got) < want and time.time() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        got.append(m.value().decode())
    c.commit(asynchronous=False)
    c.close()
    return got
first = consume("dpdk-group", n // 2)
assert len(first) >= n // 2, len(first)
rest = consume("dpdk-group", n - len(first))
allv = first + rest
assert len(allv) == n and len(set(allv)) == n, (len(allv), len(set(allv)))
print("confluent-kafka: %d records produced (idempotent, acks=all), consumed once by a group across a "
      "committed restart" % n)
'''


def confluent_roundtrip(ns, py):
    r = ns.run(py, "-c", CONFLUENT, BOOT, "dpdk-confluent", "20000", timeout=240)
    log(r.stdout.decode().strip())


MANY = r'''
import resource, socket, struct, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 64)), hard))
socks = [socket.create_connection((host, port), timeout=20) for _ in range(n)]
req = struct.pack(">hhih", 18, 0, 7, 4) + b"many"
for s in socks:
    s.sendall(struct.pack(">i", len(req)) + req)
ok = 0
for s in socks:
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    body = s.recv(size, socket.MSG_WAITALL)
    corr, err = struct.unpack(">ih", body[:6])
    ok += corr == 7 and err == 0
for s in socks:
    s.close()
print(ok)
'''


def lossy_roundtrip(ns):
    rules = [["INPUT", "-i"], ["OUTPUT", "-o"]]
    for chain, flag in rules:
        ns.run("iptables", "-A", chain, flag, ns.tap, "-m", "statistic", "--mode", "random", "--probability",
               "0.03", "-j", "DROP")
    try:
        kcat_roundtrip(ns, "lz4", n=20000, topic="dpdk-lossy")
    finally:
        for chain, flag in rules:
            ns.run("iptables", "-D", chain, flag, ns.tap, "-m", "statistic", "--mode", "random", "--probability",
                   "0.03", "-j", "DROP", check_rc=False)
    log("the same through 3% loss each way")


def counters(text):
    import re
    m = re.search(r"TCP: (\d+) segments in, (\d+) out, (\d+) retransmissions, (\d+) fast retransmissions, "
                  r"(\d+) SACK retransmissions, (\d+) duplicate ACKs, (\d+) out-of-order kept, (\d+) dropped", text)
    check(m is not None, "no TCP counters in the broker's last line")
    keys = ["segs_in", "segs_out", "retransmits", "fast_retransmits", "sack_retransmits", "dup_acks", "ooo_queued",
            "ooo_drops"]
    return dict(zip(keys, map(int, m.groups())))


def tso_frames(text):
    import re
    m = re.search(r"(\d+) bytes in (\d+) frames the port cut into segments \(TSO\)", text)
    check(m is not None, "no TSO counter in the broker's last lines")
    return int(m.group(1)), int(m.group(2))


def zero_copy_bytes(text):
    import re
    m = re.search(r"(\d+) bytes of cached log data sent by reference \(zero copy\)", text)
    check(m is not None, "no zero-copy counter in the broker's last lines")
    return int(m.group(1))


def chaos_run(ns, work):
    """A second broker (fresh data) with the receive-path hook on, one round trip."""
    d = os.path.join(work, "chaos")
    os.makedirs(d)
    b = DpdkBroker(ns, d, env={"SLUICE_DPDK_RX_CHAOS": "7:30:20:20"},
                   extra="sluice.dpdk.tcp.retries=3\nsluice.dpdk.checksum.offload=false\n"
                         "sluice.dpdk.rx.interrupts=false\nsluice.dpdk.zero.copy=false\nlog.level=DEBUG\n")
    try:
        b.start()
        check("checksums: sent in software, received in software; idle cores nap 1 ms at a time" in b.text(),
              "sluice.dpdk.checksum.offload=false and sluice.dpdk.rx.interrupts=false were not taken")
        check("cached log bytes sent as copies (sluice.dpdk.zero.copy=false)" in b.text(),
              "sluice.dpdk.zero.copy=false was not taken")
        link_up(ns)
        kcat_roundtrip(ns, "lz4", n=20000, topic="dpdk-chaos")
        vanishing_peers(ns, b)
        many_connections(ns, 50)
        rc = b.stop()
        check(rc == 0, f"the broker exited {rc} after SIGTERM")
    except lib.TestFailure:
        log(f"--- the chaos broker's output ---\n{b.text()[-3000:]}---")
        raise
    finally:
        if b.alive():
            b.stop(signal.SIGKILL, 10)
    import re
    text = b.text()
    m = re.search(r"(\d+) frames reordered, (\d+) duplicated, (\d+) corrupted", text)
    check(m and all(int(x) > 0 for x in m.groups()), f"the hook did nothing: {m and m.groups()}")
    dropped = re.search(r"frames in \((\d+) dropped\)", text)
    c = counters(text)
    check(zero_copy_bytes(text) == 0, "bytes sent by reference with sluice.dpdk.zero.copy=false")
    check(tso_frames(text)[1] == 0, "frames cut by the port with sluice.dpdk.checksum.offload=false (TSO needs it)")
    check(dropped and int(dropped.group(1)) > 0, "no corrupted frame was dropped")
    check(c["ooo_queued"] > 0 or c["dup_acks"] > 0, f"no reordering seen by TCP: {c}")
    log(f"the same through reordering, duplication and corruption: hook {m.groups()}, frames dropped "
        f"{dropped.group(1)}, TCP {c}")
    ends = re.search(r"connections ended: (\d+) orderly, (\d+) reset by the peer, (\d+) timed out", text)
    check(ends and int(ends.group(3)) >= VANISH_N, f"connections timed out: {ends and ends.groups()}, want >= "
          f"{VANISH_N}")
    log(f"vanished peers: {ends.group(3)} connections dropped after their retransmissions ran out "
        f"({ends.group(1)} orderly, {ends.group(2)} reset)")


def core_ends(text):
    """Each network core's connections ended, from its stop line: {core: orderly}."""
    import re
    return {int(c): int(o) for c, o in re.findall(r"network core (\d+): DPDK: connections ended: (\d+) orderly", text)}


def cpus_for_lcores():
    """--lcores mapping the main lcore and two network lcores onto this machine's CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    a, b = cpus[0], cpus[1 % len(cpus)]
    return f"--lcores=0@{a},1@{a},2@{b}"


def two_cores(ns, b, label, banner, setup, codec, topic):
    """One two-core broker: started (its log saying banner), the links set up, a
    kcat round trip and 200 connections, a clean stop; both cores served some."""
    try:
        b.start()
        check(banner in b.text(), f"{label}: the broker did not say '{banner}'")
        link_up(ns)
        setup()
        check_ping(ns)
        kcat_roundtrip(ns, codec, n=20000, topic=topic)
        many_connections(ns, 200)
        rc = b.stop()
        check(rc == 0, f"the broker exited {rc} after SIGTERM")
    except lib.TestFailure:
        log(f"--- {label}: the broker's output ---\n{b.text()[-3000:]}---")
        raise
    finally:
        if b.alive():
            b.stop(signal.SIGKILL, 10)
    ends = core_ends(b.text())
    check(len(ends) == 2 and all(v > 0 for v in ends.values()), f"{label}: connections per core {ends}, want both > 0")
    log(f"{label}: connections ended orderly per network core {ends}")


def multicore_run(ns, work):
    """Two network cores (lcores 1 and 2). First one TAP port with two queue pairs:
    the port is configured for RSS and the kernel's tun driver steers each flow to
    one queue, so this is the path a real NIC's RSS takes. Then each core its own
    TAP port (one address on both), the kernel spreading connections over the two
    by a multipath route hashed on ports. Each run: a kcat round trip and 200
    connections, and both cores must have served connections. Then the start-up
    refusals: an lcore the EAL does not have, a port it did not find, a listener
    that is not the broker's."""
    d = os.path.join(work, "rss")
    os.makedirs(d)
    two_cores(ns, DpdkBroker(ns, d, lcores=cpus_for_lcores()), "one port, two queues (RSS)",
              "2 network core(s) on lcores 1,2, 1 port(s), queues spread by RSS", lambda: None, "zstd", "dpdk-rss")

    d = os.path.join(work, "ports")
    os.makedirs(d)
    tap2 = ns.tap + "b"
    devices = f"--vdev=net_tap0,iface={ns.tap} --vdev=net_tap1,iface={tap2}"

    def second_tap():
        deadline = time.monotonic() + 20
        while ns.run("ip", "link", "show", tap2, check_rc=False).returncode != 0:
            check(time.monotonic() < deadline, f"no TAP {tap2} after 20 s")
            time.sleep(0.1)
        ns.run("ip", "addr", "add", "198.18.1.1/24", "dev", tap2)
        ns.run("ip", "link", "set", tap2, "up")
        ns.run("sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1", "net.ipv4.conf.all.rp_filter=0",
               f"net.ipv4.conf.{ns.tap}.rp_filter=0", f"net.ipv4.conf.{tap2}.rp_filter=0")
        ns.run("ip", "route", "replace", f"{BROKER_IP}/32", "nexthop", "dev", ns.tap, "nexthop", "dev", tap2)

    two_cores(ns, DpdkBroker(ns, d, devices=devices, lcores=cpus_for_lcores(),
                             extra="sluice.dpdk.port=0,1\nsluice.dpdk.lcores=1,2\n"),
              "a port per core", "2 network core(s) on lcores 1,2, 2 port(s)", second_tap, "snappy", "dpdk-ports")

    for name, extra, devices, want in [
            ("lcore", "sluice.dpdk.lcores=1,5\n", None, "sluice.dpdk.lcores: lcore 5 is not one of the EAL's"),
            ("port", "sluice.dpdk.port=0,1\n", None, "sluice.dpdk.port: no DPDK port 1"),
            ("ports", "sluice.dpdk.port=0,1\nsluice.dpdk.lcores=1\n", devices,
             "sluice.dpdk.port: 2 ports for 1 network cores"),
            ("listener", "sluice.dpdk.listener=EXTERNAL\n", None, "sluice.dpdk.listener: 'EXTERNAL' is not")]:
        d = os.path.join(work, f"refused-{name}")
        os.makedirs(d)
        DpdkBroker(ns, d, devices=devices, lcores=cpus_for_lcores(), extra=extra).start_fails(want)


VANISH_N = 50
VANISH = r'''
import os, socket, struct, subprocess, sys, time
host, port, n, tap, done = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
socks = [socket.create_connection((host, port), timeout=10) for _ in range(n)]
rule = ["iptables", "-I", "INPUT", "-i", tap, "-j", "DROP"]
subprocess.run(rule, check=True)
try:
    req = struct.pack(">hhih", 18, 0, 9, 4) + b"gone"
    for s in socks:
        s.sendall(struct.pack(">i", len(req)) + req)
    print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
    # The broker's answers vanish until the test has seen every connection time out.
    deadline = time.monotonic() + 90
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.1)
finally:
    rule[1] = "-D"
    subprocess.run(rule, check=True)
for s in socks:
    s.close()
'''


def vanishing_peers(ns, broker):
    """VANISH_N connections whose answers vanish; waits (at most 90 s) until the
    broker's log (DEBUG) says each timed out: 3 retransmissions from a 200 ms RTO
    take about 3 s, but the RTO starts at three handshake RTTs, which a loaded
    machine stretches."""
    import re
    done = os.path.join(broker.dir, "vanish.done")
    p = subprocess.Popen(["ip", "netns", "exec", ns.name, sys.executable, "-c", VANISH, BROKER_IP, str(PORT),
                          str(VANISH_N), ns.tap, done], stdout=subprocess.PIPE, text=True)
    try:
        ports = set(p.stdout.readline().split())
        check(len(ports) == VANISH_N, f"the vanishing clients said {ports}")
        t0 = time.monotonic()
        while time.monotonic() < t0 + 90:
            ended = set(re.findall(r"connection from port (\d+) ended \(([a-z -]+)\)", broker.text()))
            if all((q, TIMEOUT_REASON) in ended for q in ports):
                break
            time.sleep(0.2)
        log(f"vanished peers: all {VANISH_N} timed out after {time.monotonic() - t0:.1f} s" if
            all((q, TIMEOUT_REASON) in ended for q in ports) else "vanished peers: not all timed out in 90 s")
    finally:
        open(done, "w").close()
        p.wait(30)


TIMEOUT_REASON = "retransmissions exhausted"  # SLUICE_TCP_END_TIMEOUT in the broker's DEBUG line


BAD = r'''
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
cases = {
    "a negative frame size": struct.pack(">i", -5),
    "a frame past socket.request.max.bytes": struct.pack(">i", 200 << 20) + b"x" * 100,
    "a header cut short": struct.pack(">i", 3) + b"abc",
    "an unknown API key": struct.pack(">i", 10) + struct.pack(">hhih", 9999, 0, 1, 0),
}
for name, data in cases.items():
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(data)
    try:
        got = s.recv(4096)
    except ConnectionResetError:
        got = b"(reset)"
    print("%s: %s" % (name, "closed" if got in (b"", b"(reset)") else "answered %d bytes" % len(got)))
    s.close()
'''


def bad_frames(ns, b):
    """Malformed frames over DPDK: the network core closes each connection from
    inside the stack's delivery (an abort within the TCP machine's own callback);
    the broker lives on and answers the next client."""
    r = ns.run(sys.executable, "-c", BAD, BROKER_IP, str(PORT), timeout=60)
    for line in r.stdout.decode().strip().splitlines():
        log(f"bad input over DPDK, {line}")
    check(b.alive(), "the broker died on bad input")
    many_connections(ns, 5)


LIMIT = r'''
import socket, struct, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
req = struct.pack(">hhih", 18, 0, 7, 4) + b"many"
socks, answered, refused = [], 0, 0
for _ in range(n):
    try:
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(struct.pack(">i", len(req)) + req)
        socks.append(s)
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
        refused += 1  # the reset came before connect returned or the request went
for s in socks:
    try:
        head = s.recv(4, socket.MSG_WAITALL)
    except (ConnectionResetError, socket.timeout):
        head = b""
    if len(head) == 4:
        s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        answered += 1
    else:
        refused += 1
for s in socks:
    s.close()
print(answered, refused)
'''


FLOOD = r'''
import random, socket, struct, sys
dst, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
d = socket.inet_aton(dst)
rnd = random.Random(5)
for i in range(n):
    src = socket.inet_aton("198.18.0.%d" % (100 + i % 150))  # nobody: the SYN-ACKs go unanswered
    tcp = struct.pack("!HHIIBBHHH", 20000 + i, port, rnd.getrandbits(32), 0, 5 << 4, 0x02, 64240, 0, 0)
    tcp = tcp[:16] + struct.pack("!H", csum(src + d + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), i & 0xffff, 0x4000, 64, 6, 0, src, d)
    raw.sendto(ip + tcp, (dst, 0))
print(n)
'''
FLOOD_N = 8000


def syn_flood(ns, b):
    """8,000 SYNs from spoofed addresses on the link that never answer: at most
    sluice.dpdk.syn.backlog (1,024) stay half-open, the oldest dropped for each
    newer SYN, so the connection table (4,096) never fills and real clients
    connect during and after."""
    ns.run(sys.executable, "-c", FLOOD, BROKER_IP, str(PORT), str(FLOOD_N), timeout=60)
    many_connections(ns, 50)
    log(f"SYN flood of {FLOOD_N} from addresses that never answer: real clients still served")


def connection_limit(ns, work):
    """A SYN flood first (syn_flood), then max.connections=50 over DPDK: the network
    core refuses the connections past it from inside the stack's established
    callback (an abort within the TCP machine's own upcall); those get a reset, the
    first fifty their answers, and the broker serves new connections once they
    close."""
    d = os.path.join(work, "limit")
    os.makedirs(d)
    b = DpdkBroker(ns, d, extra="max.connections=50\n")
    try:
        b.start()
        link_up(ns)
        syn_flood(ns, b)
        r = ns.run(sys.executable, "-c", LIMIT, BROKER_IP, str(PORT), "60", timeout=60)
        answered, refused = map(int, r.stdout.decode().split())
        check(answered == 50 and refused == 10, f"max.connections=50: {answered} answered, {refused} refused")
        check(b.alive(), "the broker died refusing connections")
        many_connections(ns, 50)
        rc = b.stop()
        check(rc == 0, f"the broker exited {rc} after SIGTERM")
    except lib.TestFailure:
        log(f"--- the limited broker's output ---\n{b.text()[-3000:]}---")
        raise
    finally:
        if b.alive():
            b.stop(signal.SIGKILL, 10)
    import re
    m = re.search(r"(\d+) connections refused, (\d+) half-open dropped for newer SYNs", b.text())
    check(m and int(m.group(1)) >= 10, f"connections refused: {m and m.group(1)}")
    # Some of the flood's frames are lost in the TAP's queues before the stack sees them.
    check(int(m.group(2)) >= 2000, f"half-open connections dropped for newer SYNs: {m.group(2)}, want >= 2000")
    log(f"max.connections=50 over DPDK: 50 answered, 10 refused with a reset ({m.group(1)} counted), "
        f"the broker serving after; {m.group(2)} half-open connections dropped for newer SYNs")


def many_connections(ns, n=1000):
    r = ns.run(sys.executable, "-c", MANY, BROKER_IP, str(PORT), str(n), timeout=120)
    ok = int(r.stdout.decode().strip() or 0)
    check(ok == n, f"{ok} of {n} concurrent connections answered ApiVersions")
    log(f"{n} connections open at once over DPDK, each answered ApiVersions, then closed")


def main():
    if os.geteuid() != 0:
        skip("needs root: a network namespace and a TAP device")
    if not shutil.which("kcat"):
        skip("kcat is missing")
    py = clients.venv_python()
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="sluice-dpdk-")
    ok = False
    with Netns() as ns:
        b = DpdkBroker(ns, work)
        try:
            b.start()
            check("checksums: sent by the NIC, received checked by the NIC" in b.text(),
                  "net_tap offers checksum offloads, but the broker did not take them")
            check("segments cut by the NIC (TSO)" in b.text(),
                  "net_tap offers TCP segmentation offload, but the broker did not take it")
            check("cached log bytes sent by reference (zero copy)" in b.text(),
                  "net_tap chains mbufs, but the broker does not send cached log bytes by reference")
            check("idle cores sleep until a frame arrives (Rx interrupts)" in b.text(),
                  "net_tap offers Rx interrupts, but the broker did not take them")
            check_signal_steering(b)
            link_up(ns)
            check_ping(ns)
            mac_change(ns)
            for codec in CODECS:
                kcat_roundtrip(ns, codec)
            confluent_roundtrip(ns, py)
            lossy_roundtrip(ns)
            bad_frames(ns, b)
            many_connections(ns)
            check(b.alive(), "the broker died")
            rc = b.stop()
            check(rc == 0, f"the broker exited {rc} after SIGTERM")
            c = counters(b.text())
            log(f"the stack's counters: {c}")
            tso = tso_frames(b.text())
            check(tso[1] > 0, "no frame was cut by the port although net_tap offers TCP segmentation offload")
            log(f"segmentation offload: {tso[0]} bytes went in {tso[1]} frames the port cut into segments")
            zc = zero_copy_bytes(b.text())
            check(zc > 0, "no cached log byte was sent by reference although sluice.dpdk.zero.copy is on and "
                  "every round trip consumed through the stack")
            log(f"zero copy: {zc} bytes of the consumers' fetch responses went out of the cache extents by reference")
            check(c["retransmits"] + c["fast_retransmits"] + c["sack_retransmits"] > 0,
                  "no retransmission although 3% of its frames were lost")
            check(c["dup_acks"] + c["ooo_queued"] + c["ooo_drops"] > 0,
                  "no duplicate ACK nor out-of-order segment although 3% of the kernel's frames were lost")
            chaos_run(ns, work)
            connection_limit(ns, work)
            multicore_run(ns, work)
            ok = True
        except lib.TestFailure:
            log(f"--- the broker's output ---\n{b.text()[-3000:]}---")
            raise
        finally:
            if b.alive():
                b.stop(signal.SIGKILL, 10)
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"kept {work}")
    log(f"PASS ({time.monotonic() - t0:.1f}s, target sluice)")


if __name__ == "__main__":
    try:
        main()
    except lib.TestFailure as e:
        log(f"FAIL: {e}")
        sys.exit(1)
