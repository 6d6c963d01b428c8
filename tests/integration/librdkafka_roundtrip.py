#!/usr/bin/env python3
"""librdkafka round trip through sluice-rdk-client.

Starts a broker with num.partitions=3 and runs `sluice-rdk-client roundtrip` on fresh
topics: records with explicit CreateTime timestamps, two headers each, and some null
keys, null values and empty values, produced with acks=all to explicit partitions.
The client checks the acked offsets (contiguous from 0 in produce order), the
watermarks, reads everything back by offset (from offset 0 and again from the middle
of each partition), and looks up offsets by timestamp (rd_kafka_offsets_for_times:
exact timestamp, 1 ms before, before everything -> first offset, after everything
-> -1). Variants: plain; zstd with the idempotent producer; lz4 with 3,000 records
and 1 KiB values.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

VARIANTS = [
    ("plain", ["--compression", "none"]),
    ("zstd-idempotent", ["--compression", "zstd", "--idempotence", "on"]),
    ("lz4-large", ["--compression", "lz4", "--count", "3000", "--size", "1024"]),
]


def test():
    client = lib.rdk_client_path()
    with lib.Broker("rdk-roundtrip", {"num.partitions": 3}) as broker:
        for name, extra in VARIANTS:
            topic = f"roundtrip-{name}"
            r = lib.run([client, "roundtrip", "--bootstrap", broker.bootstrap, "--topic", topic,
                         "--run-timeout", "60", *extra], timeout=150)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                sys.stdout.write(r.stderr[-4000:])
            check(r.returncode == 0, f"roundtrip {name} exited {r.returncode}")
            check("result=OK" in r.stdout, f"roundtrip {name}: no OK summary")
            log(f"{name}: OK")
        check(broker.alive(), "broker died")
        broker.stop()


if __name__ == "__main__":
    lib.main(test)
