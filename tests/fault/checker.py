"""The fault campaign's checker: reads the workload's history (tests/fault/workload.py)
and the faults the campaign injected, and reports every anomaly with its evidence.
Standard library only.

Safety anomalies (each makes the run fail):
  lost            an acknowledged value is not at its acknowledged offset in a final read
                  (the offset is past the end, below the start, missing, or holds another)
                  or, acknowledged without an offset (librdkafka's implicit
                  acknowledgement), is in no final read of its partition
  lost-read       a value a consumer read (so the broker exposed it as committed) is
                  missing from its offset in a final read
  duplicate       one value at two or more offsets (reads, final reads, acknowledgements)
  divergent       one offset holding two different values on different reads (or in an
                  acknowledgement and a read)
  phantom         a value read that was never sent, or sent to another partition
  gap             a final read whose offsets are not contiguous from the log start
  consumer-backwards  a consumer reading an offset at or below one it read before while
                  the partition stayed assigned to it; consumer-skip: skipping offsets so
  committed-backwards a group's committed offset lower than one committed or read
                  before it (by non-overlapping time), or a member starting a new
                  assignment below the offset committed before it began
  committed-beyond-end  a committed offset past the partition's final high watermark
The run also fails when the check cannot be made: the workload crashed or never ended,
nothing was acknowledged, or a final read did not reach a partition's end.

Expected and only reported (they depend on the replication factor): failed
acknowledgements (with RF=1 a partition is unavailable while its only broker is down),
values whose fate is unknown, time without acknowledgements per partition.
"""
import collections
import json
import os
import re
import sys

VALUE_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
EXAMPLES_MAX = 8  # evidence printed per kind of anomaly; the count is always complete


class Report:
    def __init__(self):
        self.anomalies = collections.OrderedDict()  # kind -> [(time or None, text)]
        self.errors = []  # the check could not be made
        self.notes = []
        self.stats = collections.OrderedDict()

    def add(self, kind, text, t=None):
        self.anomalies.setdefault(kind, []).append((t, text))

    def count(self):
        return sum(len(v) for v in self.anomalies.values())

    def ok(self):
        return not self.anomalies and not self.errors


def load(path):
    events = []
    with open(path) as f:
        for n, ln in enumerate(f, 1):
            ln = ln.strip()
            if not ln:
                continue
            try:
                events.append(json.loads(ln))
            except ValueError:
                # A torn last line (the workload was killed) is the only acceptable one.
                events.append({"k": "torn", "line": n})
    return events


def faults_at(faults, t):
    """The faults active at time t, and the one before it, as text for evidence."""
    if t is None or not faults:
        return ""
    active = [f for f in faults if f["t_start"] <= t <= (f.get("t_end") or 1e18)]
    before = [f for f in faults if f["t_start"] <= t]
    if active:
        return " during " + "; ".join(f"fault #{f['i']} {f['text']}" for f in active)
    if before:
        f = before[-1]
        return f" after fault #{f['i']} {f['text']} (healed at {f.get('t_end', 0):.1f}s)"
    return " before any fault"


def check(history_path, faults, partitions):
    """Returns a Report. faults: [{i, text, t_start, t_end}] as the campaign ran them."""
    r = Report()
    ev = load(history_path)
    sends, acks, fails, unresolved = {}, {}, {}, {}
    unplaced = {}  # v -> (p, t): acknowledged without an offset
    refused = set()
    reads = []  # (t, c, p, o, v)
    finals = collections.defaultdict(dict)  # n -> {(p, o): v}
    final_ends = collections.defaultdict(dict)  # n -> p -> event
    commits, committed = [], []
    per_consumer = collections.defaultdict(list)
    crashes, done, topic = [], None, None
    fatal_errors = collections.Counter()
    fail_errors = collections.Counter()
    obs = collections.defaultdict(lambda: collections.defaultdict(list))  # (p,o) -> v -> [source]
    where = collections.defaultdict(lambda: collections.defaultdict(list))  # v -> (p,o) -> [source]
    torn = [e for e in ev if e["k"] == "torn"]

    for e in ev:
        k = e["k"]
        if k == "send":
            sends[e["v"]] = (e["p"], e["t"])
        elif k == "ack" and (e["o"] is None or e["o"] < 0):
            # librdkafka acknowledges without an offset the values of a request whose
            # answer it lost (a timeout, a broken connection) once a later batch of the
            # same producer succeeds ("implicitly acked"): they must be in the log.
            unplaced[e["v"]] = (e["p"], e["t"])
        elif k == "ack":
            acks[e["v"]] = (e["p"], e["o"], e["t"])
            obs[(e["p"], e["o"])][e["v"]].append(f"ack@{e['t']:.1f}s")
            where[e["v"]][(e["p"], e["o"])].append(f"ack@{e['t']:.1f}s")
        elif k == "fail":
            fails[e["v"]] = e
            fail_errors[e["err"]] += 1
        elif k == "unresolved":
            unresolved[e["v"]] = e
        elif k == "produce-refused":
            refused.add(e["v"])
        elif k == "read":
            reads.append((e["t"], e["c"], e["p"], e["o"], e["v"]))
            per_consumer[e["c"]].append(e)
            src = f"consumer {e['c']}@{e['t']:.1f}s"
            obs[(e["p"], e["o"])][e["v"]].append(src)
            where[e["v"]][(e["p"], e["o"])].append(src)
        elif k in ("assign", "revoke"):
            per_consumer[e["c"]].append(e)
        elif k == "final":
            finals[e["n"]][(e["p"], e["o"])] = e["v"]
            src = f"final read {e['n']}"
            obs[(e["p"], e["o"])][e["v"]].append(src)
            where[e["v"]][(e["p"], e["o"])].append(src)
        elif k == "final-end":
            final_ends[e["n"]][e["p"]] = e
        elif k == "commit":
            commits.append(e)
        elif k == "committed":
            committed.append(e)
        elif k == "client-error" and e.get("fatal"):
            fatal_errors[f"{e['who']}: {e['err']} {e.get('msg', '')}"] += 1
        elif k == "crash":
            crashes.append(e)
        elif k == "done":
            done = e
        elif k == "topic":
            topic = e

    # ---- could the check be made at all?
    for e in crashes:
        r.errors.append(f"the workload's {e['who']} crashed: {e['trace']}")
    if done is None:
        r.errors.append("the workload never finished (no 'done' in its history): nothing after that was checked")
    if topic is None:
        r.errors.append("the workload never created its topic")
    if not acks and not unplaced:
        r.errors.append("no value was acknowledged: the workload could not run")
    if torn and done is not None:
        r.errors.append(f"unreadable history lines {[t['line'] for t in torn][:5]}")
    for n in (1, 2):
        ends = final_ends.get(n, {})
        for p in range(partitions):
            fe = ends.get(p)
            if done is not None and (fe is None or not fe["complete"]):
                r.errors.append(f"final read {n} of partition {p} did not reach the partition's end: {fe}")

    r.stats["sent"] = len(sends)
    r.stats["acknowledged"] = len(acks) + len(unplaced)
    r.stats["failed"] = len(fails)
    r.stats["unresolved"] = len(unresolved)
    r.stats["consumer reads"] = len(reads)
    r.stats["final records"] = len(finals.get(1, {}))
    r.stats["commits"] = sum(1 for c in commits if c.get("offs"))
    if fail_errors:
        r.notes.append("failed acknowledgements (expected while a partition has no leader): " +
                       ", ".join(f"{k} x{v}" for k, v in fail_errors.most_common()))
    for what, n in fatal_errors.most_common():
        r.notes.append(f"fatal client error x{n}: {what}")

    check_lost(r, acks, reads, finals, final_ends, faults)
    check_unplaced(r, unplaced, finals, faults)
    check_locations(r, obs, where, faults)
    timed_out = sum(n for err, n in fail_errors.items() if "_MSG_TIMED_OUT" in err)
    if "duplicate" in r.anomalies and timed_out:
        r.notes.append(f"{timed_out} value(s) timed out in the producers: librdkafka then bumps the idempotent "
                       "producer's epoch and may send values it had already sent (possibly written) again under "
                       "the new epoch, which no broker can deduplicate (confluentinc/librdkafka#4953); the "
                       "duplicates stay anomalies: run with a message timeout longer than any fault "
                       "(--message-timeout-ms, 60000 by default with RF>1) to tell the broker's apart")
    check_phantoms(r, reads, finals, sends, faults)
    check_gaps(r, finals, final_ends)
    check_consumers(r, per_consumer, faults)
    check_committed(r, commits, committed, per_consumer, final_ends, faults)
    indeterminate(r, fails, unresolved, finals, acks)
    unavailability(r, acks, sends, partitions, faults)
    return r


def check_lost(r, acks, reads, finals, final_ends, faults):
    for n, final in sorted(finals.items()):
        ends = final_ends.get(n, {})
        for v, (p, o, t) in acks.items():
            got = final.get((p, o))
            if got == v:
                continue
            fe = ends.get(p, {})
            if got is not None:
                why = f"the offset holds {got!r}"
            elif fe and o >= fe["high"]:
                why = f"the partition ends at {fe['high']} (high watermark)"
            elif fe and o < fe["low"]:
                why = f"the partition starts at {fe['low']} (log start)"
            else:
                why = "the offset is missing from the read"
            r.add("lost", f"{v!r} acknowledged at partition {p} offset {o} at {t:.1f}s{faults_at(faults, t)}; "
                  f"final read {n}: {why}", t)
        seen = set()
        for t, c, p, o, v in reads:
            if (p, o, v) in seen or v in acks:
                continue
            seen.add((p, o, v))
            if (p, o) not in final:
                fe = ends.get(p, {})
                r.add("lost-read", f"{v!r} read by consumer {c} at partition {p} offset {o} at {t:.1f}s"
                      f"{faults_at(faults, t)}; final read {n} has no offset {o} (log {fe.get('low')}.."
                      f"{fe.get('high')})", t)


def check_unplaced(r, unplaced, finals, faults):
    """Values acknowledged without an offset: librdkafka's idempotent producer reports
    those of a request whose answer it never got (a timeout, a broken connection) as
    delivered once a later batch succeeds, its sequence proving them written. Each must
    be in every final read of its partition (at most once: check_locations)."""
    if unplaced:
        r.notes.append(f"{len(unplaced)} value(s) acknowledged without an offset (librdkafka's implicit "
                       "acknowledgement after a lost answer); each is looked for in the final reads")
    held = {n: {(fp, fv) for (fp, _), fv in final.items()} for n, final in finals.items()}
    for v, (p, t) in sorted(unplaced.items(), key=lambda kv: kv[1][1]):
        for n in sorted(held):
            if (p, v) not in held[n]:
                r.add("lost", f"{v!r} acknowledged (without an offset) at partition {p} at {t:.1f}s"
                      f"{faults_at(faults, t)}; final read {n} does not have it", t)


def check_locations(r, obs, where, faults):
    for (p, o), vals in sorted(obs.items()):
        if len(vals) > 1:
            ev = "; ".join(f"{v!r} by {', '.join(src[:4])}{'...' if len(src) > 4 else ''}"
                           for v, src in vals.items())
            r.add("divergent", f"partition {p} offset {o} holds different values: {ev}")
    for v, locs in sorted(where.items(), key=lambda kv: str(kv[0])):
        if len(locs) > 1:
            ev = "; ".join(f"partition {p} offset {o} ({', '.join(src[:3])})" for (p, o), src in sorted(locs.items()))
            r.add("duplicate", f"{v!r} at {len(locs)} offsets: {ev}")


def check_phantoms(r, reads, finals, sends, faults):
    seen = set()
    items = [(t, f"consumer {c}", p, o, v) for t, c, p, o, v in reads]
    for n, final in sorted(finals.items()):
        items += [(None, f"final read {n}", p, o, v) for (p, o), v in final.items()]
    for t, who, p, o, v in items:
        if (p, o, v) in seen:
            continue
        seen.add((p, o, v))
        s = sends.get(v)
        if s is None:
            r.add("phantom", f"{who} read {v!r} at partition {p} offset {o}, a value never sent"
                  f"{faults_at(faults, t)}", t)
        elif s[0] != p:
            r.add("phantom", f"{who} read {v!r} at partition {p} offset {o}, but it was sent to partition {s[0]}", t)


def check_gaps(r, finals, final_ends):
    for n, final in sorted(finals.items()):
        for p, fe in sorted(final_ends.get(n, {}).items()):
            if fe["high"] < 0:
                continue
            missing = [o for o in range(fe["low"], fe["high"]) if (p, o) not in final]
            if missing:
                r.add("gap", f"final read {n} of partition {p} (log {fe['low']}..{fe['high']}) lacks "
                      f"{len(missing)} offsets: {spans(missing)}")
            if fe["low"] != 0:
                r.notes.append(f"final read {n}: partition {p} starts at offset {fe['low']}, not 0")


def spans(offsets):
    out, start, prev = [], None, None
    for o in offsets:
        if start is None:
            start = prev = o
        elif o == prev + 1:
            prev = o
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = o
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out[:10]) + (" ..." if len(out) > 10 else "")


def check_consumers(r, per_consumer, faults):
    """Within one assignment (assign .. revoke) a consumer's offsets of a partition rise
    by one from record to record: no going back, no skipping."""
    for c, evs in sorted(per_consumer.items()):
        last = {}
        for e in evs:
            if e["k"] == "assign":
                last = {p: None for p in e["parts"]}
            elif e["k"] == "revoke":
                last = {}
            elif e["k"] == "read":
                p, o = e["p"], e["o"]
                if p not in last:
                    continue
                prev = last[p]
                if prev is not None and o <= prev[0]:
                    r.add("consumer-backwards", f"consumer {c} read partition {p} offset {o} ({e['v']!r}) at "
                          f"{e['t']:.1f}s after offset {prev[0]} ({prev[1]!r}) at {prev[2]:.1f}s within one "
                          f"assignment{faults_at(faults, e['t'])}", e["t"])
                elif prev is not None and o > prev[0] + 1:
                    r.add("consumer-skip", f"consumer {c} read partition {p} offset {o} at {e['t']:.1f}s right "
                          f"after offset {prev[0]} within one assignment (skipped {o - prev[0] - 1})"
                          f"{faults_at(faults, e['t'])}", e["t"])
                last[p] = (o, e["v"], e["t"])


def check_committed(r, commits, committed, per_consumer, final_ends, faults):
    # Observations of partition p's committed offset, each with the interval in which
    # it took effect or was seen: a successful commit, or a read of the committed offsets.
    seen = collections.defaultdict(list)  # p -> [(t0, t1, offset, what)]
    for e in commits:
        for p, o in (e.get("offs") or {}).items():
            seen[int(p)].append((e["t0"], e["t"], o, f"commit by consumer {e['c']}"))
    for e in committed:
        for p, o in (e.get("offs") or {}).items():
            seen[int(p)].append((e["t0"], e["t"], o, "committed offsets read"))
    for p, obs in sorted(seen.items()):
        obs.sort()
        best = None  # highest offset among observations that ended before the current one began
        done = sorted(obs, key=lambda x: x[1])
        j = 0
        reported = 0
        for t0, t1, o, what in obs:
            while j < len(done) and done[j][1] < t0:
                if best is None or done[j][2] > best[2]:
                    best = done[j]
                j += 1
            if best is not None and o < best[2]:
                reported += 1
                r.add("committed-backwards", f"partition {p}: {what} at {t0:.1f}-{t1:.1f}s gives offset {o}, after "
                      f"{best[3]} at {best[0]:.1f}-{best[1]:.1f}s gave {best[2]}{faults_at(faults, t0)}", t0)
        # A member starting an assignment below what was committed before it began.
        for c, evs in per_consumer.items():
            start = None
            for e in evs:
                if e["k"] == "assign" and p in e["parts"]:
                    start = e["t"]
                elif e["k"] == "revoke":
                    start = None
                elif e["k"] == "read" and e["p"] == p and start is not None:
                    before = [x for x in obs if x[1] < start]
                    if before:
                        top = max(before, key=lambda x: x[2])
                        if e["o"] < top[2]:
                            r.add("committed-backwards", f"partition {p}: consumer {c}, assigned at {start:.1f}s, "
                                  f"began reading at offset {e['o']} although {top[3]} at {top[1]:.1f}s gave "
                                  f"{top[2]}{faults_at(faults, start)}", start)
                    start = None
        fe = final_ends.get(1, {}).get(p)
        last = max((x for x in obs if x[3] == "committed offsets read"), key=lambda x: x[1], default=None)
        if fe and last and fe["high"] >= 0 and last[2] > fe["high"]:
            r.add("committed-beyond-end", f"partition {p}: committed offset {last[2]} (read at {last[1]:.1f}s) is past "
                  f"the partition's end {fe['high']}")


def indeterminate(r, fails, unresolved, finals, acks):
    final = finals.get(1, {})
    present = set(final.values())
    failed_in = sum(1 for v in fails if v in present)
    unres_in = sum(1 for v in unresolved if v in present)
    r.stats["failed but in the log"] = failed_in
    r.stats["unresolved but in the log"] = unres_in
    if failed_in:
        r.notes.append(f"{failed_in} of {len(fails)} values whose acknowledgement failed are in the log anyway "
                       "(a failed acknowledgement is not a promise that the value is absent)")


def unavailability(r, acks, sends, partitions, faults=()):
    by_p = collections.defaultdict(list)
    for v, (p, o, t) in acks.items():
        by_p[p].append(t)
    worst, top = [], None  # top: (gap, p, from, to)
    for p in range(partitions):
        ts = sorted(by_p.get(p, []))
        gap, a, b = max(((b - a, a, b) for a, b in zip(ts, ts[1:])), default=(0.0, 0.0, 0.0))
        worst.append(f"p{p} {gap:.1f}s")
        if top is None or gap > top[0]:
            top = (gap, p, a, b)
    r.stats["longest time without an acknowledgement"] = ", ".join(worst)
    if top and top[0] > 0:
        gap, p, a, b = top
        during = [f"#{f['i']} {f['text']} ({f['t_start']:.1f}-{f.get('t_end') or f['t_start']:.1f}s)"
                  for f in faults if f["t_start"] <= b and (f.get("t_end") or f["t_start"]) >= a]
        r.stats["longest of them"] = (f"p{p} {gap:.1f}s, from {a:.1f}s to {b:.1f}s; faults in it: "
                                      + ("; ".join(during) if during else "none"))


def render(r, out):
    """Prints the report; returns nothing."""
    for k, v in r.stats.items():
        out(f"  {k}: {v}")
    for n in r.notes:
        out(f"  note: {n}")
    for kind, items in r.anomalies.items():
        out(f"  ANOMALY {kind}: {len(items)}")
        for t, text in items[:EXAMPLES_MAX]:
            out(f"    - {text}")
        if len(items) > EXAMPLES_MAX:
            out(f"    ... and {len(items) - EXAMPLES_MAX} more")
    for e in r.errors:
        out(f"  CHECK FAILED: {e}")


def main(argv):
    """checker.py RUN_DIR: checks a kept run again (its history.jsonl and run.json)."""
    if len(argv) != 2:
        print(f"usage: {argv[0]} RUN_DIR (a directory the campaign kept)", file=sys.stderr)
        return 2
    with open(os.path.join(argv[1], "run.json")) as f:
        run = json.load(f)
    r = check(os.path.join(argv[1], "history.jsonl"), run["faults"], run["partitions"])
    for p in run.get("problems", []):
        r.add("unhealed", p)
    render(r, print)
    print("OK, no anomaly" if r.ok() else "FAILED")
    return 0 if r.ok() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
