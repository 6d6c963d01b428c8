#!/usr/bin/env python3
"""Turns one run of perf/run-all.sh into perf/results/latest.md, latest.json and PNG charts.

Reads raw/<workload>/<peer>/ (peer.json: version, flush mode, config; <phase>.json: what
sluice-perf or amqp-perf wrote; <phase>.meta.json: exit status, wall time, load) and writes
a Markdown table per workload, a headline table, the list of everything that failed, and
three charts: throughput per workload, latency percentiles, and workload 3's rate over time.
It also writes the efficiency figures: the broker's CPU time per record of every phase
(from run-all.sh's /proc samples in the meta files), the ratio Kafka/Sluice of it, the
share of the null sink's rate each peer reaches, the read-back's page faults and the
allocations per request of the alloc workload (alloc-count dumps and librdkafka's
statistics), and summary.md, one column per peer, for docs/benchmarks.md.
Nothing here measures anything: every number comes from the tools' and run-all's files.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# "before" and "after" are perf/compare-revs.sh's two Sluice revisions.
PEER_ORDER = ["before", "after", "sluice", "sluice-fsync", "kafka", "rabbitmq", "null"]
PEER_LABEL = {"sluice": "Sluice", "sluice-fsync": "Sluice (fsync)", "kafka": "Apache Kafka",
              "rabbitmq": "RabbitMQ", "null": "null sink"}
PEER_COLOR = {"before": "#9ecae1", "after": "#08519c", "sluice": "#1f77b4", "sluice-fsync": "#6baed6", "kafka": "#d62728",
              "rabbitmq": "#ff7f0e", "null": "#7f7f7f"}
PCTS = [("p50", "p50"), ("p99", "p99"), ("p99_9", "p99.9"), ("p99_99", "p99.99"), ("max", "max")]

WORKLOADS = {
    "1": {"name": "kafka-2014", "title": "1. The 2014 Kafka benchmark shape",
          "issue": "one producer, 100 B records, 6 partitions, acks=1, maximum rate (the 2014 "
                   "post wrote 50 M records to a 3-node cluster); then one consumer reads them back"},
    "2": {"name": "omb", "title": "2. OpenMessaging Benchmark shape",
          "issue": "1 KiB records, 1 topic x 100 partitions, 4 producers, 4 consumers, acks=all, "
                   "maximum rate, and a fixed 50% rate for latency (OMB: 1 min warm-up, 15 min test)"},
    "3": {"name": "web", "title": "3. Web activity tracking (LinkedIn figures)",
          "issue": "367 topics, keyed records, a steady 172,000 records/s, 5.5 consumer groups "
                   "per topic on average; does each system hold the rate, and its end-to-end latency"},
    "4": {"name": "backlog", "title": "4. Backlog drain",
          "issue": "5 GB written, then read from the start by a bulk consumer"},
    "readback": {"name": "readback", "title": "Read-back of 1 GB, page faults",
                 "issue": "page faults of the broker during a 1 GB read-back (issue 11)"},
    "alloc": {"name": "alloc", "title": "Allocations per request (Sluice)",
              "issue": "allocations per produce and per fetch request in steady state "
                       "(issue 11: about 5 today, target 0)"},
    "rf3": {"name": "rf3", "title": "Replication (RF=3): three brokers of each",
            "issue": "RF=3, acks=all, 1 KiB records, 100 partitions: maximum throughput and "
                     "end-to-end p50/p99 at 50% load, three local Sluice brokers beside three "
                     "Apache Kafka 4.x brokers on the same machine in the same run (issue 13; "
                     "goal: at least 2x Kafka's throughput, at most 1/5 of its p99)"},
}
SLUICE_FAMILY_FIXED = ("sluice", "sluice-fsync")
KAFKA_PEER = "kafka"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def collect(raw):
    data = {}
    for wl in sorted(os.listdir(raw)):
        wdir = os.path.join(raw, wl)
        if not os.path.isdir(wdir):
            continue
        for peer in os.listdir(wdir):
            pdir = os.path.join(wdir, peer)
            entry = {"peer": load(os.path.join(pdir, "peer.json")) or {}, "phases": {}}
            cache = os.path.join(pdir, "cache.txt")
            if os.path.exists(cache):
                entry["cache"] = open(cache).read().strip()
            for fn in sorted(os.listdir(pdir)):
                if fn.endswith(".meta.json"):
                    name = fn[: -len(".meta.json")]
                    entry["phases"][name] = {"meta": load(os.path.join(pdir, fn)) or {},
                                             "result": load(os.path.join(pdir, name + ".json")),
                                             "log": os.path.join("raw", wl, peer, name + ".log")}
            data.setdefault(wl, {})[peer] = entry
            if peer not in PEER_ORDER:  # an extra Sluice binary (run-all.sh --sluice)
                PEER_ORDER.append(peer)
            if peer not in PEER_LABEL and entry["peer"].get("version"):
                PEER_LABEL[peer] = entry["peer"]["version"]
    return data


def peers_in(wdata):
    return [p for p in PEER_ORDER if p in wdata] + sorted(p for p in wdata if p not in PEER_ORDER)


def stream(phase, name):
    r = phase.get("result") if phase else None
    return r.get(name) if r else None


def fmt_rate(v):
    if v is None:
        return "–"
    return f"{v:,.0f}"


def fmt_mb(v):
    return "–" if v is None else f"{v:,.1f}"


def fmt_ms(us):
    if us is None:
        return "–"
    ms = us / 1000.0
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def lat(s):
    if not s or "latency_us" not in s:
        return "–"
    l = s["latency_us"]
    return " / ".join(fmt_ms(l.get(k)) for k, _ in PCTS)


def problems(wl, peer, entry):
    """Everything that went wrong in one peer's workload, as sentences."""
    out = []
    if entry["peer"].get("start_failed"):
        out.append("the server did not start")
    for name, ph in entry["phases"].items():
        meta, res = ph["meta"], ph["result"]
        if res is None:
            out.append(f"{name}: no result (exit status {meta.get('rc')}; see `{ph['log']}`)")
            continue
        if meta.get("rc"):
            out.append(f"{name}: exit status {meta['rc']} (see `{ph['log']}`)")
        for s in ("produce", "consume", "e2e"):
            if res.get(s, {}).get("errors"):
                out.append(f"{name}: {res[s]['errors']:,} {s} errors")
        cfg = res.get("config", {})
        scheduled = cfg.get("rate", 0) * (cfg.get("warmup_s", 0) + cfg.get("duration_s", 0))
        if scheduled and res.get("unsent", 0) > 0.001 * scheduled:
            out.append(f"{name}: {res['unsent']:,} records never sent or never acknowledged "
                       f"(of {scheduled:,.0f} scheduled at {cfg.get('rate', 0):,.0f}/s)")
        elif not scheduled and res.get("unsent"):
            out.append(f"{name}: {res['unsent']:,} records still unacknowledged {cfg.get('tail_s', 0):g} s "
                       "after the producers stopped, abandoned")
        if res.get("lost"):
            out.append(f"{name}: {res['lost']:,} records not consumed within the tail")
    return out


def row(cells):
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header, rows):
    lines = [row(header), row(["---"] * len(header))]
    lines += [row(r) for r in rows]
    return "\n".join(lines)


def label(peer):
    return PEER_LABEL.get(peer, peer)


def wl1_table(w):
    rows = []
    for p in peers_in(w):
        ph = w[p]["phases"]
        pr, co = stream(ph.get("produce"), "produce"), stream(ph.get("consume"), "consume")
        rows.append([label(p), fmt_rate(pr and pr["records_per_s"]), fmt_mb(pr and pr["mb_per_s"]),
                     lat(pr), fmt_rate(co and co["records_per_s"]) if p != "null" else "n/a",
                     fmt_mb(co and co["mb_per_s"]) if p != "null" else "n/a",
                     f"{co['records']:,}" if co else "–"])
    return table(["peer", "produce rec/s", "MB/s", "produce latency ms p50 / p99 / p99.9 / "
                  "p99.99 / max", "consume rec/s", "MB/s", "records read back"], rows)


def wl2_table(w):
    rows = []
    for p in peers_in(w):
        for name, title in (("max", "max rate"), ("half", "50% of max")):
            ph = w[p]["phases"].get(name)
            if not ph:
                continue
            res = ph["result"] or {}
            pr, e2e = res.get("produce"), res.get("e2e")
            rate = res.get("config", {}).get("rate") if res else None
            what = title + (f" ({rate:,.0f}/s)" if rate else "")
            rows.append([label(p), what, fmt_rate(pr and pr["records_per_s"]),
                         fmt_mb(pr and pr["mb_per_s"]), lat(pr),
                         fmt_rate(e2e and e2e["records_per_s"]) if p != "null" else "n/a",
                         lat(e2e) if p != "null" else "n/a"])
    return table(["peer", "rate", "produce rec/s", "MB/s", "produce latency ms p50 / p99 / "
                  "p99.9 / p99.99 / max", "consumed rec/s", "end-to-end ms p50 / p99 / p99.9 / "
                  "p99.99 / max"], rows)


def rf3_rounds(w):
    """The round numbers with a phase of any peer, in order."""
    rounds = set()
    for e in w.values():
        for name in e["phases"]:
            if name.startswith("r") and "-" in name and name[1:name.index("-")].isdigit():
                rounds.add(int(name[1:name.index("-")]))
    return sorted(rounds)


def rf3_figures(w, peer, rnd, which="half"):
    """(max records/s, max MB/s, the rate of phase `which`, its e2e p50 us, e2e p99 us) of
    one round; None where missing."""
    e = w.get(peer)
    if not e:
        return None, None, None, None, None
    mx = stream(e["phases"].get(f"r{rnd}-max"), "produce")
    half = e["phases"].get(f"r{rnd}-{which}")
    e2e = stream(half, "e2e")
    rate = ((half or {}).get("result") or {}).get("config", {}).get("rate")
    l = (e2e or {}).get("latency_us") or {}
    return (mx and mx.get("records_per_s"), mx and mx.get("mb_per_s"), rate,
            l.get("p50"), l.get("p99"))


def rf3_table(w):
    rows = []
    for rnd in rf3_rounds(w):
        for p in peers_in(w):
            e = w[p]
            mx = stream(e["phases"].get(f"r{rnd}-max"), "produce")
            cells = [rnd, label(p), fmt_rate(mx and mx["records_per_s"]), fmt_mb(mx and mx["mb_per_s"]), lat(mx)]
            for which in ("half", "fixed"):
                ph = e["phases"].get(f"r{rnd}-{which}")
                res = (ph or {}).get("result") or {}
                rate = res.get("config", {}).get("rate")
                e2e = stream(ph, "e2e")
                held = "–"
                if rate and e2e:
                    held = f"{e2e['records_per_s'] / rate:.0%}"
                cells += [fmt_rate(rate) if rate else "–", held, lat(stream(ph, "produce")), lat(e2e)]
            rows.append(cells)
    return table(["round", "peer", "max: produce rec/s", "MB/s", "produce latency at max ms "
                  "p50 / p99 / p99.9 / p99.99 / max",
                  "50% rate rec/s", "read of rate", "at 50%: produce ms p50 / p99 / p99.9 / p99.99 / max",
                  "at 50%: end-to-end ms p50 / p99 / p99.9 / p99.99 / max",
                  "fixed rate rec/s", "read of rate", "fixed: produce ms p50 / p99 / p99.9 / p99.99 / max",
                  "fixed: end-to-end ms p50 / p99 / p99.9 / p99.99 / max"], rows)


def rf3_ratios(w):
    """Sluice against Kafka per round, with the issue's goals."""
    if "sluice" not in w or KAFKA_PEER not in w:
        return ""
    rows = []
    for rnd in rf3_rounds(w):
        s, k = rf3_figures(w, "sluice", rnd), rf3_figures(w, KAFKA_PEER, rnd)
        sf, kf = rf3_figures(w, "sluice", rnd, "fixed"), rf3_figures(w, KAFKA_PEER, rnd, "fixed")
        thr = s[0] / k[0] if s[0] and k[0] else None
        ratio = lambda a, b: a / b if a and b else None  # noqa: E731
        p50, p99 = ratio(s[3], k[3]), ratio(s[4], k[4])
        f50, f99 = ratio(sf[3], kf[3]), ratio(sf[4], kf[4])
        goal = lambda r: "yes" if r and r <= 0.2 else ("no" if r else "–")  # noqa: E731
        rows.append([rnd, fmt_x(thr), "yes" if thr and thr >= 2 else ("no" if thr else "–"),
                     fmt_x(p50), fmt_x(p99), goal(p99), fmt_x(f50), fmt_x(f99), goal(f99)])
    return table(["round", "max throughput Sluice/Kafka", "goal >= 2x met",
                  "at 50%: e2e p50 Sluice/Kafka", "e2e p99 Sluice/Kafka", "goal <= 0.2x met",
                  "fixed rate: e2e p50 Sluice/Kafka", "e2e p99 Sluice/Kafka", "goal <= 0.2x met"], rows)


def held(res, target):
    """Held = acknowledged at >= 99% of the target, at most 0.1% of the schedule unsent (the
    producers stop by the wall clock, a few records short), and every group read every
    record within the tail."""
    if not res or not res.get("produce"):
        return False
    cfg = res.get("config", {})
    scheduled = target * (cfg.get("warmup_s", 0) + cfg.get("duration_s", 0))
    ok = (res["produce"]["records_per_s"] >= 0.99 * target and
          res.get("unsent", 0) <= 0.001 * scheduled)
    if "e2e" in res:
        ok = ok and not res.get("lost")
    return ok


def wl3_table(w):
    rows = []
    for p in peers_in(w):
        for name in ("rate", "low"):
            ph = w[p]["phases"].get(name)
            if not ph:
                continue
            res = ph.get("result") or {}
            target = int(res.get("config", {}).get("rate", 0))
            pr, e2e = res.get("produce"), res.get("e2e")
            gpt = res.get("config", {}).get("groups_per_topic")
            need = f"{target * gpt:,.0f}" if gpt else "–"
            rows.append([label(p), f"{target:,}/s" if target else "–",
                         "**yes**" if held(res, target) else "no",
                         fmt_rate(pr and pr["records_per_s"]), lat(pr),
                         (fmt_rate(e2e and e2e["records_per_s"]) + f" of {need}")
                         if p != "null" else "n/a",
                         lat(e2e) if p != "null" else "n/a", f"{res.get('unsent', 0):,}",
                         f"{res.get('lost', 0):,}" if p != "null" else "n/a"])
    return table(["peer", "target", "holds it", "produce rec/s", "produce latency ms p50 / p99 / "
                  "p99.9 / p99.99 / max", "consumed rec/s", "end-to-end ms p50 / p99 / p99.9 / "
                  "p99.99 / max", "unsent or abandoned", "unconsumed"], rows)


def wl4_table(w):
    rows = []
    for p in peers_in(w):
        ph = w[p]["phases"]
        wr, dr = stream(ph.get("write"), "produce"), stream(ph.get("drain"), "consume")
        rows.append([label(p), f"{wr['bytes'] / 1e9:.2f} GB" if wr else "–",
                     fmt_mb(wr and wr["mb_per_s"]), fmt_rate(wr and wr["records_per_s"]),
                     fmt_mb(dr and dr["mb_per_s"]) if p != "null" else "n/a",
                     fmt_rate(dr and dr["records_per_s"]) if p != "null" else "n/a",
                     f"{dr['elapsed_s']:.1f} s" if dr else ("n/a" if p == "null" else "–"),
                     w[p].get("cache", "n/a")])
    return table(["peer", "written", "write MB/s", "write rec/s", "drain MB/s", "drain rec/s",
                  "drain time", "page cache before drain"], rows)


def headline(data, target):
    rows = []
    all_peers = [p for p in PEER_ORDER if any(p in data.get(w, {}) for w in data)]

    def get(wl, peer, phase, s, key):
        st = stream(data.get(wl, {}).get(peer, {}).get("phases", {}).get(phase), s)
        return st.get(key) if st else None

    def p99(wl, peer, phase, s):
        st = stream(data.get(wl, {}).get(peer, {}).get("phases", {}).get(phase), s)
        mark = " †" if peer == "null" and st else ""
        return fmt_ms(st["latency_us"]["p99"]) + mark if st and "latency_us" in st else "–"

    for p in all_peers:
        res3 = ((data.get("3", {}).get(p, {}).get("phases", {}).get("rate") or {}).get("result"))
        rows.append([label(p),
                     fmt_mb(get("1", p, "produce", "produce", "mb_per_s")),
                     fmt_mb(get("1", p, "consume", "consume", "mb_per_s")),
                     fmt_mb(get("2", p, "max", "produce", "mb_per_s")),
                     p99("2", p, "half", "e2e" if p != "null" else "produce"),
                     ("yes" if held(res3, target) else "no") if res3 else "–",
                     p99("3", p, "rate", "e2e" if p != "null" else "produce"),
                     fmt_mb(get("4", p, "write", "produce", "mb_per_s")),
                     fmt_mb(get("4", p, "drain", "consume", "mb_per_s"))])
    return table(["peer", "1: produce MB/s", "1: consume MB/s", "2: max MB/s",
                  "2: 50% e2e p99 ms", f"3: holds {target // 1000}k/s", "3: e2e p99 ms",
                  "4: write MB/s", "4: drain MB/s"], rows) + (
        "\n\n† the null sink serves no consumers: its figure is produce latency, the "
        "client's and loopback's share of an end-to-end latency.")


# ------------------------------------------------------------------ efficiency

NOT_SLUICE = ("kafka", "rabbitmq", "null")
# (workload, phase, stream whose rate and p99 are shown); the CPU time is the broker's over
# the whole phase, divided by the records the phase moved.
EFF_PHASES = [("1", "produce", "produce"), ("1", "consume", "consume"),
              ("2", "max", "e2e"), ("2", "half", "e2e"),
              ("3", "rate", "e2e"), ("3", "low", "e2e"),
              ("4", "write", "produce"), ("4", "drain", "consume"),
              ("readback", "write", "produce"), ("readback", "read", "consume"),
              ("alloc", "produce", "produce"), ("alloc", "fetch", "consume")]
EFF_PHASES += [("rf3", f"r{r}-{k}", s) for r in range(1, 10)
               for k, s in (("max", "produce"), ("half", "e2e"), ("fixed", "e2e"))]


def is_sluice(peer):
    return peer not in NOT_SLUICE


def phase_of(data, wl, peer, name):
    return data.get(wl, {}).get(peer, {}).get("phases", {}).get(name)


def phase_records(ph):
    """Records the phase moved: acknowledged (warm-up included) or consumed."""
    res = (ph or {}).get("result") or {}
    if res.get("mode") == "consume":
        return (res.get("consume") or {}).get("records")
    return res.get("delivered")


def cpu_us_per_record(ph):
    meta = (ph or {}).get("meta") or {}
    n = phase_records(ph)
    cpu = meta.get("broker_cpu_s")
    if cpu is None or not n or not meta.get("broker_pid"):
        return None
    return cpu * 1e6 / n


def shown_stream(ph, peer, s):
    """The stream whose rate and p99 a phase is judged by (the null sink has no e2e)."""
    st = stream(ph, s)
    if st is None and s == "e2e":
        st = stream(ph, "produce")
    return st


def null_ratio(data, wl, peer, name, s):
    """The share of the null sink's rate this peer reached, for phases at maximum rate."""
    ph, nph = phase_of(data, wl, peer, name), phase_of(data, wl, "null", name)
    res = (ph or {}).get("result") or {}
    if not nph or res.get("config", {}).get("rate") or s == "consume":
        return None
    a, b = stream(ph, "produce"), stream(nph, "produce")
    if not a or not b or not b.get("records_per_s"):
        return None
    return a["records_per_s"] / b["records_per_s"]


def fmt_us(v):
    if v is None:
        return "–"
    return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"


def fmt_x(v):
    return "–" if v is None else f"{v:.2f}x"


def fmt_pct(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def efficiency_table(data):
    rows = []
    for wl, name, s in EFF_PHASES:
        if wl not in data:
            continue
        kafka_cpu = cpu_us_per_record(phase_of(data, wl, KAFKA_PEER, name))
        for p in peers_in(data[wl]):
            ph = phase_of(data, wl, p, name)
            if not ph:
                continue
            st = shown_stream(ph, p, s)
            meta = ph.get("meta") or {}
            cpu = cpu_us_per_record(ph)
            ratio = kafka_cpu / cpu if (kafka_cpu and cpu and is_sluice(p)) else None
            p99 = fmt_ms(st["latency_us"]["p99"]) if st and "latency_us" in st else "–"
            rows.append([f"{wl} {name}", label(p), fmt_rate(st and st.get("records_per_s")),
                         p99, f"{meta['broker_cpu_s']:.2f}" if "broker_cpu_s" in meta else "–",
                         fmt_us(cpu), fmt_x(ratio), fmt_pct(null_ratio(data, wl, p, name, s)),
                         f"{meta.get('broker_minflt', 0):,} / {meta.get('broker_majflt', 0):,}"
                         if "broker_minflt" in meta else "–"])
    return table(["workload phase", "peer", "records/s", "p99 ms", "broker CPU s",
                  "CPU µs/record", "Kafka/this CPU", "of null sink", "page faults minor / major"],
                 rows)


# --- allocation counting

def read_dumps(path):
    """alloc-count's dumps: [(t_ns, {class: allocation calls, 'free': frees})]."""
    dumps, cur = [], None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return dumps
    for line in lines:
        f = line.split()
        if not f:
            continue
        if f[0] == "dump":
            cur = {"t_ns": int(f[2]), "reason": f[3], "allocs": {}, "frees": {}}
            dumps.append(cur)
        elif cur is not None and len(f) == 7:
            n = [int(x) for x in f[1:]]
            cur["allocs"][f[0]] = sum(n[:5])
            cur["frees"][f[0]] = n[5]
    return dumps


def read_requests(path):
    """librdkafka statistics: per client, [(t_us, {request type: sent so far})]."""
    series = {}
    try:
        f = open(path)
    except OSError:
        return series
    for line in f:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        req = {}
        for b in d.get("brokers", {}).values():
            for k, v in (b.get("req") or {}).items():
                req[k] = req.get(k, 0) + v
        series.setdefault(d.get("name", "?"), []).append((d.get("ts", 0), req))
    return series


def requests_at(series, t_us, kind):
    """Requests of one type sent by all clients by t_us, interpolated between samples."""
    total = 0.0
    for samples in series.values():
        samples.sort(key=lambda x: x[0])
        prev = None
        for ts, req in samples:
            v = req.get(kind, 0) if kind else sum(req.values())
            if ts >= t_us:
                if prev is None:
                    total += 0 if ts > t_us + 200000 else v
                else:
                    pt, pv = prev
                    total += pv + (v - pv) * (t_us - pt) / max(ts - pt, 1)
                break
            prev = (ts, v)
        else:
            if prev:
                total += prev[1]
    return total


def alloc_result(raw, peer, name, kind):
    """Allocations per request of one alloc phase, by thread class, or None."""
    d = os.path.join(raw, "alloc", peer)
    ph = load(os.path.join(d, name + ".meta.json")) or {}
    lo, hi = (ph.get("alloc_dumps") or [0, 0])[:2]
    dumps = read_dumps(os.path.join(d, "alloc-count.txt"))[lo:hi]
    if len(dumps) < 2:
        return None
    a, b = dumps[0], dumps[-1]
    series = read_requests(os.path.join(d, name + ".stats.jsonl"))
    reqs = requests_at(series, b["t_ns"] / 1000, kind) - requests_at(series, a["t_ns"] / 1000, kind)
    every = requests_at(series, b["t_ns"] / 1000, None) - requests_at(series, a["t_ns"] / 1000, None)
    allocs = {c: b["allocs"].get(c, 0) - a["allocs"].get(c, 0) for c in b["allocs"]}
    return {"window_s": (b["t_ns"] - a["t_ns"]) / 1e9, "requests": reqs, "all_requests": every,
            "allocs": allocs, "per_request": {c: (v / reqs if reqs else None)
                                              for c, v in allocs.items()},
            "total_per_request": (sum(allocs.values()) / reqs) if reqs else None}


def fmt_per(v):
    return "–" if v is None else f"{v:.2f}"


def alloc_table(raw, data):
    rows = []
    for p in peers_in(data.get("alloc", {})):
        for name, kind in (("produce", "Produce"), ("fetch", "Fetch")):
            r = alloc_result(raw, p, name, kind)
            if r is None:
                rows.append([label(p), kind, "–", "–", "–", "–", "–", "–", "–"])
                continue
            pr = r["per_request"]
            rows.append([label(p), kind, f"{r['window_s']:.1f} s",
                         f"{r['requests']:,.0f} (of {r['all_requests']:,.0f})",
                         f"{sum(r['allocs'].values()):,}",
                         fmt_per(pr.get("net")), fmt_per(pr.get("store")),
                         fmt_per(pr.get("other")), f"**{fmt_per(r['total_per_request'])}**"])
    return table(["peer", "request", "window", "requests in window (of all types)",
                  "allocation calls", "per request: net", "store", "other", "all threads"],
                 rows)


def readback_table(data):
    w = data.get("readback", {})
    rows = []
    for p in peers_in(w):
        ph = w[p]["phases"]
        wr, rd = stream(ph.get("write"), "produce"), stream(ph.get("read"), "consume")
        meta = (ph.get("read") or {}).get("meta") or {}
        rows.append([label(p), f"{wr['bytes'] / 1e9:.2f} GB" if wr else "–",
                     fmt_mb(wr and wr["mb_per_s"]),
                     fmt_mb(rd and rd["mb_per_s"]) if p != "null" else "n/a",
                     fmt_us(cpu_us_per_record(ph.get("read"))) if p != "null" else "n/a",
                     f"{meta['broker_minflt']:,}" if "broker_minflt" in meta else "–",
                     f"{meta['broker_majflt']:,}" if "broker_majflt" in meta else "–"])
    return table(["peer", "written", "write MB/s", "read-back MB/s", "read CPU µs/record",
                  "page faults during read: minor", "major"], rows)


def summary(raw, data):
    """One column per peer: what perf/compare-revs.sh puts into docs/benchmarks.md."""
    peers = [p for p in PEER_ORDER if any(p in data.get(w, {}) for w in data)]
    peers += sorted({p for w in data.values() for p in w} - set(peers))

    def cell(wl, name, s, what, p):
        ph = phase_of(data, wl, p, name)
        if not ph:
            return "–"
        st = shown_stream(ph, p, s)
        if what == "rate":
            return fmt_rate(st and st.get("records_per_s"))
        if what == "mb":
            return fmt_mb(st and st.get("mb_per_s"))
        if what == "p99":
            return fmt_ms(st["latency_us"]["p99"]) if st and "latency_us" in st else "–"
        if what == "cpu":
            return fmt_us(cpu_us_per_record(ph))
        if what == "null":
            return fmt_pct(null_ratio(data, wl, p, name, s))
        if what in ("minflt", "majflt"):
            m = ph.get("meta") or {}
            return f"{m['broker_' + what]:,}" if "broker_" + what in m else "–"
        return "?"

    def alloc_cell(p, name, kind):
        r = alloc_result(raw, p, name, kind) if is_sluice(p) else None
        return fmt_per(r and r["total_per_request"]) if r else ("n/a" if not is_sluice(p) else "–")

    spec = [("1 produce records/s (100 B, acks=1)", "1", "produce", "produce", "rate"),
            ("1 produce p99 ms", "1", "produce", "produce", "p99"),
            ("1 produce CPU µs/record", "1", "produce", "produce", "cpu"),
            ("1 produce: share of the null sink", "1", "produce", "produce", "null"),
            ("1 consume records/s", "1", "consume", "consume", "rate"),
            ("1 consume CPU µs/record", "1", "consume", "consume", "cpu"),
            ("2 max records/s (1 KiB, acks=all, 100 partitions)", "2", "max", "e2e", "rate"),
            ("2 max e2e p99 ms", "2", "max", "e2e", "p99"),
            ("2 max CPU µs/record", "2", "max", "e2e", "cpu"),
            ("2 max: share of the null sink", "2", "max", "e2e", "null"),
            ("2 at 50%: e2e p99 ms", "2", "half", "e2e", "p99"),
            ("2 at 50%: CPU µs/record", "2", "half", "e2e", "cpu"),
            ("read-back MB/s", "readback", "read", "consume", "mb"),
            ("read-back page faults, minor", "readback", "read", "consume", "minflt"),
            ("read-back page faults, major", "readback", "read", "consume", "majflt")]
    rows = []
    for title, wl, name, s, what in spec:
        if wl not in data:
            continue
        rows.append([title] + [cell(wl, name, s, what, p) for p in peers])
        if what == "cpu":
            # Kafka's CPU per record over each Sluice peer's: the "x less CPU".
            k = cpu_us_per_record(phase_of(data, wl, KAFKA_PEER, name))
            ratio = []
            for p in peers:
                c = cpu_us_per_record(phase_of(data, wl, p, name)) if is_sluice(p) else None
                ratio.append(f"**{fmt_x(k / c)}**" if k and c else "")
            rows.append([title.replace("CPU µs/record", "Kafka's CPU per record / this")] + ratio)
    if "alloc" in data:
        for name, kind in (("produce", "Produce"), ("fetch", "Fetch")):
            rows.append([f"allocations per {kind} request"]
                        + [alloc_cell(p, name, kind) for p in peers])
    return table(["measure"] + [label(p) for p in peers], rows)


# ------------------------------------------------------------------ charts

def bars(ax, groups, values_by_peer, ylabel, title, log=False):
    peers = [p for p in PEER_ORDER if p in values_by_peer]
    n = len(peers)
    width = 0.8 / max(n, 1)
    for i, p in enumerate(peers):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        vals = [v if v is not None else 0 for v in values_by_peer[p]]
        b = ax.bar(xs, vals, width, label=label(p), color=PEER_COLOR.get(p))
        for rect, v in zip(b, values_by_peer[p]):
            if v is None:
                ax.annotate("n/a", (rect.get_x() + rect.get_width() / 2, 0), ha="center",
                            va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def chart_throughput(data, out, target):
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))

    def vals(wl, specs):
        res = {}
        for p in PEER_ORDER:
            if p not in data.get(wl, {}):
                continue
            row = []
            for phase, s, key in specs:
                st = stream(data[wl][p]["phases"].get(phase), s)
                row.append(st.get(key) if st else None)
            res[p] = row
        return res

    bars(axes[0][0], ["produce", "consume"],
         vals("1", [("produce", "produce", "mb_per_s"), ("consume", "consume", "mb_per_s")]),
         "MB/s", "1. kafka-2014: 100 B, 6 partitions, acks=1")
    bars(axes[0][1], ["produce, max", "consumed, max", "produce, 50%", "consumed, 50%"],
         vals("2", [("max", "produce", "mb_per_s"), ("max", "e2e", "mb_per_s"),
                    ("half", "produce", "mb_per_s"), ("half", "e2e", "mb_per_s")]),
         "MB/s", "2. omb: 1 KiB, 100 partitions, 4+4 clients, acks=all")
    ax = axes[1][0]
    bars(ax, ["produced", "consumed (all groups)"],
         vals("3", [("rate", "produce", "records_per_s"), ("rate", "e2e", "records_per_s")]),
         "records/s", f"3. web: 367 topics, target {target:,}/s, 5.5 groups", log=True)
    ax.axhline(target, color="black", lw=0.8, ls="--")
    ax.annotate(f"target {target:,}/s", (1.4, target), fontsize=7, va="bottom", ha="right")
    gpt = None
    for p in data.get("3", {}):
        res = (data["3"][p]["phases"].get("rate") or {}).get("result") or {}
        gpt = res.get("config", {}).get("groups_per_topic") or gpt
    if gpt:
        ax.axhline(target * gpt, color="black", lw=0.8, ls=":")
        ax.annotate(f"needed to keep up {target * gpt:,.0f}/s", (1.4, target * gpt), fontsize=7,
                    va="bottom", ha="right")
    bars(axes[1][1], ["write", "drain"],
         vals("4", [("write", "produce", "mb_per_s"), ("drain", "consume", "mb_per_s")]),
         "MB/s", "4. backlog: 1 KiB records, 8 partitions, cold read")
    seen = {}
    for ax in axes.flat:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    order = [label(p) for p in PEER_ORDER if label(p) in seen]
    fig.legend([seen[l] for l in order], order, loc="upper center", ncol=max(len(order), 1), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path = os.path.join(out, "throughput.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_latency(data, out):
    panels = [("1", "produce", "produce", "1. produce latency at max rate (queueing)"),
              ("2", "max", "produce", "2. produce latency at max rate, acks=all"),
              ("2", "half", "e2e", "2. end-to-end latency at 50% of each peer's max"),
              ("3", "rate", "e2e", "3. end-to-end latency at the target rate")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (wl, phase, s, title) in zip(axes.flat, panels):
        for p in PEER_ORDER:
            st = stream(data.get(wl, {}).get(p, {}).get("phases", {}).get(phase), s)
            if (not st or "latency_us" not in st) and p == "null" and s == "e2e":
                st = stream(data.get(wl, {}).get(p, {}).get("phases", {}).get(phase), "produce")
            if not st or "latency_us" not in st:
                continue
            ys = [st["latency_us"][k] / 1000.0 for k, _ in PCTS]
            lab = label(p) + (" (produce only)" if p == "null" and s == "e2e" else "")
            ax.plot(range(len(PCTS)), ys, marker="o", label=lab, color=PEER_COLOR.get(p),
                    ls="--" if p == "null" else "-")
        ax.set_xticks(range(len(PCTS)))
        ax.set_xticklabels([l for _, l in PCTS])
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "latency.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def chart_timeline(data, out, target):
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for p in PEER_ORDER:
        res = ((data.get("3", {}).get(p, {}).get("phases", {}).get("rate") or {}).get("result"))
        if not res:
            continue
        pr = res.get("produce", {}).get("intervals", [])
        if pr:
            axes[0].plot([r["t_s"] for r in pr], [r["records_per_s"] for r in pr],
                         label=label(p), color=PEER_COLOR.get(p))
        e2e = res.get("e2e", {}).get("intervals", [])
        e2e = [r for r in e2e if r.get("p99_us", 0) > 0]  # intervals with no record seen
        if e2e:
            axes[1].plot([r["t_s"] for r in e2e], [r["p99_us"] / 1000.0 for r in e2e],
                         label=label(p), color=PEER_COLOR.get(p))
    axes[0].axhline(target, color="black", lw=0.8, ls="--")
    axes[0].set_title(f"3. records/s acknowledged per second (target {target:,})", fontsize=10)
    axes[0].set_xlabel("s since start (warm-up included)")
    axes[1].set_title("3. end-to-end p99 per second", fontsize=10)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("ms (log)")
    axes[1].set_xlabel("s since start (warm-up included)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "web-timeline.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------ markdown

def scaled_sizes(a):
    return {
        "1": f"{a.warmup} s warm-up + {a.duration} s at maximum rate (records written = whatever "
             f"each peer reaches), then everything read back; single node, no replication",
        "2": f"{a.warmup} s warm-up + {a.duration} s per rate; the 50% rate is half of each "
             f"peer's own measured maximum",
        "3": f"the full {a.w3_rate:,}/s"
             + (f", then a tenth of it ({a.w3_low_rate:,}/s) for latency at a rate that can be held"
                if a.w3_low_rate else "")
             + f", each for {a.warmup} s warm-up + {a.duration} s; 2 partitions per "
             f"topic (734 in all), 100 B values with 8-byte random keys, 2 producers, 1 consumer "
             f"per group (6 groups: 5 or 6 per topic, 5.5 on average); consumers stop {a.tail} s "
             f"after the producers",
        "4": f"{a.w4_bytes / 1e9:g} GB of 1 KiB records instead of 5 GB, 1 producer, acks=1; page "
             f"cache dropped before the drain (cold read)",
        "readback": f"{a.readback_bytes / 1e9:g} GB of 1 KiB records, 8 partitions, 1 producer, "
                    f"acks=1, then read back at once by 1 consumer (warm); page faults are the "
                    f"broker's over the read",
        "rf3": f"{a.rf3_rounds} round(s), each with fresh clusters of 3 brokers + 3 controllers "
               f"per peer on this machine (peers sluice and kafka only), one topic of 100 "
               f"partitions with replication factor 3, 1 KiB values without keys, acks=all, 4 "
               f"producers (librdkafka defaults: linger.ms 5, batch.size 1,000,000, no "
               f"compression; each producer's queue bounded to {a.rf3_queue:,} records); "
               f"{a.rf3_warmup:g} s warm-up + {a.duration} s at maximum rate without consumers, then "
               f"{a.warmup} s + {a.duration} s at half of it with 4 consumers, then the same at "
               f"{a.rf3_rate:,} records/s for every peer; default flush "
               f"(no fsync per write) in both",
        "alloc": f"the broker started with perf/alloc-count preloaded; 1 producer of 100 B records, "
                 f"6 partitions, acks=1, at maximum rate for {a.alloc_warm + a.alloc_measure + 1:g} s, "
                 f"then 1 consumer reads them back; in each phase the counters are dumped "
                 f"{a.alloc_warm:g} s (fetch: 1 s) after the client started and "
                 f"{a.alloc_measure:g} s later (or "
                 f"when the client ends, if sooner), and requests are counted by the client's "
                 f"librdkafka statistics at the same instants (interpolated between 100 ms samples)",
    }


def markdown(data, a, charts):
    target = a.w3_rate
    peers_meta = {}
    for wl in data.values():
        for p, e in wl.items():
            if e["peer"].get("version"):
                peers_meta[p] = e["peer"]
    lines = [
        "# Sluice side-by-side benchmark: latest run",
        "",
        f"Commit `{a.commit}`{dirty_note(a.dirty)}, "
        f"run started {a.started}, {a.wall_s / 60:.1f} min, scale `{a.scale}`.",
        f"Machine: {a.machine}. Clients and brokers share the machine's cores.",
        f"Clients: librdkafka {a.librdkafka} (sluice-perf) for every Kafka-protocol peer, "
        f"librabbitmq {a.librabbitmq} (amqp-perf) for RabbitMQ.",
        "",
        f"Reproduce: `perf/run-all.sh{' --scale quick' if a.scale == 'quick' else ''}` "
        f"(installs and starts everything itself; see perf/README.md).",
        "",
        "## Peers",
        "",
        table(["peer", "version", "flush mode", "configuration"],
              [[label(p), m.get("version", "?"), m.get("flush", "?"), m.get("config", "?")]
               for p, m in sorted(peers_meta.items(), key=lambda kv: PEER_ORDER.index(kv[0])
                                  if kv[0] in PEER_ORDER else 99)]),
        "",
        "## Headline",
        "",
        headline(data, target),
        "",
        f"![throughput]({os.path.basename(charts[0])})",
        "",
        f"![latency]({os.path.basename(charts[1])})",
        "",
    ]
    sizes = scaled_sizes(a)
    for wl in ("1", "2", "3", "4", "readback", "alloc", "rf3"):
        if wl not in data:
            continue
        info = WORKLOADS[wl]
        lines += [f"## {info['title']}", "", f"Issue: {info['issue']}.", "",
                  f"Run here: {sizes[wl]}.", ""]
        if wl == "1":
            lines.append(wl1_table(data[wl]))
        elif wl == "2":
            lines.append(wl2_table(data[wl]))
        elif wl == "3":
            lines += [wl3_table(data[wl]), "",
                      "Holds = acknowledged at >= 99% of the target, at most 0.1% of the "
                      "schedule left unsent, and every group read every record within the "
                      "tail. Unsent = records whose intended send time passed during the run "
                      "but which the producers never got to send because the peer did not keep "
                      "up; unconsumed = delivered records some group had not read by the end of "
                      "the tail.", "",
                      f"![web timeline]({os.path.basename(charts[2])})"]
        elif wl == "4":
            lines.append(wl4_table(data[wl]))
        elif wl == "readback":
            lines.append(readback_table(data))
        elif wl == "rf3":
            lines += [rf3_table(data[wl]), "", rf3_ratios(data[wl]), "",
                      "Each round started fresh clusters of every peer, one after the other "
                      "(interleaved), and ran both phases on it. Max: 4 producers at the "
                      "highest rate the cluster acknowledges, no consumers. 50%: half of that "
                      "round's own maximum, with 4 consumers; fixed: the same rate for every peer, "
                      "with 4 consumers; read of rate: records read end to end per second over the "
                      "rate (below 100%: the peer did not keep up) (end-to-end = intended send time "
                      "to a consumer seeing the record, which it can only once the high "
                      "watermark has passed it, i.e. once every ISR replica has it)."]
        else:
            lines += [alloc_table(a.raw, data), "",
                      "Allocation calls = malloc + calloc + realloc + posix_memalign + "
                      "aligned_alloc, by the thread that made them (net: sluice-net*, store: "
                      "sluice-store*, other: every other thread); requests of the phase's type "
                      "(Produce or Fetch) sent by the client in the window, and of every type "
                      "in brackets (the consumer's heartbeats and commits also cost the broker "
                      "allocations, charged here to Fetch)."]
        lines.append("")
    lines += ["## Efficiency: broker CPU per record, and the null sink's share", "",
              "Broker CPU s = user + system time of the broker process (all its threads; "
              "Kafka's JVM, RabbitMQ's Erlang VM) over the whole phase, warm-up and tail "
              "included, from /proc/PID/stat; CPU µs/record divides it by the records the "
              "phase acknowledged (warm-up included) or consumed; for e2e phases the CPU "
              "includes serving the consumers. Kafka/this CPU = Kafka's CPU per record over "
              "this peer's (above 1: this peer spends less). Of null sink = this peer's "
              "produce rate over the null sink's in the same phase, at maximum rate only. "
              "Records/s and p99 are those of the phase's main stream (produce, consume or "
              "end-to-end).", "", efficiency_table(data), ""]
    lines += ["## What failed or fell short", ""]
    found = False
    for wl in sorted(data):
        for p in peers_in(data[wl]):
            for msg in problems(wl, p, data[wl][p]):
                lines.append(f"- workload {wl} ({WORKLOADS[wl]['name']}), {label(p)}: {msg}")
                found = True
    if not found:
        lines.append("- nothing: every phase of every peer ran and exited 0")
    lines += ["", "## Run conditions", "",
              "The machine may be shared: CPU idle is the share of both cores idle during the "
              "second before each phase started; load is the 1/5/15-minute load average.", ""]
    cond = []
    for wl in sorted(data):
        for p in peers_in(data[wl]):
            for name, ph in sorted(data[wl][p]["phases"].items()):
                m = ph["meta"]
                cond.append([f"{wl} ({WORKLOADS[wl]['name']})", label(p), name,
                             f"{m.get('cpu_idle_before_pct', '?')}%", m.get("loadavg_before", "?"),
                             f"{m.get('wall_s', '?')} s", m.get("rc", "?")])
    lines.append(table(["workload", "peer", "phase", "CPU idle before", "load", "wall time",
                        "exit status"], cond))
    lines += ["", "Latencies: produce = send (or, at a fixed rate, the intended send time) to "
              "the acknowledgement; end-to-end = intended send time to the consumer seeing "
              "the record. At maximum rate, produce latency is mostly time queued in the "
              "client. MB = 10^6 bytes of keys and values.", ""]
    return "\n".join(lines)


def dirty_note(dirty):
    """How the tree differed from the commit: the harness alone, or named files."""
    paths = [p for p in dirty.split() if not p.startswith("perf/results/")]
    if not paths:
        return ""
    if all(p.startswith(("perf/", "docs/")) for p in paths):
        return " plus the then uncommitted harness in perf/ (the broker's sources as committed)"
    if len(paths) > 8:
        tops = sorted({p.split("/")[0] for p in paths})
        return f" plus uncommitted changes in {len(paths)} files under " + ", ".join(tops)
    return " plus uncommitted changes in " + " ".join(paths)


def readme_block(data, a, charts, rel):
    """The block of perf/README.md between its latest-run markers: where the figures come
    from, the headline table and the charts (paths relative to the README)."""
    dirty = dirty_note(a.dirty)
    versions = {}
    for wl in data.values():
        for p, e in wl.items():
            if e["peer"].get("version"):
                versions[p] = [label(p), e["peer"]["version"], e["peer"].get("flush", "?")]
    return "\n".join([
        table(["peer", "version", "flush mode"],
              [versions[p] for p in PEER_ORDER if p in versions]),
        "",
        f"Run of {a.started} (scale `{a.scale}`, {a.wall_s / 60:.1f} min) on commit "
        f"`{a.commit}`{dirty}.",
        f"Machine: {a.machine}; the clients and every broker share its cores.",
        "",
        f"Command: `perf/run-all.sh{' --scale quick' if a.scale == 'quick' else ''}`. "
        f"Every table, the flush mode and version of each peer, the sizes and the run "
        f"conditions: [{rel}/latest.md]({rel}/latest.md) ([JSON]({rel}/latest.json)).",
        "",
        headline(data, a.w3_rate),
        "",
    ] + [f"![{os.path.splitext(os.path.basename(c))[0]}]({rel}/{os.path.basename(c)})"
         for c in charts] + [""])


def update_readme(path, block):
    begin, end = "<!-- latest-run:begin -->", "<!-- latest-run:end -->"
    text = open(path).read()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        print(f"report: no {begin} ... {end} markers in {path}; not updated", file=sys.stderr)
        return
    with open(path, "w") as f:
        f.write(text[: i + len(begin)] + "\n" + block + text[j:])


def summary_json(data, a):
    out = {"commit": a.commit, "dirty": a.dirty.split(), "started": a.started,
           "wall_s": a.wall_s, "scale": a.scale, "machine": a.machine,
           "clients": {"librdkafka": a.librdkafka, "librabbitmq": a.librabbitmq},
           "sizes": scaled_sizes(a), "workloads": {}}
    for wl, wdata in data.items():
        w = out["workloads"].setdefault(wl, {"name": WORKLOADS.get(wl, {}).get("name", wl),
                                             "issue": WORKLOADS.get(wl, {}).get("issue"),
                                             "peers": {}})
        for p, e in wdata.items():
            entry = {"peer": e["peer"], "problems": problems(wl, p, e), "phases": {}}
            if "cache" in e:
                entry["cache"] = e["cache"]
            for name, ph in e["phases"].items():
                res = dict(ph["result"] or {})
                for s in ("produce", "consume", "e2e"):
                    if s in res:
                        res[s] = {k: v for k, v in res[s].items() if k != "intervals"}
                entry["phases"][name] = {"meta": ph["meta"], "result": res,
                                         "broker_cpu_us_per_record": cpu_us_per_record(ph)}
            if wl == "alloc":
                entry["allocs_per_request"] = {
                    kind: alloc_result(a.raw, p, name, kind)
                    for name, kind in (("produce", "Produce"), ("fetch", "Fetch"))}
            if wl == "3":
                entry["holds_rate"] = held((e["phases"].get("rate") or {}).get("result"), a.w3_rate)
                if "low" in e["phases"]:
                    entry["holds_low_rate"] = held(e["phases"]["low"].get("result"),
                                                   a.w3_low_rate)
            w["peers"][p] = entry
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale", default="full")
    ap.add_argument("--started", default="")
    ap.add_argument("--wall-s", type=int, default=0)
    ap.add_argument("--machine", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--dirty", default="")
    ap.add_argument("--librdkafka", default="?")
    ap.add_argument("--librabbitmq", default="?")
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--tail", type=float, default=10)
    ap.add_argument("--w3-rate", type=int, default=172000)
    ap.add_argument("--w3-low-rate", type=int, default=0)
    ap.add_argument("--w4-bytes", type=int, default=2 * 10**9)
    ap.add_argument("--readback-bytes", type=int, default=10**9)
    ap.add_argument("--alloc-warm", type=float, default=3)
    ap.add_argument("--alloc-measure", type=float, default=10)
    ap.add_argument("--rf3-rounds", type=int, default=2)
    ap.add_argument("--rf3-queue", type=int, default=10000)
    ap.add_argument("--rf3-warmup", type=float, default=15)
    ap.add_argument("--rf3-rate", type=int, default=10000)
    ap.add_argument("--readme", help="README whose latest-run block to rewrite")
    a = ap.parse_args()
    data = collect(a.raw)
    if not data:
        sys.exit("report: no results under " + a.raw)
    charts = [chart_throughput(data, a.out, a.w3_rate), chart_latency(data, a.out),
              chart_timeline(data, a.out, a.w3_rate)]
    with open(os.path.join(a.out, "latest.md"), "w") as f:
        f.write(markdown(data, a, charts))
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary(a.raw, data) + "\n")
    with open(os.path.join(a.out, "latest.json"), "w") as f:
        json.dump(summary_json(data, a), f, indent=1)
    if a.readme:
        rel = os.path.relpath(a.out, os.path.dirname(os.path.abspath(a.readme)))
        update_readme(a.readme, readme_block(data, a, charts, rel))
    print(os.path.join(a.out, "latest.md"))


if __name__ == "__main__":
    main()
