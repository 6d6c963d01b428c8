#!/usr/bin/env python3
"""The sluice-controller's admin listener (sluice.admin.listener): GET /metrics and GET /ready.

Proves, with 3 controllers each given its own admin port:
- /ready answers 200 on every controller once it serves, and 503 after SIGTERM
  until the process is gone;
- /metrics parses with Prometheus' own parser (prometheus_client) into unique series:
  the active controller shows sluice_controller_role{role="leader"} 1 (and 0 on the
  other roles) with a term > 0, the others role follower with the same term; the
  commit and applied indexes agree with no apply lag once idle;
- sluice_controller_brokers counts a registered (unfenced) broker, then the same
  broker as fenced once its heartbeats stop for a session timeout;
- sluice_controller_requests_total{api=...} counts the requests dispatched (a known
  number of DescribeCluster requests);
- an admin address that is busy, or not host:port, stops the start: exit 1 and
  stderr naming sluice.admin.listener; unset, no admin listener at all.
Sluice only. Ports 31400-31419 on 127.0.0.1 (each + 1 for Raft), admin ports free ones.
"""
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402
import controller_basic as cb  # noqa: E402
from metrics import http_get, scrape, val  # noqa: E402  (imports prometheus_client or fails)

SESSION_MS = 2000


def wait_ready(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status, _, body = http_get(port, "/ready")
            if status == 200:
                return body
        except OSError:
            pass
        time.sleep(0.05)
    raise lib.TestFailure(f"admin port {port}: /ready not 200 within {timeout}s")


def wait_metric(port, name, want, timeout=15.0, **labels):
    deadline = time.monotonic() + timeout
    while True:
        samples, _, _ = scrape(port)
        v = val(samples, name, **labels)
        if v == want:
            return samples
        check(time.monotonic() < deadline, f"admin port {port}: {name}{labels} is {v}, not {want}")
        time.sleep(0.1)


def roles(samples):
    on = [lbl for (n, lbls), v in samples.items() if n == "sluice_controller_role" and v == 1 for lbl in lbls]
    check(len(on) == 1, f"sluice_controller_role: {len(on)} roles at 1")
    return dict([on[0]])["role"]


def refused(root, extra, what):
    c = cb.Controller(os.path.join(root, what), 9, 31416, cb.voters_string([(9, 31416)]), extra=extra)
    r = lib.run([cb.controller_path(), c.props], timeout=20)
    check(r.returncode == 1 and "sluice.admin.listener" in r.stderr,
          f"{what}: exit {r.returncode}, stderr {r.stderr!r}")
    log(f"{what}: exit 1: {r.stderr.strip().splitlines()[-1]}")


def test_three(root):
    nodes = [(1, 31400), (2, 31402), (3, 31404)]
    voters = cb.voters_string(nodes)
    admin = {}
    for i, _ in nodes:
        admin[i] = lib.free_port(avoid=set(admin.values()))
    extra = {i: {"sluice.admin.listener": f"127.0.0.1:{admin[i]}", "broker.session.timeout.ms": str(SESSION_MS),
                 "broker.heartbeat.interval.ms": "500"} for i, _ in nodes}
    ctls = {i: cb.Controller(root, i, p, voters, 1000, extra[i]) for i, p in nodes}
    for c in ctls.values():
        c.start()
    for i in ctls:
        wait_ready(admin[i])
    log(f"/ready 200 on every controller (admin ports {sorted(admin.values())})")

    lport, view = cb.find_leader([p for _, p in nodes])
    leader = view["leader"]
    s = wait_metric(admin[leader], "sluice_controller_role", 1, role="leader")
    term = val(s, "sluice_controller_term")
    check(term > 0 and roles(s) == "leader", f"leader {leader}: term {term}, role {roles(s)}")
    check(val(s, "sluice_controller_leader_id") == leader, f"leader_id {val(s, 'sluice_controller_leader_id')}")
    check(val(s, "sluice_controller_ready") == 1, "sluice_controller_ready on the leader")
    for i in ctls:
        if i == leader:
            continue
        # a follower learns the term and the leader from the leader's first append
        wait_metric(admin[i], "sluice_controller_term", term)
        wait_metric(admin[i], "sluice_controller_leader_id", leader)
        fs = wait_metric(admin[i], "sluice_controller_role", 1, role="follower")
        check(roles(fs) == "follower", f"controller {i}: role {roles(fs)}")
    log(f"controller {leader}: role leader, term {term:.0f}; the others followers of the same term")

    broker = cb.FakeBroker(301, [p for _, p in nodes], 31419)
    broker.register(lport)
    broker.wait_unfenced(lport)
    broker.start_heartbeats()
    for i in ctls:
        s = wait_metric(admin[i], "sluice_controller_brokers", 1, state="registered")
        check(val(s, "sluice_controller_brokers", state="fenced") == 0, f"controller {i}: a fenced broker")
    log("every controller counts the broker as registered")
    broker.stop()
    s = wait_metric(admin[leader], "sluice_controller_brokers", 1, timeout=5 * SESSION_MS / 1000, state="fenced")
    check(val(s, "sluice_controller_brokers", state="registered") == 0, "the fenced broker still registered")
    log("its heartbeats stopped: counted as fenced")

    s = wait_metric(admin[leader], "sluice_controller_apply_lag", 0)
    commit, applied = val(s, "sluice_controller_commit_index"), val(s, "sluice_controller_applied_index")
    check(commit > 0 and applied == commit, f"commit {commit}, applied {applied}")
    check(val(s, "sluice_controller_metadata_offset") >= 0, "metadata offset")

    before = val(s, "sluice_controller_requests_total", api="DescribeCluster")
    for _ in range(5):
        with cb.Ctl(lport) as c:
            c.describe_cluster(2)
    s, _, _ = scrape(admin[leader])
    after = val(s, "sluice_controller_requests_total", api="DescribeCluster")
    check(after - before == 5, f"DescribeCluster requests: {before} -> {after}")
    check(("sluice_controller_requests_total", frozenset({("api", "BrokerHeartbeat")})) in s, "no BrokerHeartbeat")
    log(f"requests_total counts DescribeCluster ({before:.0f} -> {after:.0f})")

    # A busy admin port (one of the live controllers'), and a bad one.
    refused(root, {"sluice.admin.listener": f"127.0.0.1:{admin[leader]}"}, "busy")
    refused(root, {"sluice.admin.listener": "localhost"}, "no-port")
    refused(root, {"sluice.admin.listener": "127.0.0.1:70000"}, "bad-port")

    # SIGTERM: /ready says 503 while the controller goes (or the port is gone).
    follower = next(i for i in ctls if i != leader)
    c = ctls[follower]
    os.kill(c.proc.pid, signal.SIGTERM)
    # The signal reaches the loop a moment later: 200 until then, 503 from then
    # until the listener closes (a refused connection once the process is gone).
    seen = []
    while c.proc.poll() is None:
        try:
            status, _, _ = http_get(admin[follower], "/ready")
        except OSError:
            break
        check(status in (200, 503), f"/ready while stopping: {status}")
        check(not (seen and seen[-1] == 503 and status == 200), "/ready 200 again after 503")
        seen.append(status)
    log(f"/ready after SIGTERM: {' '.join(str(x) for x in sorted(set(seen)))} then gone")
    rc = c.proc.wait(15)
    check(rc == 0, f"controller {follower} exit {rc} after SIGTERM")
    cb._live.remove(c)
    for i in ctls:
        if i != follower:
            check(ctls[i].stop() == 0, f"controller {i}: SIGTERM exit")


def test_unset(root):
    """Without the key: no admin listener (nothing else listens than the controller's ports)."""
    port = 31410
    c = cb.Controller(os.path.join(root, "unset"), 1, port, cb.voters_string([(1, port)]))
    c.start()
    cb.find_leader([port])  # serving, its signal handlers installed
    with open(c.logpath) as f:
        text = f.read()
    check("admin listener" not in text, "an admin listener without sluice.admin.listener")
    check(c.stop() == 0, "SIGTERM exit")
    log("unset: no admin listener")


def main():
    root = tempfile.mkdtemp(prefix="sluice-ctl-metrics-")
    try:
        test_three(root)
        test_unset(root)
    finally:
        cb._cleanup()
        if os.environ.get("SLUICE_TEST_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            log(f"kept {root}")


if __name__ == "__main__":
    lib.main(main)
