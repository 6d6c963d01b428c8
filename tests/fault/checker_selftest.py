#!/usr/bin/env python3
"""Proves the fault campaign's checker (tests/fault/checker.py) finds what it claims to:
for each kind of anomaly, a small hand-made history that has exactly that anomaly is
reported as that kind, with its evidence, and a clean history is reported clean. A
history the check cannot judge (no end, nothing acknowledged, an incomplete final read)
fails as such. Standard library only; a second or so.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

P = 2  # partitions in these histories


def clean():
    """Two values per partition, acknowledged, read by consumer 0, committed, read back."""
    ev = [{"k": "topic", "t": 0, "rf": 1}, {"k": "assign", "t": 0.5, "c": 0, "parts": [0, 1]}]
    t = 1.0
    for p in range(P):
        for o in range(2):
            v = f"0.1.{p * 2 + o}"
            ev += [{"k": "send", "t": t, "v": v, "p": p}, {"k": "ack", "t": t + 0.1, "v": v, "p": p, "o": o},
                   {"k": "read", "t": t + 0.2, "c": 0, "p": p, "o": o, "v": v}]
            t += 1
    ev += [{"k": "commit", "t0": 9.0, "t": 9.1, "c": 0, "offs": {"0": 2, "1": 2}},
           {"k": "committed", "t0": 9.5, "t": 9.6, "offs": {"0": 2, "1": 2}}]
    for n in (1, 2):
        for p in range(P):
            for o in range(2):
                ev.append({"k": "final", "n": n, "p": p, "o": o, "v": f"0.1.{p * 2 + o}"})
            ev.append({"k": "final-end", "n": n, "p": p, "low": 0, "high": 2, "last": 1, "complete": True})
    ev.append({"k": "done", "t": 20})
    return ev


def run(ev):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for e in ev:
            f.write(json.dumps(e) + "\n")
    try:
        return checker.check(f.name, [{"i": 1, "text": "kill -9 broker 1", "t_start": 2.0, "t_end": 4.0}], P)
    finally:
        os.unlink(f.name)


def final(ev, n, p, o):
    return next(e for e in ev if e["k"] == "final" and e["n"] == n and e["p"] == p and e["o"] == o)


def case_lost(ev):
    # the last record of partition 1 is gone from both final reads (log ends at 1)
    ev[:] = [e for e in ev if not (e["k"] == "final" and e["p"] == 1 and e["o"] == 1)]
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 1:
            e["high"] = 1
    return "lost", "ends at 1"


def case_ack_without_offset(ev):
    # librdkafka's implicit acknowledgement (o None in its report); the value is there
    for e in ev:
        if e["k"] == "ack" and e["v"] == "0.1.2":
            e["o"] = None
    return None, ""


def case_ack_without_offset_lost(ev):
    # acknowledged without an offset, and missing from the final reads: lost as well
    for e in ev:
        if e["k"] == "ack" and e["v"] == "0.1.3":
            e["o"] = None
    ev[:] = [e for e in ev if not (e["k"] == "final" and e["p"] == 1 and e["o"] == 1)]
    ev[:] = [e for e in ev if not (e["k"] == "read" and e["v"] == "0.1.3")]
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 1:
            e["high"] = 1
    return "lost", "without an offset"


def case_lost_read(ev):
    # a value read (never acknowledged: its ack is missing) then gone
    ev[:] = [e for e in ev if not (e["k"] == "ack" and e["v"] == "0.1.3")]
    ev[:] = [e for e in ev if not (e["k"] == "final" and e["p"] == 1 and e["o"] == 1)]
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 1:
            e["high"] = 1
    return "lost-read", "0.1.3"


def case_duplicate(ev):
    # the value at partition 0 offset 0 also at a new offset 2
    for n in (1, 2):
        ev.append({"k": "final", "n": n, "p": 0, "o": 2, "v": "0.1.0"})
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 0:
            e["high"] = 3
    return "duplicate", "at 2 offsets"


def case_divergent(ev):
    # the second final read sees another (sent) value at partition 0 offset 1
    ev.insert(0, {"k": "send", "t": 0.1, "v": "1.1.0", "p": 0})
    final(ev, 2, 0, 1)["v"] = "1.1.0"
    return "divergent", "different values"


def case_phantom(ev):
    final(ev, 1, 1, 0)["v"] = "7.7.7"
    final(ev, 2, 1, 0)["v"] = "7.7.7"
    return "phantom", "never sent"


def case_gap(ev):
    # offset 0 of partition 0 missing from both final reads although the log starts at 0
    ev[:] = [e for e in ev if not (e["k"] == "final" and e["p"] == 0 and e["o"] == 0)]
    return "gap", "lacks 1 offsets"


def case_consumer_backwards(ev):
    ev.insert(-1, {"k": "read", "t": 8.0, "c": 0, "p": 0, "o": 0, "v": "0.1.0"})
    return "consumer-backwards", "within one assignment"


def case_consumer_backwards_ok_after_revoke(ev):
    # re-reading after a revoke and a new assignment is at-least-once, not an anomaly
    ev.insert(-1, {"k": "revoke", "t": 7.9, "c": 0, "parts": [0, 1]})
    ev.insert(-1, {"k": "assign", "t": 7.95, "c": 0, "parts": [0, 1]})
    ev.insert(-1, {"k": "read", "t": 8.0, "c": 0, "p": 0, "o": 1, "v": "0.1.1"})
    return None, None


def case_consumer_skip(ev):
    # a third value at partition 1 offset 2; consumer 0 reads offset 0 then 2, never 1
    ev[:] = [e for e in ev if not (e["k"] == "read" and e["p"] == 1 and e["o"] == 1)]
    at = next(i for i, e in enumerate(ev) if e["k"] == "commit")
    ev[at:at] = [{"k": "send", "t": 5.0, "v": "0.1.9", "p": 1}, {"k": "ack", "t": 5.1, "v": "0.1.9", "p": 1, "o": 2},
                 {"k": "read", "t": 5.2, "c": 0, "p": 1, "o": 2, "v": "0.1.9"}]
    for n in (1, 2):
        ev.append({"k": "final", "n": n, "p": 1, "o": 2, "v": "0.1.9"})
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 1:
            e["high"] = 3
    return "consumer-skip", "skipped 1"


def case_committed_backwards(ev):
    ev.insert(-1, {"k": "committed", "t0": 10.0, "t": 10.1, "offs": {"0": 1, "1": 2}})
    return "committed-backwards", "gives offset 1"


def case_committed_overlap_ok(ev):
    # a read overlapping a commit in time may see either value
    ev.insert(-1, {"k": "committed", "t0": 8.9, "t": 9.2, "offs": {"0": 1}})
    return None, None


def case_committed_beyond_end(ev):
    ev.insert(-1, {"k": "committed", "t0": 10.0, "t": 10.1, "offs": {"0": 5}})
    return "committed-beyond-end", "past the partition's end"


def case_unjudgeable(ev):
    ev[:] = [e for e in ev if e["k"] != "done"]
    return "error", "never finished"


def case_incomplete(ev):
    for e in ev:
        if e["k"] == "final-end" and e["p"] == 0 and e["n"] == 2:
            e["complete"] = False
    return "error", "did not reach"


def case_nothing_acked(ev):
    ev[:] = [e for e in ev if e["k"] not in ("ack",)]
    return "error", "no value was acknowledged"


def main():
    failures = 0
    r = run(clean())
    if not r.ok():
        print(f"FAIL clean history reported: {r.anomalies} {r.errors}")
        failures += 1
    else:
        print("ok   clean history: no anomaly")
    cases = [(n, f) for n, f in sorted(globals().items()) if n.startswith("case_")]
    for name, fn in cases:
        ev = clean()
        kind, words = fn(ev)
        r = run(ev)
        if kind is None:
            good = r.ok()
            got = "clean" if good else f"{dict(r.anomalies)} {r.errors}"
        elif kind == "error":
            good = any(words in e for e in r.errors)
            got = r.errors
        else:
            items = r.anomalies.get(kind, [])
            good = any(words in text for _, text in items)
            got = {k: [t for _, t in v] for k, v in r.anomalies.items()}
        print(f"{'ok  ' if good else 'FAIL'} {name[5:]}: {'expected ' + kind if kind else 'no anomaly'}"
              + ("" if good else f"; got {got}"))
        if good and kind not in (None, "error"):
            print(f"       {r.anomalies[kind][0][1]}")
        failures += not good
    print(f"{len(cases) + 1 - failures} of {len(cases) + 1} cases right")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
