#!/usr/bin/env python3
"""deploy/ansible against this machine (`-c local`), installing into temporary prefixes.

An inventory of one controller (ctl1) and one broker (brk1, rack-a, two data
directories), both this machine under their own prefix, goes through site.yml with the
`service` and `user` tags skipped (CI's PID 1 is not systemd; no user is created here).
Proves:
- the binaries and units land in each prefix; the properties files say what the
  inventory says (node ids, the quorum's voters from the controllers' group, listeners,
  rack, data directories, cluster id, extra properties); the units' drop-ins name the
  configuration, make the data directories writable and run the prefix's binaries;
- a second run changes nothing (changed=0 on both hosts);
- the installed binaries with the rendered files form a working cluster: the broker
  becomes ready (GET /ready 200) and `sluice cluster status` lists the controller as
  leader and the broker with its rack;
- rolling-restart.yml with `service` skipped runs its waits against that cluster and
  passes (quorum led and caught up, /ready, no partition offline or under-replicated).
Without ansible-playbook (Debian's ansible-core: tests/install-deps.sh) the test FAILS.
~20 s.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import http.client

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

ANSIBLE_DIR = os.path.join(lib.ROOT, "deploy", "ansible")


def playbook(tmp, inventory, book, *extra):
    exe = shutil.which("ansible-playbook")
    check(exe, "ansible-playbook not found: install Debian's ansible-core (tests/install-deps.sh)")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_LOCAL_TEMP=os.path.join(tmp, "ansible-local"),
               ANSIBLE_REMOTE_TEMP=os.path.join(tmp, "ansible-remote"),
               ANSIBLE_HOME=os.path.join(tmp, "ansible-home"), ANSIBLE_HOST_KEY_CHECKING="0")
    cmd = [exe, "-i", inventory, os.path.join(ANSIBLE_DIR, book), "-c", "local", "-e", "sluice_become=false",
           "--skip-tags", "service,user"] + list(extra)
    r = lib.run(cmd, timeout=600, env=env)
    if r.returncode != 0:
        log(f"ansible-playbook {book}:\n{r.stdout[-6000:]}\n{r.stderr[-2000:]}")
    check(r.returncode == 0, f"ansible-playbook {book}: exit {r.returncode}")
    recap = dict(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", r.stdout, re.M))
    return recap, r.stdout


def read(path):
    with open(path) as f:
        return f.read()


def props(path):
    out = {}
    for line in read(path).splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def http_ready(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/ready")
        return c.getresponse().status
    except OSError:
        return None
    finally:
        c.close()


def test():
    if lib.TARGET != "sluice":
        lib.skip("Sluice's Ansible role")
    build_root = os.environ.get("SLUICE_BUILD_ROOT") or os.path.join(lib.ROOT, "build")
    for p in ("dataplane/sluice-broker", "control/sluice-controller", "tools/sluice"):
        check(os.access(os.path.join(build_root, p), os.X_OK), f"not built: {build_root}/{p}")
    tmp = tempfile.mkdtemp(prefix="sluice-it-ansible-")
    procs = []
    try:
        cport = lib.free_port_pair()
        bport, admin = lib.free_port(avoid=(cport, cport + 1)), lib.free_port(avoid=(cport, cport + 1))
        ctl, brk = os.path.join(tmp, "ctl1"), os.path.join(tmp, "brk1")
        data = [os.path.join(brk, "disk1", "sluice"), os.path.join(brk, "disk2", "sluice")]
        inventory = os.path.join(tmp, "inventory.json")
        with open(inventory, "w") as f:
            json.dump({"all": {
                "vars": {"sluice_cluster_id": "ansible-test", "sluice_install": "files",
                         "sluice_build_dir": build_root, "sluice_owner": "", "ansible_connection": "local",
                         "ansible_python_interpreter": "/usr/bin/python3",
                         "sluice_broker_properties": {"num.partitions": 2, "offsets.topic.replication.factor": 1}},
                "children": {
                    "sluice_controllers": {"hosts": {"ctl1": {
                        "sluice_node_id": 1001, "sluice_prefix": ctl, "sluice_listen_host": "127.0.0.1",
                        "sluice_controller_port": cport,
                        "sluice_controller_properties": {"controller.quorum.election.timeout.ms": 1000}}}},
                    "sluice_brokers": {"hosts": {"brk1": {
                        "sluice_node_id": 1, "sluice_prefix": brk, "sluice_listen_host": "127.0.0.1",
                        "sluice_broker_port": bport, "sluice_admin_listener": f"127.0.0.1:{admin}",
                        "sluice_rack": "rack-a", "sluice_log_dirs": data}}}}}}, f, indent=1)

        recap, _ = playbook(tmp, inventory, "site.yml")
        check(set(recap) == {"ctl1", "brk1"}, f"PLAY RECAP hosts: {recap}")
        log(f"site.yml: changed {recap}")
        for prefix, names in ((ctl, ["sluice-controller", "sluice-broker", "sluice"]),
                              (brk, ["sluice-controller", "sluice-broker", "sluice"])):
            for n in names:
                check(os.access(os.path.join(prefix, "usr", "bin", n), os.X_OK), f"{prefix}/usr/bin/{n} not installed")
        check(os.path.isfile(os.path.join(ctl, "etc/systemd/system/sluice-controller.service")), "controller unit")
        check(os.path.isfile(os.path.join(brk, "etc/systemd/system/sluice-broker.service")), "broker unit")
        for d in data:
            check(os.path.isdir(d), f"data directory {d} not made")

        bp = props(os.path.join(brk, "etc/sluice/server.properties"))
        want = {"process.roles": "broker", "node.id": "1", "cluster.id": "ansible-test",
                "controller.quorum.voters": f"1001@127.0.0.1:{cport}",
                "listeners": f"PLAINTEXT://127.0.0.1:{bport}", "advertised.listeners": f"PLAINTEXT://127.0.0.1:{bport}",
                "log.dirs": ",".join(data), "broker.rack": "rack-a", "sluice.admin.listener": f"127.0.0.1:{admin}",
                "num.partitions": "2"}
        for k, v in want.items():
            check(bp.get(k) == v, f"server.properties: {k}={bp.get(k)} (want {v})")
        cp = props(os.path.join(ctl, "etc/sluice/controller.properties"))
        want = {"process.roles": "controller", "node.id": "1001", "cluster.id": "ansible-test",
                "controller.quorum.voters": f"1001@127.0.0.1:{cport}", "listeners": f"CONTROLLER://127.0.0.1:{cport}",
                "metadata.log.dir": os.path.join(ctl, "var/lib/sluice/controller/metadata"),
                "controller.quorum.election.timeout.ms": "1000"}
        for k, v in want.items():
            check(cp.get(k) == v, f"controller.properties: {k}={cp.get(k)} (want {v})")
        log("properties: node ids, voters, listeners, rack, data directories, cluster id, extras as inventoried")
        dropin = read(os.path.join(brk, "etc/systemd/system/sluice-broker.service.d/50-ansible.conf"))
        for line in (f"Environment=SLUICE_CONFIG={brk}/etc/sluice/server.properties",
                     f"ReadWritePaths={' '.join(data)}", "ExecStart=",
                     f"ExecStart={brk}/usr/bin/sluice-broker ${{SLUICE_CONFIG}} $SLUICE_BROKER_OPTS"):
            check(line in dropin.splitlines(), f"broker drop-in lacks '{line}':\n{dropin}")
        dropin = read(os.path.join(ctl, "etc/systemd/system/sluice-controller.service.d/50-ansible.conf"))
        check(f"ExecStart={ctl}/usr/bin/sluice-controller ${{SLUICE_CONTROLLER_CONFIG}} $SLUICE_CONTROLLER_OPTS"
              in dropin.splitlines(), f"controller drop-in:\n{dropin}")
        log("drop-ins: configuration path, ReadWritePaths of the data directories, the prefix's binaries")

        recap, out = playbook(tmp, inventory, "site.yml")
        check(recap == {"ctl1": "0", "brk1": "0"}, f"second run changed something: {recap}\n{out[-3000:]}")
        log("site.yml again: changed=0 on both hosts")

        # The cluster the rendered files describe, run as the drop-ins would run it.
        for exe, cfg, name in ((f"{ctl}/usr/bin/sluice-controller", f"{ctl}/etc/sluice/controller.properties", "ctl1"),
                               (f"{brk}/usr/bin/sluice-broker", f"{brk}/etc/sluice/server.properties", "brk1")):
            with open(os.path.join(tmp, f"{name}.log"), "ab") as out_f:
                procs.append(subprocess.Popen([exe, cfg], stdout=out_f, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + 90
        while http_ready(admin) != 200:
            check(all(p.poll() is None for p in procs), f"a node exited: {[p.poll() for p in procs]}\n"
                  f"{read(os.path.join(tmp, 'brk1.log'))[-2000:]}")
            check(time.monotonic() < deadline, "the broker never became ready")
            time.sleep(0.2)
        r = lib.run([f"{brk}/usr/bin/sluice", "--bootstrap-server", f"127.0.0.1:{bport}", "cluster", "status", "--json"],
                    timeout=30)
        check(r.returncode == 0, f"sluice cluster status: {r.returncode} {r.stderr}")
        st = json.loads(r.stdout)
        check([(c["id"], c["role"]) for c in st["controllers"]] == [(1001, "leader")], f"controllers: {st}")
        check([(b["id"], b["rack"], b["fenced"]) for b in st["brokers"]] == [(1, "rack-a", False)], f"brokers: {st}")
        log("installed cluster: /ready 200, controller 1001 leads, broker 1 in rack-a unfenced")

        recap, out = playbook(tmp, inventory, "rolling-restart.yml")
        check(set(recap) == {"ctl1", "brk1"}, f"rolling-restart.yml PLAY RECAP: {recap}")
        for task in ("Wait until the quorum has a leader", "Wait for the broker's /ready",
                     "Wait until no partition is offline or under-replicated"):
            check(re.search(rf"TASK \[sluice : {re.escape(task)}[^\]]*\][^\n]*\n(ok|changed): ", out),
                  f"rolling-restart.yml: '{task}' did not pass:\n{out[-4000:]}")
        log("rolling-restart.yml (service skipped): quorum, /ready and partition waits pass")

        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            check(p.wait(60) == 0, f"a node exited {p.returncode} on SIGTERM")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if not os.environ.get("SLUICE_TEST_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    lib.main(test)
