#!/usr/bin/env python3
"""Committed offsets are kept exactly, only for partitions that exist, only
from requests that decode whole, and without leaking memory (raw protocol).

- Strings with NULs: Kafka strings are bytes with a length. Offsets committed
  for group "g\\0nul" with metadata "Hello\\0world!" (12 bytes) come back
  from OffsetFetch as those 12 bytes, apart from group "g"'s, before and
  after a restart (replay of __consumer_offsets). A member of group
  "j\\0g" (client id, protocol type and name, metadata and assignment
  all with NULs) gets them back from JoinGroup, SyncGroup and
  DescribeGroups, and the protocol type after a restart. Sluice cut them
  at the first NUL.
- Unknown topics: a commit for a topic that does not exist, or a partition
  beyond the topic's count, is answered UNKNOWN_TOPIC_OR_PARTITION (3) and
  not stored. Sluice stored it and answered 0.
- A truncated OffsetCommit (cut inside a partition's metadata string)
  commits nothing and gets no success answer (the connection is closed, as
  Kafka closes it on a request it cannot parse). Sluice committed and
  answered 0.
- OffsetDelete does not leak: 600 rounds of OffsetDelete + OffsetCommit of
  one partition in a group holding 500 offsets (a 200-byte topic name) grow
  the broker's RSS by less than 12 MB, and replaying those records at a
  restart too. Sluice leaked about 100 kB per OffsetDelete (the rebuilt
  offset table dropped a copy of every topic name), at run time and again
  when the records were replayed.
About 20 s.
"""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

PARTS = 500
LONG_TOPIC = "t" + "x" * 199
ROUNDS = 600
RSS_GROWTH_MAX_KB = 12 * 1024


def commit(c, group, topics, **kw):
    return lib.offset_commit_decode(c.request(8, 7, lib.offset_commit_body(group, topics, **kw)))


def fetch(c, group, topics):
    return lib.offset_fetch_decode(c.request(9, 5, lib.offset_fetch_body(group, topics)))[0]


def nul_strings(broker, c):
    meta = b"Hello\x00world!"
    r = commit(c, b"g\x00nul", {"ex": [(0, 42, meta)]})
    check(r == {(b"ex", 0): 0}, f"commit answered {r}")
    r = commit(c, b"g", {"ex": [(0, 7, b"plain")]})
    check(r == {(b"ex", 0): 0}, f"commit answered {r}")
    got = fetch(c, b"g\x00nul", {"ex": [0]})[(b"ex", 0)]
    check(got[:2] == (42, meta), f"group g\\0nul fetched {got}, want (42, {meta!r})")
    got = fetch(c, b"g", {"ex": [0]})[(b"ex", 0)]
    check(got[:2] == (7, b"plain"), f"group g fetched {got}")
    log("commit metadata and group ids with NULs round-trip through OffsetCommit/OffsetFetch")


def nul_member(c):
    """One member of group j\\0g, with NULs in every string it gives."""
    group, cid, ptype = b"j\x00g", b"cl\x00i", b"con\x00sumer"
    protos = ((b"ra\x00nge", b"m\x00eta"),)
    body = lib.join_group_body(group, "", protocol_type=ptype, protocols=protos)
    r = lib.join_group_decode(c.request(11, 5, body, client_id=cid))
    check(r["error"] == 79 and r["member_id"].startswith(cid + b"-"),
          f"id request answered {r['error']}, member id {r['member_id']!r}")
    mid = r["member_id"]
    body = lib.join_group_body(group, mid, protocol_type=ptype, protocols=protos)
    r = lib.join_group_decode(c.request(11, 5, body, client_id=cid))
    check(r["error"] == 0 and r["protocol"] == b"ra\x00nge" and r["leader"] == mid and
          r["members"] == [(mid, b"m\x00eta")], f"JoinGroup answered {r}")
    gen = r["generation"]
    err, a = lib.sync_group_decode(c.request(14, 3, lib.sync_group_body(group, gen, mid, [(mid, b"as\x00sign")]),
                                             client_id=cid))
    check(err == 0 and a == b"as\x00sign", f"SyncGroup answered {err}, {a!r}")
    d = describe(c, group)
    check(d["ptype"] == ptype and d["protocol"] == b"ra\x00nge" and d["members"] == [(mid, cid, b"m\x00eta",
                                                                                      b"as\x00sign")],
          f"DescribeGroups answered {d}")
    # Leave, so the group is Empty (and keeps its protocol type) at the restart.
    dd = c.request(13, 1, lib.Enc().string(group).string(mid).done())
    dd.i32()
    check(dd.i16() == 0, "LeaveGroup failed")
    log("a member's strings with NULs come back from JoinGroup, SyncGroup and DescribeGroups")


def describe(c, group):
    d = c.request(15, 1, lib.Enc().array_len(1).string(group).done())
    d.i32()
    check(d.array_len() == 1, "DescribeGroups: not one group")
    out = {"error": d.i16(), "group": d.string_raw(), "state": d.string(), "ptype": d.string_raw(),
           "protocol": d.string_raw(), "members": []}
    for _ in range(d.array_len()):
        out["members"].append((d.string_raw(), d.string_raw(), (d.string_raw(), d.bytes_())[1], d.bytes_()))
    return out


def unknown_topics(c, nparts):
    r = commit(c, "gu", {"nosuch": [(0, 5, "")], "ex": [(nparts, 5, ""), (-1, 5, ""), (0, 9, "")]})
    want = {(b"nosuch", 0): 3, (b"ex", nparts): 3, (b"ex", -1): 3, (b"ex", 0): 0}
    check(r == want, f"commit answered {r}, want {want}")
    got = fetch(c, "gu", None)
    check(set(got) == {(b"ex", 0)}, f"group gu holds offsets for {sorted(got)}")
    log("commits for unknown topics and partitions are answered 3 and not stored")


def truncated(broker):
    body = lib.offset_commit_body("gt", {"ex": [(0, 11, "abcdef")]})
    with lib.Conn(broker.port) as c:
        c.send(lib.frame(lib.request_header(8, 7, 1) + body[:-3]))
        try:
            resp = c.recv_frame()
            d = lib.Dec(resp)
            d.i32()
            errs = lib.offset_commit_decode(d)
            check(0 not in errs.values(), f"a truncated OffsetCommit was answered {errs}")
        except (lib.ConnectionClosed, socket.timeout, ConnectionResetError):
            pass
    with lib.Conn(broker.port) as c:
        got = fetch(c, "gt", {"ex": [0]})[(b"ex", 0)]
        check(got[0] == -1, f"a truncated OffsetCommit committed {got}")
    log("a truncated OffsetCommit commits nothing")


def rss_after(broker, fn):
    before = lib.vm_kb(broker.pid)
    fn()
    return lib.vm_kb(broker.pid) - before


def offset_delete_leak(broker, c):
    group = "gleak"
    r = commit(c, group, {LONG_TOPIC: [(p, 1, "") for p in range(PARTS)]})
    check(set(r.values()) == {0}, f"initial commit answered {set(r.values())}")

    def rounds(n):
        for i in range(n):
            p = i % PARTS
            dels, coms = lib.pipeline(c, [(47, 0, lib.offset_delete_body(group, {LONG_TOPIC: [p]})),
                                          (8, 7, lib.offset_commit_body(group, {LONG_TOPIC: [(p, i, "")]}))])
            err, parts = lib.offset_delete_decode(dels)
            check(err == 0 and set(parts.values()) == {0}, f"OffsetDelete answered {err} {parts}")
            coms.i32()
    rounds(50)  # warm up the allocator
    grew = rss_after(broker, lambda: rounds(ROUNDS))
    log(f"{ROUNDS} OffsetDelete+OffsetCommit rounds: RSS grew {grew} kB")
    # (Sluice's bound: a JVM's heap grows by its own rules)
    check(grew < RSS_GROWTH_MAX_KB or lib.TARGET != "sluice", f"RSS grew {grew} kB over {ROUNDS} OffsetDelete rounds")
    got = fetch(c, group, None)
    check(len(got) == PARTS, f"the group holds {len(got)} offsets, want {PARTS}")


def test():
    with lib.Broker("goffsets", {"num.partitions": PARTS}) as broker:
        with lib.Conn(broker.port, timeout=30) as c:
            nparts = c.ensure_topic("ex")
            c.ensure_topic(LONG_TOPIC)
            nul_strings(broker, c)
            nul_member(c)
            unknown_topics(c, nparts)
        truncated(broker)
        with lib.Conn(broker.port, timeout=30) as c:
            offset_delete_leak(broker, c)
        broker.restart()
        with lib.Conn(broker.port, timeout=30) as c:
            # The first request for a group loads its __consumer_offsets partition.
            grew = rss_after(broker, lambda: fetch(c, "gleak", {LONG_TOPIC: [0]}))
            log(f"replaying the OffsetDelete rounds at a restart: RSS grew {grew} kB")
            check(grew < RSS_GROWTH_MAX_KB or lib.TARGET != "sluice", f"replay grew RSS by {grew} kB")
            check(len(fetch(c, "gleak", None)) == PARTS, "offsets lost at the restart")
            got = fetch(c, b"g\x00nul", {"ex": [0]})[(b"ex", 0)]
            check(got[:2] == (42, b"Hello\x00world!"), f"after a restart group g\\0nul fetched {got}")
            got = fetch(c, b"g", {"ex": [0]})[(b"ex", 0)]
            check(got[:2] == (7, b"plain"), f"after a restart group g fetched {got}")
            d = describe(c, b"j\x00g")
            check(d["state"] == "Empty" and d["ptype"] == b"con\x00sumer", f"after a restart: {d}")
            log("strings with NULs survive a restart")
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
