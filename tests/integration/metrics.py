#!/usr/bin/env python3
"""The broker's admin listener (sluice.admin.listener): GET /ready and GET /metrics.

A broker started with the admin listener on a free loopback port answers /ready with
200 once serving, and /metrics in the Prometheus text format 0.0.4, parsed here with
Prometheus' own Python parser (prometheus_client, Debian's python3-prometheus-client:
without it the test FAILS, it does not skip). Exactly N records are produced (raw
Produce batches, an idempotent batch sent twice, and kcat) and the topic's
sluice_topic_records_in_total rises by exactly N (the duplicate not counted) and its
bytes by the raw batches' bytes; sluice_requests_total{api="Produce"} rises by the
Produce requests sent; a Produce to a partition that does not exist and a Metadata
for an unknown topic (no auto-creation) show as
sluice_request_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION"} of their API; every
histogram's buckets are cumulative and its +Inf bucket is its _count; two consumer
Fetches raise sluice_topic_bytes_out_total by exactly the record bytes they carried. Other paths
answer 404, other methods 405. A broker still waiting for its controllers answers
/ready with 503; a broker whose admin port is busy, or whose sluice.admin.listener
is not host:port, exits non-zero naming the key. The Grafana dashboard
(deploy/grafana/sluice.json) is valid JSON whose panels have unique ids and fit the
24-column grid, and every broker metric its queries name (sluice_*, but the
controller's sluice_controller_*) is one the broker serves. Sluice only (Kafka has no
such listener). ~10 s.
"""
import http.client
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import Enc, check, log  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    # Debian's python3-prometheus-client, for a python3 that is not Debian's own
    # (pyenv): its dist-packages directory, then nothing else.
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as e:
        print(f"FAIL: cannot import prometheus_client ({e}): install python3-prometheus-client "
              "(tests/install-deps.sh)", flush=True)
        sys.exit(1)

TOPIC = "metrics-t"
UNKNOWN_TOPIC_OR_PARTITION = 3
DUPLICATE_SEQUENCE_NUMBER = 34


def http_get(port, path, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        c.close()


def scrape(port):
    """{(sample name, frozenset of labels): value}, and the families, from one /metrics."""
    status, ctype, body = http_get(port, "/metrics")
    check(status == 200, f"GET /metrics: {status}")
    check(ctype == "text/plain; version=0.0.4; charset=utf-8", f"GET /metrics: Content-Type {ctype}")
    fams = list(text_string_to_metric_families(body))
    samples = {}
    for f in fams:
        for s in f.samples:
            key = (s.name, frozenset(s.labels.items()))
            check(key not in samples, f"duplicate series {key}")
            samples[key] = s.value
    return samples, fams, body


def val(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def check_histograms(fams):
    """Every histogram: buckets cumulative in le order, +Inf == _count, _sum >= 0."""
    n = 0
    for f in fams:
        if f.type != "histogram":
            continue
        series = {}
        for s in f.samples:
            labels = {k: v for k, v in s.labels.items() if k != "le"}
            key = frozenset(labels.items())
            d = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
            if s.name.endswith("_bucket"):
                d["buckets"].append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                d["sum"] = s.value
            elif s.name.endswith("_count"):
                d["count"] = s.value
        for key, d in series.items():
            b = sorted(d["buckets"])
            check(b and b[-1][0] == float("inf"), f"{f.name}{dict(key)}: no +Inf bucket")
            for (le0, v0), (le1, v1) in zip(b, b[1:]):
                check(v1 >= v0, f"{f.name}{dict(key)}: bucket le={le1} ({v1}) below le={le0} ({v0})")
            check(d["count"] == b[-1][1], f"{f.name}{dict(key)}: _count {d['count']} != +Inf {b[-1][1]}")
            check(d["sum"] is not None and d["sum"] >= 0, f"{f.name}{dict(key)}: _sum {d['sum']}")
            n += 1
    return n


def init_producer_id(conn):
    d = conn.request(22, 1, Enc().string(None).i32(60000).done())
    d.i32()
    err, pid, epoch = d.i16(), d.i64(), d.i16()
    check(err == 0 and pid >= 0, f"InitProducerId: error {err}")
    return pid, epoch


def metadata_unknown_topic(conn, topic):
    """Metadata v4 without auto-creation: the topic's ErrorCode."""
    _, topics = conn.metadata([topic], auto_create=False, version=4)
    return topics[topic][0]


def start_refused(b, overrides, what):
    """sluice-broker with b's configuration and overrides: must exit non-zero naming the key."""
    cfg = os.path.join(b.tmp, f"refused-{what}.properties")
    with open(cfg, "w") as f:
        f.write(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{lib.free_port()}\n"
                f"log.dirs={os.path.join(b.tmp, 'refused-' + what)}\n")
    cmd = [b.exe, cfg]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    r = lib.run(cmd, timeout=60)
    out = r.stdout + r.stderr
    check(r.returncode != 0, f"{what}: the broker started (exit {r.returncode})")
    check("sluice.admin.listener" in out, f"{what}: the error does not name sluice.admin.listener: {out[-600:]}")
    log(f"{what}: exit {r.returncode}: {out.strip().splitlines()[-1]}")


def ready_while_waiting_for_controllers(b):
    """Cluster mode with no controller there: /ready is 503 (and sluice_broker_ready 0)
    while the broker waits, then it gives up (sluice.controller.wait.ms)."""
    admin = lib.free_port()
    cfg = os.path.join(b.tmp, "waiting.properties")
    with open(cfg, "w") as f:
        f.write(f"node.id=7\nprocess.roles=broker\ncluster.id=metrics-test-cluster\n"
                f"controller.quorum.voters=1@127.0.0.1:{lib.free_port()}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{lib.free_port()}\n"
                f"log.dirs={os.path.join(b.tmp, 'waiting')}\nsluice.controller.wait.ms=4000\n"
                f"sluice.admin.listener=127.0.0.1:{admin}\n")
    import subprocess
    p = subprocess.Popen([b.exe, cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        check(lib.wait_port(admin, 10, proc_alive=lambda: p.poll() is None),
              "the waiting broker's admin listener never listened")
        status, _, body = http_get(admin, "/ready")
        check(status == 503 and body == "not ready\n", f"/ready while waiting for controllers: {status} {body!r}")
        samples, _, _ = scrape(admin)
        check(val(samples, "sluice_broker_ready") == 0, "sluice_broker_ready is not 0 while waiting")
        log("a broker waiting for its controllers: /ready 503, sluice_broker_ready 0")
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def check_dashboard(fams):
    """deploy/grafana/sluice.json against what the broker serves (its families)."""
    import json
    import re
    path = os.path.join(lib.ROOT, "deploy", "grafana", "sluice.json")
    with open(path) as f:
        dash = json.load(f)
    served = set()
    for fam in fams:
        served.add(fam.name)
        if fam.type == "counter":
            served.add(fam.name + "_total")
        if fam.type == "histogram":
            served.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
        served.update(s.name for s in fam.samples)
    ids, exprs = set(), []
    for p in dash["panels"]:
        check(p["id"] not in ids, f"dashboard: panel id {p['id']} twice")
        ids.add(p["id"])
        g = p["gridPos"]
        check(0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, f"dashboard: panel {p['title']} off the grid")
        for t in p.get("targets", []):
            exprs.append(t["expr"])
    names = {n for e in exprs for n in re.findall(r"\bsluice_[a-z0-9_]+", e)}
    broker = {n for n in names if not n.startswith("sluice_controller_")}
    missing = sorted(broker - served)
    check(not missing, f"dashboard: queries name metrics the broker does not serve: {missing}")
    check(len(broker) >= 6, f"dashboard: only {sorted(broker)}")
    log(f"dashboard: {len(dash['panels'])} panels, {len(exprs)} queries over {len(names)} metrics, all served")


def test():
    if lib.TARGET != "sluice":
        lib.skip("the admin listener (/metrics, /ready) is Sluice's")
    admin = lib.free_port()
    b = lib.Broker("metrics", {"sluice.admin.listener": f"127.0.0.1:{admin}", "num.partitions": 2})
    failed = True
    try:
        b.start()
        status, _, body = http_get(admin, "/ready")
        check(status == 200 and body == "ready\n", f"GET /ready on a serving broker: {status} {body!r}")
        check(http_get(admin, "/nope")[0] == 404, "GET /nope is not 404")
        check(http_get(admin, "/metrics", method="POST")[0] == 405, "POST /metrics is not 405")

        with lib.Conn(b.port) as c:
            c.ensure_topic(TOPIC)
            s0, _, _ = scrape(admin)
            check(val(s0, "sluice_broker_ready") == 1, "sluice_broker_ready is not 1")
            check(val(s0, "sluice_network_connections") >= 1, "no connection counted open while one is")
            # Raw batches of 5, 7 and 1 records: three Produce requests.
            blobs = [lib.record_batch([(None, b"v%d" % i, [])] * n) for i, n in enumerate((5, 7, 1))]
            for i, blob in enumerate(blobs):
                err, _, _ = c.produce(TOPIC, i % 2, blob)
                check(err == 0, f"produce: error {err}")
            # An idempotent batch of 4, then the very same batch again: a duplicate.
            pid, epoch = init_producer_id(c)
            idem = lib.record_batch([(None, b"i", [])] * 4, producer_id=pid, producer_epoch=epoch, base_sequence=0)
            err1, off1, _ = c.produce(TOPIC, 0, idem)
            err2, off2, _ = c.produce(TOPIC, 0, idem)
            check(err1 == 0 and err2 in (0, DUPLICATE_SEQUENCE_NUMBER) and off1 == off2,
                  f"idempotent batch twice: ({err1}, {off1}) then ({err2}, {off2})")
            raw_records, raw_bytes, raw_produces = 5 + 7 + 1 + 4, sum(map(len, blobs)) + len(idem), 5
            s1, _, _ = scrape(admin)
            got = val(s1, "sluice_topic_records_in_total", topic=TOPIC) - val(s0, "sluice_topic_records_in_total",
                                                                            topic=TOPIC)
            check(got == raw_records, f"records in rose by {got}, want {raw_records} (the duplicate not counted)")
            got = val(s1, "sluice_topic_bytes_in_total", topic=TOPIC) - val(s0, "sluice_topic_bytes_in_total",
                                                                          topic=TOPIC)
            check(got == raw_bytes, f"bytes in rose by {got}, want {raw_bytes}")
            got = val(s1, "sluice_requests_total", api="Produce") - val(s0, "sluice_requests_total", api="Produce")
            check(got == raw_produces, f"Produce requests rose by {got}, want {raw_produces}")

            # Errors by code: a partition that does not exist, a topic that does not.
            err, _, _ = c.produce(TOPIC, 7, lib.record_batch([(None, b"x", [])]))
            check(err == UNKNOWN_TOPIC_OR_PARTITION, f"produce to partition 7: error {err}")
            err = metadata_unknown_topic(c, "metrics-no-such-topic")
            check(err == UNKNOWN_TOPIC_OR_PARTITION, f"Metadata for an unknown topic: error {err}")
            s2, _, _ = scrape(admin)
            for api in ("Produce", "Metadata"):
                got = (val(s2, "sluice_request_errors_total", api=api, error="UNKNOWN_TOPIC_OR_PARTITION") -
                       val(s1, "sluice_request_errors_total", api=api, error="UNKNOWN_TOPIC_OR_PARTITION"))
                check(got == 1, f"{api} UNKNOWN_TOPIC_OR_PARTITION errors rose by {got}, want 1")
            check(val(s2, "sluice_topic_records_in_total", topic=TOPIC) ==
                  val(s1, "sluice_topic_records_in_total", topic=TOPIC), "a refused produce counted records")

            # Bytes out: two consumer Fetches of partition 0 from offset 0; the counter
            # rises by exactly the record bytes they carried.
            fetched = 0
            for _ in range(2):
                err, _, blob = c.fetch(TOPIC, 0, 0)
                check(err == 0 and len(blob) > 0, f"fetch: error {err}, {len(blob)} bytes")
                fetched += len(blob)
            s2b, _, _ = scrape(admin)
            got = val(s2b, "sluice_topic_bytes_out_total", topic=TOPIC) - val(s2, "sluice_topic_bytes_out_total",
                                                                            topic=TOPIC)
            check(got == fetched, f"bytes out rose by {got}, want {fetched} (the two fetches' record bytes)")

        # kcat: M more records, one per line.
        kcat = lib.kcat_path(required=False)
        kcat_records = 0
        if kcat:
            kcat_records = 25
            r = lib.run([kcat, "-P", "-b", b.bootstrap, "-t", TOPIC, "-X", "acks=all"],
                        input="".join(f"k{i}\n" for i in range(kcat_records)), timeout=60)
            check(r.returncode == 0, f"kcat -P: exit {r.returncode}: {r.stderr[-800:]}")
        else:
            log("NOTE: kcat not installed: the raw client's records only")
        s3, fams, body = scrape(admin)
        n = raw_records + kcat_records
        got = val(s3, "sluice_topic_records_in_total", topic=TOPIC) - val(s0, "sluice_topic_records_in_total",
                                                                        topic=TOPIC)
        check(got == n, f"records in rose by {got} over the test, want exactly {n}")
        check(val(s3, "sluice_network_connections_accepted_total") >= 2 + (1 if kcat else 0),
              "connections accepted not counted")

        # Histograms: cumulative, consistent; Produce's _count reaches its requests once
        # their responses are sent (the time is taken at the response's end).
        hist = check_histograms(fams)
        check(hist >= 3, f"only {hist} request histograms")
        deadline = time.monotonic() + 10
        while True:
            want = val(s3, "sluice_requests_total", api="Produce")
            have = val(s3, "sluice_request_duration_seconds_count", api="Produce")
            if have == want:
                break
            check(time.monotonic() < deadline, f"Produce histogram _count {have}, requests {want}")
            time.sleep(0.2)
            s3, fams, body = scrape(admin)
            check_histograms(fams)
        check(body.count("# TYPE sluice_request_duration_seconds histogram") == 1, "one histogram family")
        check_dashboard(fams)
        log(f"{n} records in, {int(want)} Produce requests, {hist} histograms consistent; "
            f"{len(body)} bytes of /metrics")

        # The admin port in use, and a value that is not host:port: refused at start.
        start_refused(b, {"sluice.admin.listener": f"127.0.0.1:{admin}"}, "busy-admin-port")
        start_refused(b, {"sluice.admin.listener": "127.0.0.1:notaport"}, "bad-admin-value")
        ready_while_waiting_for_controllers(b)

        rc = b.stop()
        check(rc == 0, f"broker exited {rc} on SIGTERM")
        failed = False
    finally:
        b.cleanup(failed=failed)


if __name__ == "__main__":
    lib.main(test)
