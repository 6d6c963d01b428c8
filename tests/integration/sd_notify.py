#!/usr/bin/env python3
"""Readiness for systemd's Type=notify units, seen from the service manager's side.

The test plays systemd: it binds the datagram socket that NOTIFY_SOCKET names and starts
the real binaries with it set, as sluice-broker.service and sluice-controller.service
run them. It proves:
- a single-node broker (loopback, fresh data directory, admin listener) sends READY=1
  only once it serves: at the moment the datagram arrives an ApiVersions round trip
  succeeds and GET /ready answers 200; STATUS= lines come before it; SIGTERM brings
  STOPPING=1 before the process exits 0, and nothing after it says READY=1;
- a cluster-mode broker whose controllers never answer says STATUS= that it waits for
  them and never READY=1, and exits non-zero at sluice.controller.wait.ms;
- a one-voter controller, on a socket in the abstract namespace ('@name'), sends READY=1
  when its listener answers ApiVersions, a STATUS= naming itself the active controller,
  and STOPPING=1 at SIGTERM before exiting 0;
- a NOTIFY_SOCKET nobody listens on does not stop a controller: it serves, logs the
  failure once, and stops cleanly.
Sluice only (Kafka has no sd_notify). ~10 s.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

WAIT_S = 60  # bound on any one wait for a datagram (loaded 2-core CI)


def controller_path():
    p = os.environ.get("SLUICE_CONTROLLER") or os.path.join(lib.ROOT, "build", "control", "sluice-controller")
    check(os.path.isfile(p) and os.access(p, os.X_OK), f"sluice-controller not found at {p}")
    return p


def broker_exe():
    p = lib.broker_path()
    check(p is not None, "sluice-broker not built (SLUICE_BROKER)")
    return p


class Notify:
    """The service manager's end: a bound AF_UNIX datagram socket."""

    def __init__(self, tmp, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"sluice-it-notify-{os.getpid()}-{time.monotonic_ns()}"
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            self.env = os.path.join(tmp, "notify.sock")
            self.sock.bind(self.env)
        self.sock.settimeout(0.2)
        self.seen = []  # every datagram, in order

    def next(self, proc, what, timeout=WAIT_S):
        """The next datagram as a list of VAR=value lines; fails if proc exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                if proc.poll() is not None:
                    # A datagram sent just before the exit is still queued: one more look.
                    try:
                        data = self.sock.recv(4096)
                    except (socket.timeout, BlockingIOError):
                        raise lib.TestFailure(f"{what}: the process exited ({proc.returncode}) first")
                else:
                    continue
            lines = data.decode().split("\n")
            self.seen.append(lines)
            log(f"  notify: {lines}")
            return lines
        raise lib.TestFailure(f"{what}: nothing within {timeout}s")

    def until(self, proc, var, what):
        """Datagrams up to the one holding var (e.g. READY=1); returns those before it."""
        before = []
        while True:
            lines = self.next(proc, what)
            if var in lines:
                return before
            before.append(lines)

    def close(self):
        self.sock.close()


def start(cmd, logpath, notify_env):
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    if notify_env is not None:
        env["NOTIFY_SOCKET"] = notify_env
    with open(logpath, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def api_versions_once(port):
    """One ApiVersions round trip on a fresh connection, no retry."""
    with lib.Conn(port, timeout=5) as c:
        keys = c.api_versions()
    check(18 in keys, f"ApiVersions on {port} does not list ApiVersions itself")


def http_ready(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/ready")
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def tail(path, n=30):
    with open(path, "rb") as f:
        return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])


def stopping_then_exit(n, proc, what):
    """SIGTERM: STOPPING=1 arrives, the process exits 0, no READY=1 after STOPPING."""
    proc.send_signal(signal.SIGTERM)
    n.until(proc, "STOPPING=1", f"{what}: STOPPING=1 after SIGTERM")
    rc = proc.wait(60)
    check(rc == 0, f"{what}: exit {rc} after SIGTERM (want 0)")
    late = []
    while True:
        try:
            late.append(n.sock.recv(4096).decode().split("\n"))
        except (socket.timeout, BlockingIOError):
            break
    check(not any("READY=1" in d for d in late), f"{what}: READY=1 after STOPPING=1: {late}")
    log(f"{what}: STOPPING=1 at SIGTERM, then exit 0")


def broker_single(tmp):
    port, admin = lib.free_port(), lib.free_port()
    cfg = os.path.join(tmp, "server.properties")
    with open(cfg, "w") as f:
        f.write(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={os.path.join(tmp, 'data')}\n"
                f"sluice.admin.listener=127.0.0.1:{admin}\n")
    n = Notify(tmp)
    logpath = os.path.join(tmp, "broker.log")
    proc = start([broker_exe(), cfg], logpath, n.env)
    try:
        before = n.until(proc, "READY=1", "broker: READY=1")
        # Right now, with no retry: the broker must already serve.
        api_versions_once(port)
        status, body = http_ready(admin)
        check(status == 200, f"broker: GET /ready answers {status} {body!r} when READY=1 arrives")
        check(any(line.startswith("STATUS=") for d in before for line in d),
              f"broker: no STATUS= before READY=1: {before}")
        ready = n.seen[-1]
        check(any(line.startswith("STATUS=serving on 127.0.0.1:") for line in ready),
              f"broker: READY=1 without a STATUS=serving line: {ready}")
        log("broker: READY=1 once serving (ApiVersions and /ready 200 at once)")
        stopping_then_exit(n, proc, "broker")
    except lib.TestFailure:
        log(f"broker log:\n{tail(logpath)}")
        raise
    finally:
        stop(proc)
        n.close()


def broker_waiting(tmp):
    """Cluster mode, no controller: waits (STATUS=), never READY=1, gives up."""
    cfg = os.path.join(tmp, "waiting.properties")
    with open(cfg, "w") as f:
        f.write(f"node.id=7\nprocess.roles=broker\ncluster.id=sd-notify-test\n"
                f"controller.quorum.voters=1001@127.0.0.1:{lib.free_port()}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{lib.free_port()}\n"
                f"log.dirs={os.path.join(tmp, 'waiting')}\nsluice.controller.wait.ms=3000\n")
    sub = os.path.join(tmp, "w")
    os.makedirs(sub)
    n = Notify(sub)
    logpath = os.path.join(tmp, "waiting.log")
    proc = start([broker_exe(), cfg], logpath, n.env)
    try:
        rc = proc.wait(60)
        msgs = []
        while True:
            try:
                msgs.append(n.sock.recv(4096).decode().split("\n"))
            except (socket.timeout, BlockingIOError):
                break
        log(f"  notify: {msgs}")
        check(rc != 0, f"waiting broker: exit {rc} with no controller (want non-zero)")
        check(not any("READY=1" in d for d in msgs), f"waiting broker: READY=1 sent: {msgs}")
        check(any(line.startswith("STATUS=waiting") and "controllers" in line for d in msgs for line in d),
              f"waiting broker: no STATUS= saying it waits for the controllers: {msgs}")
        log(f"cluster-mode broker with no controller: STATUS=waiting..., no READY=1, exit {rc}")
    except lib.TestFailure:
        log(f"waiting broker log:\n{tail(logpath)}")
        raise
    finally:
        stop(proc)
        n.close()


def controller_props(tmp, port):
    cfg = os.path.join(tmp, "controller.properties")
    with open(cfg, "w") as f:
        f.write(f"process.roles=controller\nnode.id=1001\ncontroller.quorum.voters=1001@127.0.0.1:{port}\n"
                f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
                f"metadata.log.dir={os.path.join(tmp, 'metadata')}\ncluster.id=sd-notify-test\n"
                f"controller.quorum.election.timeout.ms=1000\n")
    return cfg


def controller_port():
    """A free port whose next one (the controller's Raft port) is free too."""
    return lib.free_port_pair()


def controller(tmp):
    port = controller_port()
    sub = os.path.join(tmp, "c")
    os.makedirs(sub)
    cfg = controller_props(sub, port)
    n = Notify(sub, abstract=True)
    logpath = os.path.join(sub, "controller.log")
    proc = start([controller_path(), cfg], logpath, n.env)
    try:
        n.until(proc, "READY=1", "controller: READY=1")
        api_versions_once(port)
        log(f"controller: READY=1 on {n.env} once its listener answers ApiVersions")
        deadline = time.monotonic() + WAIT_S
        while not any(line.startswith("STATUS=") and "this node (1001) is the active controller" in line
                      for d in n.seen for line in d):
            check(time.monotonic() < deadline, f"controller: no STATUS= naming it active: {n.seen}")
            n.next(proc, "controller: STATUS= of the election", timeout=deadline - time.monotonic())
        log("controller: STATUS= names it the active controller")
        stopping_then_exit(n, proc, "controller")
    except lib.TestFailure:
        log(f"controller log:\n{tail(logpath)}")
        raise
    finally:
        stop(proc)
        n.close()


def controller_dead_socket(tmp):
    port = controller_port()
    sub = os.path.join(tmp, "dead")
    os.makedirs(sub)
    cfg = controller_props(sub, port)
    logpath = os.path.join(sub, "controller.log")
    proc = start([controller_path(), cfg], logpath, os.path.join(sub, "nobody-listens", "notify.sock"))
    try:
        check(lib.wait_port(port, WAIT_S, proc_alive=lambda: proc.poll() is None),
              "controller with a dead NOTIFY_SOCKET: never listened")
        api_versions_once(port)
        time.sleep(1.5)  # an election, and its STATUS= attempt
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        check(rc == 0, f"controller with a dead NOTIFY_SOCKET: exit {rc} after SIGTERM")
        with open(logpath) as f:
            warned = [line for line in f if "cannot notify the service manager" in line]
        check(len(warned) == 1, f"controller with a dead NOTIFY_SOCKET: {len(warned)} warnings (want 1): {warned}")
        log(f"controller with a dead NOTIFY_SOCKET: served, one warning ({warned[0].strip()[:120]}...), exit 0")
    except lib.TestFailure:
        log(f"controller log:\n{tail(logpath)}")
        raise
    finally:
        stop(proc)


def test():
    if lib.TARGET != "sluice":
        lib.skip("sd_notify readiness is Sluice's")
    keep = os.environ.get("SLUICE_TEST_KEEP")
    tmp = tempfile.mkdtemp(prefix="sluice-it-sd-notify-")
    try:
        broker_single(tmp)
        broker_waiting(tmp)
        controller(tmp)
        controller_dead_socket(tmp)
    finally:
        if not keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    lib.main(test)
