#!/usr/bin/env python3
"""A restarted broker owns its port alone, and answers every connection it accepts.

Proves, over several rounds: a broker busy with pipelined Produce requests on
several connections is killed with SIGKILL and a new one is started on the same
port and data directory at once. The killed process's io_uring keeps its listening
socket open for some milliseconds after the process is gone; the new broker must
not listen beside it (watched in /proc/net/tcp: when the new broker's socket
appears it is the only one on the port). From that moment clients connect again
and again, during the new broker's recovery: every connection gets its ApiVersions
answered and reads the records written before the first kill (none is dropped for
arriving early, none handed to the dead listener). A kcat consumer started as soon
as the new broker listens reads them too. (A client that connects before the new
broker listens can still reach the dead process's socket and be reset: no broker
can answer that; clients retry.)
Then a second broker started on the port the first one serves fails within its
bind time-out, with a non-zero exit and a message that names host:port.
"""
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, frame, log, record_batch, request_header  # noqa: E402

TOPIC = "restart"
ROUNDS = int(os.environ.get("SLUICE_RESTART_ROUNDS", "6"))
RECORDS = 200
PROBE_S = 1.5      # how long clients keep connecting after each restart


class Busy(threading.Thread):
    """Pipelines Produce requests on a few connections until stopped."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop_ev = threading.Event()
        blob = record_batch([(None, b"b" * 1000, [])] * 4)  # a few MB per round: recovery stays short
        body = Enc().string(None).i16(1).i32(10000).array_len(1).string(TOPIC)
        body.array_len(1).i32(0).bytes_(blob)
        self.burst = frame(request_header(0, 3, 7) + body.done()) * 16

    def run(self):
        socks = []
        while not self.stop_ev.is_set():
            try:
                while len(socks) < 4:
                    socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=1))
                for s in socks:
                    s.sendall(self.burst)
                    s.recv(1 << 16)
                self.stop_ev.wait(0.002)
            except OSError:
                for s in socks:
                    s.close()
                socks = []
                self.stop_ev.wait(0.01)
        for s in socks:
            s.close()


def spawn(b):
    """Starts sluice-broker on b's port and data directory without waiting."""
    cfg = os.path.join(b.tmp, "server.properties")
    with open(cfg, "w") as f:
        f.write(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{b.port}\n"
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{b.port}\nlog.dirs={b.datadir}\n")
    cmd = [b.exe, cfg]
    for k, v in b.props.items():
        cmd += ["--override", f"{k}={v}"]
    out = open(b.logfile, "ab")
    b.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    out.close()
    b.pid = b.proc.pid
    if b not in lib._live_brokers:
        lib._live_brokers.append(b)


def port_listeners(port):
    """Inodes of the sockets in LISTEN state on port (IPv4 and IPv6)."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    p = line.split()
                    if p[3] == "0A" and int(p[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(p[9])
        except OSError:
            pass
    return inodes


def socket_inodes(pid):
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                out.add(t[8:-1])
    except OSError:
        pass
    return out


def wait_own_listener(b, timeout=15.0):
    """Waits until the new broker listens; fails if at that moment (or while
    watching) another socket, a dead broker's, listens on the port too."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ls = port_listeners(b.port)
        mine = ls & socket_inodes(b.pid)
        if mine:
            check(ls == mine, f"the new broker listens on {b.port} beside another socket "
                              f"(listeners {sorted(ls)}, its own {sorted(mine)})")
            return
        check(b.alive(), "the restarted broker exited")
        time.sleep(0.001)
    raise lib.TestFailure(f"the restarted broker did not listen on {b.port} within {timeout}s")


def early_clients(b, seconds):
    """From the moment the new broker listens, connects again and again;
    returns (answered, failures)."""
    wait_own_listener(b)
    answered, failures = 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            c = lib.Conn(b.port, timeout=10)
        except OSError as e:
            failures.append(f"connect: {e!r}")
            continue
        try:
            c.api_versions()
            err, hw, blob = c.fetch(TOPIC, 0, 0, max_wait_ms=0)
            n = sum(b_["count"] for b_ in lib.parse_batches(blob))
            if err or n == 0:
                failures.append(f"fetch: error {err}, high watermark {hw}, {n} records")
            answered += 1
        except (OSError, lib.ProtocolError) as e:
            failures.append(f"connection {answered + len(failures) + 1}: {e!r}")
        finally:
            c.close()
    return answered, failures


def test():
    if lib.TARGET != "sluice":
        lib.skip("restart timing test is for sluice-broker")
    kcat = lib.kcat_path(required=False)
    props = {"sluice.listener.bind.timeout.ms": 10000}
    b = lib.Broker("listener", props)
    failed = True
    try:
        b.start()
        with lib.Conn(b.port) as c:
            c.ensure_topic(TOPIC)
            for i in range(RECORDS // 20):
                err, _, _ = c.produce(TOPIC, 0, record_batch([(b"k", b"v%d" % i, [])] * 20))
                check(err == 0, f"produce error {err}")
        for rnd in range(ROUNDS):
            busy = Busy(b.port)
            busy.start()
            time.sleep(0.3)
            b.proc.kill()
            b.proc.wait()
            spawn(b)
            answered, failures = early_clients(b, PROBE_S)
            busy.stop_ev.set()
            busy.join()
            check(not failures, f"round {rnd + 1}: {len(failures)} early connection(s) failed "
                                f"({answered} answered): {failures[:5]}")
            check(answered > 0, f"round {rnd + 1}: no connection answered within {PROBE_S}s")
            if kcat and rnd == ROUNDS - 1:
                b.proc.kill()
                b.proc.wait()
                spawn(b)
                wait_own_listener(b)
                r = lib.run([kcat, "-b", b.bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-q",
                             "-c", str(RECORDS)], timeout=60)
                got = len(r.stdout.splitlines())
                check(r.returncode == 0 and got == RECORDS,
                      f"kcat right after a restart: exit {r.returncode}, {got} of {RECORDS} records: "
                      f"{r.stderr[-400:]}")
            log(f"round {rnd + 1}: {answered} connections answered right after kill -9 and restart")

        # A second broker on a port already served: a clear error, no silent sharing.
        b2 = lib.Broker("listener2", {"sluice.listener.bind.timeout.ms": 1000})
        try:
            cfg = os.path.join(b2.tmp, "server.properties")
            with open(cfg, "w") as f:
                f.write(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{b.port}\nlog.dirs={b2.datadir}\n")
            t0 = time.monotonic()
            r = lib.run([b2.exe, cfg, "--override", "sluice.listener.bind.timeout.ms=1000"], timeout=30)
            took = time.monotonic() - t0
            out = r.stdout + r.stderr
            check(r.returncode != 0, f"a second broker on port {b.port} started (exit {r.returncode})")
            check(f"127.0.0.1:{b.port}" in out and "in use" in out,
                  f"the second broker's error does not name 127.0.0.1:{b.port} in use: {out[-600:]}")
            check(took < 10, f"the second broker took {took:.1f}s to give up (bind time-out 1 s)")
            log(f"second broker on {b.port}: exit {r.returncode} after {took:.1f}s: "
                f"{[l for l in out.splitlines() if str(b.port) in l][-1]}")
        finally:
            b2.cleanup()
        with lib.Conn(b.port) as c:
            c.api_versions()
        b.stop()
        failed = False
    finally:
        b.cleanup(failed=failed)


if __name__ == "__main__":
    lib.main(test)
