#!/usr/bin/env python3
"""The dpdk transport kernel-free (issue 14): the broker with sluice.transport=dpdk on
a net_memif port (shared-memory frames over a UNIX socket: no NIC, no TAP, no system
call per frame), and on the other side perf/memif-load, a Kafka producer on DPDK and
Sluice's own TCP/IP stack (active open: the stack's client side, which no other test
runs over a real port). The short form of perf/dpdk-memif.sh. Proves:

- 4 connections with 8 single-record Produce requests outstanding each for 3 s: every
  request answered in order, none with an error, no connection lost;
- a second run (1 connection, 1 outstanding) on the same broker: the memif peer comes
  back, the broker served it, and counted the first run's connections as reset by
  their peer (every connection's resources released);
- every acknowledged record is in the log exactly once and in order: each value starts
  with its connection and number and the generator computes each batch's CRC-32C again;
  the broker is restarted on the same log.dirs with the io_uring transport on loopback
  and kcat reads both topics back: per connection the numbers 0, 1, 2, ... without gap
  or repeat, at least as many as were acknowledged and at most as many as were sent;
- a clean SIGTERM stop of the DPDK broker.

Needs a broker and memif-load built with DPDK (libdpdk-dev); without them it exits 77,
which the test command counts as a failure. Addresses 198.18.9.1 and .2 exist only on
the memif link between the two processes; it kills only the processes it started, by
PID, and removes the EAL runtime directories it made.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

BROKER_IP, LOAD_IP = "198.18.9.2", "198.18.9.1"
PARTITIONS = 4


def skip(why):
    log(f"SKIP: {why}")
    sys.exit(77)


def eal(prefix, role, sock, mac, lcore):
    return (f"--no-huge --no-pci -m 128 --file-prefix={prefix} "
            f"--vdev=net_memif0,role={role},socket={sock},socket-abstract=no,mac={mac} -l {lcore} "
            f"--log-level=lib.eal:warning")


def test():
    load = os.environ.get("SLUICE_MEMIF_LOAD") or os.path.join(
        os.path.dirname(lib.broker_path() or ""), "..", "perf", "memif-load")
    if not os.path.exists(load):
        skip(f"perf/memif-load not built ({load}): needs libdpdk-dev")
    kcat = lib.kcat_path()
    b = lib.Broker("dpdk-memif", {"num.partitions": PARTITIONS})
    tag = f"sluice-memif-test-{os.getpid()}"
    prefixes = []
    procs = []
    sock = os.path.join(b.tmp, "memif.sock")
    try:
        props = os.path.join(b.tmp, "memif.properties")
        prefixes.append(f"{tag}-b")
        with open(props, "w") as f:
            f.write("\n".join([
                "node.id=1", f"listeners=PLAINTEXT://{BROKER_IP}:9092",
                f"advertised.listeners=PLAINTEXT://{BROKER_IP}:9092", f"log.dirs={b.datadir}",
                f"num.partitions={PARTITIONS}", "auto.create.topics.enable=true", "sluice.cpu.affinity=false",
                "sluice.transport=dpdk",
                "sluice.dpdk.eal.args=" + eal(prefixes[-1], "server", sock, "02:00:00:00:09:02", 0),
                f"sluice.dpdk.ipv4.address={BROKER_IP}/24"]) + "\n")
        blog = os.path.join(b.tmp, "memif-broker.log")
        with open(blog, "w") as lf:
            broker = subprocess.Popen([lib.broker_path(), props], stdout=lf, stderr=subprocess.STDOUT)
        procs.append(broker)

        def text():
            with open(blog, errors="replace") as f:
                return f.read()

        deadline = time.monotonic() + 30
        while "listening on" not in text():
            if "unknown transport 'dpdk'" in text():
                skip("this sluice-broker was built without DPDK (libdpdk-dev)")
            check(broker.poll() is None, f"the memif broker exited ({broker.returncode}):\n{text()[-2000:]}")
            check(time.monotonic() < deadline, f"the memif broker did not start in 30 s:\n{text()[-2000:]}")
            time.sleep(0.1)
        check("transport dpdk" in text() and "net_memif" in text(), "the broker runs dpdk on the memif port")

        runs = []
        for i, (conns, inflight, topic) in enumerate([(4, 8, "memif-a"), (1, 1, "memif-b")]):
            prefixes.append(f"{tag}-g{i}")
            cmd = [load, "--transport", "memif", "--address", LOAD_IP, "--broker", f"{BROKER_IP}:9092",
                   "--eal", eal(prefixes[-1], "client", sock, "02:00:00:00:09:01", 1),
                   "--connections", str(conns), "--inflight", str(inflight), "--partitions", str(PARTITIONS),
                   "--topic", topic, "--warmup", "1", "--duration", "3"]
            g = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(g)
            out, err = g.communicate(timeout=90)
            check(g.returncode == 0, f"memif-load run {i} failed ({g.returncode}):\n{err[-2000:]}\n{out}")
            r = json.loads(out.strip().splitlines()[-1])
            log(f"run {i}: {conns} x {inflight}: {r['requests_per_s']:.0f} requests/s, p50 {r['p50_us']:.0f} us, "
                f"{r['acked']} acknowledged of {r['sent']} sent, {r['retransmits']} retransmissions")
            check(r["failure"] is None and r["errors"] == 0 and r["warmup_errors"] == 0,
                  f"run {i}: every request answered without error: {out}")
            check(r["ok"] > 0 and r["acked"] > 0, f"run {i}: requests answered: {out}")
            runs.append((topic, conns, r))

        broker.send_signal(signal.SIGTERM)
        check(broker.wait(timeout=30) == 0, f"the memif broker stops cleanly:\n{text()[-2000:]}")
        t = text()
        check("5 reset by the peer" in t, f"the broker counted the generators' 5 connections reset:\n{t[-2500:]}")

        # Read back through the io_uring transport on the same log.dirs.
        b.start()
        for topic, conns, r in runs:
            p = subprocess.run([kcat, "-b", b.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"],
                               capture_output=True, text=True, timeout=120)
            check(p.returncode == 0, f"kcat reads {topic}: {p.stderr[-1000:]}")
            seqs = {}
            for line in p.stdout.splitlines():
                check(len(line) == 100 and line[0] == "c" and line[5] == "s" and line[16] == ".",
                      f"{topic}: a record as the generator wrote it: {line[:40]!r}")
                seqs.setdefault(int(line[1:5]), []).append(int(line[6:16]))
            total = 0
            for c in range(conns):
                got = seqs.get(c, [])
                check(got == list(range(len(got))), f"{topic}: connection {c}'s records once, in order, no gap "
                      f"({len(got)} records; first wrong at {next((k for k, v in enumerate(got) if v != k), -1)})")
                total += len(got)
            check(set(seqs) <= set(range(conns)), f"{topic}: only the generator's connections")
            check(r["acked"] <= total <= r["sent"],
                  f"{topic}: {total} records in the log, {r['acked']} acknowledged, {r['sent']} sent")
            log(f"{topic}: {total} records back, {r['acked']} acknowledged, {r['sent']} sent: once each, in order")
        b.stop()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for prefix in prefixes:
            shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
        b.cleanup()


if __name__ == "__main__":
    lib.main(test)
