#!/usr/bin/env python3
"""Kafka-protocol probes the fault campaign uses to see the cluster it breaks: which
brokers a broker lists (registered and unfenced), every partition's leader, and the
controller quorum's leader. Standard library only (tests/integration/lib.py's codec).

Imported by tests/fault/campaign.py on loopback; in --netns mode run as a script inside
the clients' namespace (the campaign itself stays outside every namespace):
    probe.py metadata HOST:PORT TOPIC...    {"brokers": [...], "leaders": {"t/p": id}}
    probe.py quorum HOST:PORT...            {"leader": id, "epoch": n} or {"leader": -1}
Both print JSON; a node that does not answer gives {"error": "..."}.
"""
import json
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
import lib  # noqa: E402

TIMEOUT_S = 3.0


class Probes:
    """Probes on loopback, keeping one connection per address: every closed connection
    leaves its ephemeral local port in TIME_WAIT for 60 s, and that range holds the
    cluster's ports, which a restarted node must bind again."""

    def __init__(self):
        self.conns = {}

    def _conn(self, host, port):
        c = self.conns.get((host, port))
        if c is None:
            c = lib.Conn(port, timeout=TIMEOUT_S, host=host)
            self.conns[(host, port)] = c
        return c

    def _drop(self, host, port):
        c = self.conns.pop((host, port), None)
        if c:
            c.close()

    def metadata(self, addr, topics):
        host, port = split(addr)
        try:
            brokers, tops = self._conn(host, port).metadata(topics, auto_create=False)
        except (OSError, lib.ProtocolError, struct.error) as e:
            self._drop(host, port)
            return {"error": f"{addr}: {e}"}
        leaders = {}
        for t, (terr, parts) in tops.items():
            for p, (perr, leader) in parts.items():
                leaders[f"{t}/{p}"] = leader if perr == 0 or leader >= 0 else -1
            if terr:
                leaders[f"{t}/-"] = -terr
        return {"brokers": sorted(b[0] for b in brokers), "leaders": leaders}

    def quorum(self, addrs):
        body = b"\x02" + b"\x13__cluster_metadata" + b"\x02" + struct.pack(">i", 0) + b"\x00\x00\x00"
        for addr in addrs:
            host, port = split(addr)
            try:
                d = self._conn(host, port).request(55, 0, body, flexible_req=True)
                d.i16()
                d.uv()
                d.string(True)
                d.uv()
                d.i32()
                d.i16()
                leader, epoch = d.i32(), d.i32()
                if leader >= 0:
                    return {"leader": leader, "epoch": epoch}
            except (OSError, lib.ProtocolError, struct.error):
                self._drop(host, port)
        return {"leader": -1}

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns.clear()


def split(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


def main(argv):
    p = Probes()
    try:
        if argv[1] == "metadata":
            out = p.metadata(argv[2], argv[3:])
        elif argv[1] == "quorum":
            out = p.quorum(argv[2:])
        else:
            raise SystemExit(f"usage: {argv[0]} metadata HOST:PORT TOPIC... | quorum HOST:PORT...")
    except socket.timeout as e:
        out = {"error": str(e)}
    print(json.dumps(out))
    p.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
