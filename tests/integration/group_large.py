#!/usr/bin/env python3
"""A consumer group of 5,000 members works, and group.max.size bounds a group
with GROUP_MAX_SIZE_REACHED (81), as in Kafka.

One process acts as every member over 50 raw-protocol connections (a held
JoinGroup occupies one of a connection's in-flight slots, so 100 members per
connection). Each member asks for a member id (JoinGroup v5 with an empty id
answers MEMBER_ID_REQUIRED, KIP-394) and rejoins with it; every one of the
5,000 must be in the generation (same generation, the leader sees all 5,000),
get its own assignment from SyncGroup and heartbeat without error. Sluice
kept at most 1,024 handed-out member ids, so about 4,000 members got
UNKNOWN_MEMBER_ID on their rejoin.

A second broker with group.max.size=10: member ids handed out but never used
are forgotten after the session timeout the member asked for (a client
cannot fill the table for good), and of 11 members joining one group 10
get into the generation and the 11th gets GROUP_MAX_SIZE_REACHED (Kafka
answers it on the rejoin; Sluice, whose handed-out ids are bounded by the
group size, may answer it on the id request). About 30 s.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

MEMBERS = 5000
CONNS = 50
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81


def ask_ids(conns, group, n_per_conn, session_ms=30000):
    """Every member asks for an id: returns per connection a list of
    (error, member id)."""
    out = []
    for c in conns:
        decs = lib.pipeline(c, [(11, 5, lib.join_group_body(group, "", session_ms=session_ms))] * n_per_conn)
        out.append([(r["error"], r["member_id"]) for r in map(lib.join_group_decode, decs)])
    return out


def rejoin_all(conns, group, ids):
    """Sends every member's rejoin first (they are held until the generation
    completes), then reads the answers."""
    reqs = [[(11, 5, lib.join_group_body(group, mid))] for mid in ids]
    per_conn = [[] for _ in conns]
    for i, r in enumerate(reqs):
        per_conn[i % len(conns)].append((i, r[0]))
    first = {}
    for c, items in zip(conns, per_conn):
        first[id(c)] = c.corr + 1
        buf = bytearray()
        for _, (k, v, body) in items:
            c.corr += 1
            buf += lib.frame(lib.request_header(k, v, c.corr) + body)
        c.send(bytes(buf))
    answers = [None] * len(ids)
    for c, items in zip(conns, per_conn):
        for j, (i, _) in enumerate(items):
            d = lib.Dec(c.recv_frame())
            check(d.i32() == first[id(c)] + j, "answers out of order")
            answers[i] = lib.join_group_decode(d)
    return answers


def large_group(broker):
    group = "big-group"
    conns = [lib.Conn(broker.port, timeout=120) for _ in range(CONNS)]
    try:
        t0 = time.monotonic()
        got = ask_ids(conns, group, MEMBERS // CONNS)
        ids = [mid for per in got for (err, mid) in per]
        errs = {err for per in got for (err, _) in per}
        check(errs == {MEMBER_ID_REQUIRED}, f"member id requests answered {errs}")
        check(len(set(ids)) == MEMBERS, f"{len(set(ids))} distinct member ids for {MEMBERS} members")
        log(f"{MEMBERS} member ids handed out in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        answers = rejoin_all(conns, group, ids)
        bad = [a["error"] for a in answers if a["error"] != 0]
        check(not bad, f"{len(bad)} of {MEMBERS} rejoins failed, e.g. error {bad[:1]}")
        gens = {a["generation"] for a in answers}
        check(len(gens) == 1, f"members are in generations {sorted(gens)}")
        gen = gens.pop()
        leaders = [a for a in answers if a["members"]]
        check(len(leaders) == 1, f"{len(leaders)} members got the member list")
        leader = leaders[0]
        check(leader["member_id"] == leader["leader"], "the member list went to a non-leader")
        check(sorted(m for m, _ in leader["members"]) == sorted(ids),
              f"the leader sees {len(leader['members'])} members, not the {MEMBERS}")
        log(f"all {MEMBERS} members in generation {gen} ({time.monotonic() - t0:.1f}s)")
        # SyncGroup: everyone gets its own assignment from the leader's.
        t0 = time.monotonic()
        li = ids.index(leader["member_id"])
        assignments = [(mid, b"assign:" + mid) for mid in ids]
        per_conn = [[] for _ in conns]
        for i, mid in enumerate(ids):
            body = lib.sync_group_body(group, gen, mid, assignments if i == li else ())
            per_conn[i % CONNS].append((i, (14, 3, body)))
        for c, items in zip(conns, per_conn):
            buf = bytearray()
            for _, (k, v, body) in items:
                c.corr += 1
                buf += lib.frame(lib.request_header(k, v, c.corr) + body)
            c.send(bytes(buf))
        for c, items in zip(conns, per_conn):
            for i, _ in items:
                d = lib.Dec(c.recv_frame())
                d.i32()
                err, a = lib.sync_group_decode(d)
                check(err == 0 and a == b"assign:" + ids[i], f"member {i}: SyncGroup error {err}, assignment {a!r}")
        log(f"all {MEMBERS} members synced ({time.monotonic() - t0:.1f}s)")
        for ci, c in enumerate(conns):
            mine = ids[ci::CONNS]
            for d in lib.pipeline(c, [(12, 3, lib.heartbeat_body(group, gen, mid)) for mid in mine]):
                d.i32()
                e = d.i16()
                check(e == 0, f"heartbeat error {e}")
        log(f"all {MEMBERS} members heartbeat without error")
    finally:
        for c in conns:
            c.close()


def max_size(broker):
    n = 10
    conns = [lib.Conn(broker.port, timeout=60) for _ in range(2)]
    try:
        # Ids handed out and never used expire after the session timeout.
        got = ask_ids(conns[:1], "idle-ids", n, session_ms=6000)[0]
        check({e for e, _ in got} == {MEMBER_ID_REQUIRED}, f"id requests answered {got}")
        r = lib.join_group_decode(lib.pipeline(conns[0], [(11, 5, lib.join_group_body("idle-ids", "",
                                                                                       session_ms=6000))])[0])
        if lib.TARGET == "sluice":
            check(r["error"] == GROUP_MAX_SIZE_REACHED,
                  f"id request {n + 1} with {n} unused ids answered {r['error']}")
        time.sleep(7.5)
        r = lib.join_group_decode(lib.pipeline(conns[0], [(11, 5, lib.join_group_body("idle-ids", ""))])[0])
        check(r["error"] == MEMBER_ID_REQUIRED, f"after the session timeout an id request got {r['error']}")
        log("unused member ids are forgotten after the session timeout")
        # n + 1 members join one group: one is refused with GROUP_MAX_SIZE_REACHED.
        got = ask_ids(conns[:1], "small", n + 1)[0]
        ids = [mid for e, mid in got if e == MEMBER_ID_REQUIRED]
        refused = sum(e == GROUP_MAX_SIZE_REACHED for e, _ in got)
        check(len(ids) + refused == n + 1, f"id requests answered {[e for e, _ in got]}")
        answers = rejoin_all(conns, "small", ids)
        refused += sum(a["error"] == GROUP_MAX_SIZE_REACHED for a in answers)
        joined = [a for a in answers if a["error"] == 0]
        check(len(joined) == n and refused == 1,
              f"{len(joined)} joined and {refused} refused with 81 (want {n} and 1); "
              f"errors {[a['error'] for a in answers]}")
        check(len({a["generation"] for a in joined}) == 1, "the members are not in one generation")
        log(f"group.max.size={n}: {n} members joined, member {n + 1} got GROUP_MAX_SIZE_REACHED")
    finally:
        for c in conns:
            c.close()


def test():
    # The first generation waits group.initial.rebalance.delay.ms after each
    # new member: Kafka's default, 3 s, is plenty for 5,000 rejoins sent at once.
    with lib.Broker("glarge", {"group.initial.rebalance.delay.ms": 3000}) as broker:
        large_group(broker)
        broker.stop()
    with lib.Broker("gmax", {"group.max.size": 10, "group.initial.rebalance.delay.ms": 1000}) as broker:
        max_size(broker)
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
