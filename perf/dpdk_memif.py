#!/usr/bin/env python3
"""The kernel-free DPDK benchmark (issue 14): the same broker binary serving
single-record Produce requests through its dpdk transport over net_memif
(shared-memory frames: no system call per frame on either side) and through
its io_uring transport over loopback, driven by the same load generator
(perf/memif-load.c: Sluice's own TCP/IP stack over memif, or kernel sockets).

Per phase (connections x requests outstanding per connection) and transport:
requests/s, latency percentiles (the generator's), and the broker's CPU time
per request per thread (sluice-net0: the network core, sluice-store0: the
storage core, io_uring workers, the whole process), read from
/proc/PID/task/TID/schedstat (nanoseconds on CPU) at the edges of the
generator's measurement window. perf/dpdk-memif.sh builds and calls this;
docs/benchmarks.md explains the figures.

With --fetch BYTES it measures consumers instead: each partition is filled
first (the generator producing 1,000-byte records for --fill-seconds), then
the generator's connections send Fetch requests of up to BYTES from offset 0
again and again (the bytes stay in the storage core's cache), and the
figures are MB/s of record bytes and broker CPU per MB; transport dpdk-copy
is the dpdk transport with sluice.dpdk.zero.copy=false, the zero-copy
send's own measure.

Runs as any user (no namespace, no TAP: memif is a UNIX socket and shared
memory); cleans up what it started (brokers and generators by PID, their
data directories, the memif socket, the EAL runtime directories)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

BROKER_IP = "198.18.7.2"
LOAD_IP = "198.18.7.1"
BROKER_MAC = "02:00:00:00:07:02"
LOAD_MAC = "02:00:00:00:07:01"


def log(msg):
    print(f"dpdk-memif: {msg}", file=sys.stderr, flush=True)


def threads_cpu(pid):
    """ns on CPU per thread name (summed over threads of one name), and the process total."""
    out, total = {}, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if name.startswith("iou-wrk") or name.startswith("iou-sqp"):
            name = "io_uring workers"
        out[name] = out.get(name, 0) + ns
        total += ns
    out["process"] = total
    return out


def terminate(p, timeout):
    """SIGTERM, then SIGKILL after timeout s; whether it stopped by itself."""
    if p.poll() is not None:
        return True
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return False


class Bench:
    def __init__(self, a):
        self.a = a
        self.tag = f"sluice-memif-{os.getpid()}"
        self.work = os.path.join(a.workdir, self.tag)
        self.procs = []
        self.prefixes = []
        self.starts = 0

    def cleanup(self):
        for p in self.procs:
            terminate(p, 15)
        for prefix in self.prefixes:
            shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
            shutil.rmtree(os.path.expanduser(f"~/.local/share/dpdk/{prefix}"), ignore_errors=True)
            run = os.environ.get("XDG_RUNTIME_DIR")
            if run:
                shutil.rmtree(f"{run}/dpdk/{prefix}", ignore_errors=True)
        if not self.a.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def eal(self, who, role, sock, mac, lcore):
        self.starts += 1
        prefix = f"{self.tag}-{who}{self.starts}"
        self.prefixes.append(prefix)
        return (f"--no-huge --no-pci -m 256 --file-prefix={prefix} "
                f"--vdev=net_memif0,role={role},socket={sock},socket-abstract=no,mac={mac} -l {lcore} "
                f"--log-level=lib.eal:warning")

    def start_broker(self, transport, pdir, sock):
        data = os.path.join(pdir, "data")
        os.makedirs(data)
        dpdk = transport.startswith("dpdk")
        host = BROKER_IP if dpdk else "127.0.0.1"
        port = 9092 if dpdk else self.a.port
        lines = [f"listeners=PLAINTEXT://{host}:{port}", f"advertised.listeners=PLAINTEXT://{host}:{port}",
                 f"log.dirs={data}", f"num.partitions={self.a.partitions}", "auto.create.topics.enable=true",
                 "num.network.threads=1", "sluice.storage.threads=1", "sluice.cpu.affinity=false"]
        if dpdk:
            lines += ["sluice.transport=dpdk",
                      "sluice.dpdk.eal.args=" + self.eal("b", "server", sock, BROKER_MAC, self.a.broker_lcore),
                      f"sluice.dpdk.ipv4.address={BROKER_IP}/24",
                      f"sluice.dpdk.zero.copy={'false' if transport == 'dpdk-copy' else 'true'}"]
        props = os.path.join(pdir, "broker.properties")
        with open(props, "w") as f:
            f.write("\n".join(lines) + "\n")
        blog = os.path.join(pdir, "broker.log")
        with open(blog, "w") as lf:
            p = subprocess.Popen([self.a.broker, props], stdout=lf, stderr=subprocess.STDOUT, cwd=pdir)
        self.procs.append(p)
        deadline = time.monotonic() + 30
        want = f"transport {'dpdk' if dpdk else 'uring'}"
        while True:
            with open(blog, errors="replace") as f:
                text = f.read()
            if "unknown transport 'dpdk'" in text:
                raise RuntimeError("this sluice-broker was built without DPDK (install libdpdk-dev, reconfigure)")
            if p.poll() is not None:
                raise RuntimeError(f"the {transport} broker exited ({p.returncode}):\n{text[-2000:]}")
            if "listening on" in text and want in text:
                return p, blog
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {transport} broker did not come up in 30 s:\n{text[-2000:]}")
            time.sleep(0.1)

    def stop(self, p):
        if not terminate(p, 30):
            raise RuntimeError("the broker did not stop in 30 s (killed)")
        if p.returncode != 0:
            raise RuntimeError(f"the broker exited {p.returncode} when stopped")

    def load_cmd(self, transport, sock, conns, inflight, record_size, warmup, duration, extra=()):
        cmd = [self.a.load, "--connections", str(conns), "--inflight", str(inflight),
               "--partitions", str(self.a.partitions), "--record-size", str(record_size),
               "--warmup", str(warmup), "--duration", str(duration)] + list(extra)
        if transport.startswith("dpdk"):
            return cmd + ["--transport", "memif", "--address", LOAD_IP, "--broker", f"{BROKER_IP}:9092",
                          "--eal", self.eal("g", "client", sock, LOAD_MAC, self.a.load_lcore)]
        return ["taskset", "-c", str(self.a.load_lcore)] + cmd + [
            "--transport", "kernel", "--broker", f"127.0.0.1:{self.a.port}"]

    def run_one(self, transport, conns, inflight):
        name = f"{transport}-{conns}x{inflight}"
        pdir = os.path.join(self.work, name)
        os.makedirs(pdir)
        sock = os.path.join(pdir, "memif.sock")
        broker, blog = self.start_broker(transport, pdir, sock)
        if self.a.fetch:
            fill = self.load_cmd(transport, sock, self.a.partitions, 32, 1000, 0, self.a.fill_seconds)
            f = subprocess.run(fill, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            if f.returncode != 0:
                self.stop(broker)
                raise RuntimeError(f"{name}: filling the partitions failed ({f.returncode}):\n{f.stderr[-2000:]}")
            filled = json.loads(f.stdout.strip().splitlines()[-1])
            log(f"{name}: filled with {filled['acked']:,} records of 1,000 bytes")
            cmd = self.load_cmd(transport, sock, conns, inflight, self.a.record_size, self.a.warmup,
                                self.a.duration, ["--fetch", str(self.a.fetch)])
        else:
            cmd = self.load_cmd(transport, sock, conns, inflight, self.a.record_size, self.a.warmup,
                                self.a.duration)
        glog = os.path.join(pdir, "load.log")
        g = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(g)
        c0 = c1 = g0 = g1 = None
        t0 = t1 = None
        errlines = []
        for line in g.stderr:
            errlines.append(line)
            if "memif-load: measuring" in line:
                t0, c0, g0 = time.monotonic(), threads_cpu(broker.pid), threads_cpu(g.pid)
            elif "memif-load: measured" in line:
                t1, c1, g1 = time.monotonic(), threads_cpu(broker.pid), threads_cpu(g.pid)
        out = g.stdout.read()
        g.wait(timeout=60)
        with open(glog, "w") as f:
            f.write("".join(errlines) + out)
        self.stop(broker)
        if g.returncode != 0 or c0 is None or c1 is None:
            raise RuntimeError(f"{name}: the load generator failed ({g.returncode}):\n{''.join(errlines)[-2000:]}{out}")
        res = json.loads(out.strip().splitlines()[-1])
        with open(blog, errors="replace") as f:
            res["broker_log_tail"] = f.read()[-3000:]
        window = t1 - t0
        req = res["ok"]
        res["window_s"] = window
        res["broker_cpu_us_per_request"] = {k: (c1.get(k, 0) - c0.get(k, 0)) / 1e3 / max(req, 1) for k in c1}
        res["broker_cpu_share"] = {k: (c1.get(k, 0) - c0.get(k, 0)) / 1e9 / window for k in c1}
        res["load_cpu_share"] = (g1["process"] - g0["process"]) / 1e9 / window
        res["name"] = name
        if self.a.fetch:
            mb = max(res["fetched_bytes"], 1) / 1e6
            res["broker_cpu_us_per_mb"] = {k: (c1.get(k, 0) - c0.get(k, 0)) / 1e3 / mb for k in c1}
            log(f"{name}: {res['fetched_mb_per_s']:,.1f} MB/s in {res['requests_per_s']:,.0f} responses/s, "
                f"p50 {res['p50_us']:.0f} us, p99 {res['p99_us']:.0f} us, network core "
                f"{res['broker_cpu_us_per_mb'].get('sluice-net0', 0):,.0f} us/MB, broker "
                f"{res['broker_cpu_us_per_mb']['process']:,.0f} us/MB")
        else:
            log(f"{name}: {res['requests_per_s']:,.0f} requests/s, p50 {res['p50_us']:.0f} us, p99 "
                f"{res['p99_us']:.0f} us, network core "
                f"{res['broker_cpu_us_per_request'].get('sluice-net0', 0):.2f} us/request, "
                f"broker {res['broker_cpu_us_per_request']['process']:.2f} us/request")
        if not self.a.keep:
            shutil.rmtree(os.path.join(pdir, "data"), ignore_errors=True)
        return res


def table(results, phases, transports):
    rows = ["| phase | transport | requests/s | p50 us | p99 us | network core us/request | storage core us/request "
            "| broker us/request | network core busy | generator CPU |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    label = {"dpdk": "dpdk over net_memif", "uring": "io_uring over loopback"}
    for ph in phases:
        for t in transports:
            r = results.get(f"{t}-{ph}")
            if not r:
                continue
            u, s = r["broker_cpu_us_per_request"], r["broker_cpu_share"]
            rows.append(f"| {ph} | {label[t]} | {r['requests_per_s']:,.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} "
                        f"| {u.get('sluice-net0', 0):.2f} | {u.get('sluice-store0', 0):.2f} | {u['process']:.2f} "
                        f"| {s.get('sluice-net0', 0):.0%} | {r['load_cpu_share']:.0%} |")
        a, b = results.get(f"dpdk-{ph}"), results.get(f"uring-{ph}")
        if a and b and b["requests_per_s"] > 0:
            na = a["broker_cpu_us_per_request"].get("sluice-net0", 0)
            nb = b["broker_cpu_us_per_request"].get("sluice-net0", 0)
            rows.append(f"| {ph} | **dpdk / io_uring** | **{a['requests_per_s'] / b['requests_per_s']:.2f}x** | "
                        f"{a['p50_us'] / max(b['p50_us'], 1e-9):.2f}x | {a['p99_us'] / max(b['p99_us'], 1e-9):.2f}x | "
                        f"**{na / nb if nb else 0:.2f}x** | | "
                        f"{a['broker_cpu_us_per_request']['process'] / b['broker_cpu_us_per_request']['process']:.2f}x "
                        f"| | |")
    return "\n".join(rows) + "\n"


def fetch_table(results, phases, transports):
    rows = ["| phase | transport | MB/s | responses/s | p50 us | p99 us | network core us/MB | storage core us/MB "
            "| broker us/MB | network core busy | generator CPU |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    label = {"dpdk": "dpdk over net_memif, zero copy", "dpdk-copy": "dpdk over net_memif, copies",
             "uring": "io_uring over loopback"}
    for ph in phases:
        for t in transports:
            r = results.get(f"{t}-{ph}")
            if not r:
                continue
            u, s = r["broker_cpu_us_per_mb"], r["broker_cpu_share"]
            rows.append(f"| {ph} | {label[t]} | {r['fetched_mb_per_s']:,.1f} | {r['requests_per_s']:,.0f} "
                        f"| {r['p50_us']:.0f} | {r['p99_us']:.0f} | {u.get('sluice-net0', 0):,.0f} "
                        f"| {u.get('sluice-store0', 0):,.0f} | {u['process']:,.0f} | {s.get('sluice-net0', 0):.0%} "
                        f"| {r['load_cpu_share']:.0%} |")
        for other in ("dpdk-copy", "uring"):
            a, b = results.get(f"dpdk-{ph}"), results.get(f"{other}-{ph}")
            if a and b and b["fetched_mb_per_s"] > 0:
                na = a["broker_cpu_us_per_mb"].get("sluice-net0", 0)
                nb = b["broker_cpu_us_per_mb"].get("sluice-net0", 0)
                rows.append(f"| {ph} | **zero copy / {label[other]}** | "
                            f"**{a['fetched_mb_per_s'] / b['fetched_mb_per_s']:.2f}x** | | | | "
                            f"**{na / nb if nb else 0:.2f}x** | | "
                            f"{a['broker_cpu_us_per_mb']['process'] / b['broker_cpu_us_per_mb']['process']:.2f}x | | |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", required=True)
    ap.add_argument("--load", required=True, help="perf/memif-load")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--phases", default="1x1,4x32,16x32", help="CONNSxINFLIGHT,...")
    ap.add_argument("--transports", default="dpdk,uring")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--port", type=int, default=19392, help="the io_uring broker's loopback port")
    ap.add_argument("--broker-lcore", default="0")
    ap.add_argument("--load-lcore", default="1")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--fetch", type=int, default=0, help="BYTES: measure consumers (Fetch up to BYTES) instead")
    ap.add_argument("--fill-seconds", type=int, default=3)
    a = ap.parse_args()
    phases = [p.strip() for p in a.phases.split(",") if p.strip()]
    transports = [t.strip() for t in a.transports.split(",") if t.strip()]
    for t in transports:
        if t not in ("dpdk", "dpdk-copy", "uring"):
            ap.error(f"unknown transport {t}")
    b = Bench(a)
    os.makedirs(b.work)
    os.makedirs(a.out, exist_ok=True)

    def on_term(sig, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    results = {}
    try:
        for ph in phases:
            conns, inflight = (int(x) for x in ph.split("x"))
            for t in transports:  # side by side: the two transports of a phase back to back
                results[f"{t}-{ph}"] = b.run_one(t, conns, inflight)
    finally:
        b.cleanup()
    meta = {"record_size": a.record_size, "acks": 1, "partitions": a.partitions, "warmup_s": a.warmup,
            "duration_s": a.duration, "flush": "acknowledged when the O_DIRECT write completes, no fsync",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": os.uname().release,
            "cpus": os.cpu_count()}
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    if a.fetch:
        meta["fetch_bytes"] = a.fetch
        md = fetch_table(results, phases, transports)
        with open(os.path.join(a.out, "results.md"), "w") as f:
            f.write(f"# Kernel-free consumers: DPDK (net_memif, zero copy and copies) vs io_uring (loopback), "
                    f"{meta['date']}\n\nFetch v4 of up to {a.fetch} bytes from offset 0 of one partition per "
                    f"connection, again and again (cached), after {a.fill_seconds} s of 1,000-byte records "
                    f"produced into each of {a.partitions} partitions; {a.warmup} s warmup + {a.duration} s per "
                    f"phase; one network core and one storage core; {meta['cpus']} CPUs shared by broker and "
                    f"generator (generator on CPU {a.load_lcore}).\n\n" + md)
        print(md)
        return
    md = table(results, phases, transports)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(f"# Kernel-free DPDK (net_memif) vs io_uring (loopback), {meta['date']}\n\n"
                f"{a.record_size} B records, one record per Produce request (v3), acks=1, "
                f"{a.partitions} partitions, flush: {meta['flush']}; {a.warmup} s warmup + {a.duration} s per "
                f"phase; one network core and one storage core; {meta['cpus']} CPUs shared by broker and "
                f"generator (generator on CPU {a.load_lcore}).\n\n" + md)
    print(md)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        log("interrupted")
        sys.exit(130)
    except RuntimeError as e:
        log(f"failed: {e}")
        sys.exit(1)
