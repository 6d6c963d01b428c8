#!/usr/bin/env python3
"""franz-go (github.com/twmb/franz-go pkg/kgo and pkg/kadm, from the Go module proxy;
tests/clients/franzgo built on first use) with its defaults against the broker:

  kadm  CreateTopics (3 partitions, retention.ms), ListTopics, AlterTopicConfigs
        (IncrementalAlterConfigs), DescribeTopicConfigs shows the new value as a
        DYNAMIC_TOPIC_CONFIG, ListEndOffsets after producing
  kgo   producer with defaults (idempotent, snappy-compressed batches, sticky
        partitioning by key hash) sends 200,000 keyed records; a second client
        consumes the topic directly (ConsumeTopics without a group: franz-go then
        reads every partition itself, from the start) and every record comes back
        exactly once, offsets contiguous, in order within each partition
Stored batches are checked with a raw Fetch: they carry a producer id (idempotent)
and the snappy codec.

SLUICE_FRANZGO_RECORDS overrides the record count.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import lib  # noqa: E402
from lib import check, log  # noqa: E402

N = int(os.environ.get("SLUICE_FRANZGO_RECORDS", "200000"))
TOPIC = "franz"


def test():
    exe = clients.franzgo()
    log(f"franz-go {clients.franzgo_versions()}")
    with lib.Broker("franz-go") as broker:
        r = lib.run([exe, "roundtrip", "-brokers", broker.bootstrap, "-topic", TOPIC, "-partitions", "3",
                     "-n", str(N), "-timeout", "240s"], timeout=300)
        print("\n".join("    " + ln for ln in r.stdout.strip().splitlines()), flush=True)
        check(r.returncode == 0, f"sluice-franzgo roundtrip exit {r.returncode}: "
              f"{r.stdout.strip().splitlines()[-1:]} {r.stderr[-2000:]}")
        out = r.stdout
        check(f"created {TOPIC} partitions 3" in out, "kadm CreateTopics did not report 3 partitions")
        check(f"listed {TOPIC} partitions 3" in out, "kadm ListTopics did not list 3 partitions")
        check("config retention.ms 172800000 source DYNAMIC_TOPIC_CONFIG" in out,
              "kadm DescribeTopicConfigs after AlterTopicConfigs does not show retention.ms=172800000")
        check(f"produced {N} " in out, f"franz-go did not produce {N} records")
        m = re.search(r"end offsets (\S+) total (\d+)", out)
        check(m and int(m.group(2)) == N, f"kadm ListEndOffsets total {m and m.group(2)}, want {N}")
        check(len(m.group(1).split(",")) == 3 and all(int(x.split(":")[1]) > 0 for x in m.group(1).split(",")),
              f"records not spread over 3 partitions: {m.group(1)}")
        check(re.search(rf"consumed {N} in \S+ partitions 3 missing 0 duplicated 0 bad 0", out),
              "franz-go consumer did not get every record exactly once")

        with lib.Conn(broker.port) as c:
            err, hw, blob = c.fetch(TOPIC, 0, 0, max_bytes=256 << 10)
        check(err == 0, f"raw fetch: error {err}")
        batches = list(lib.parse_batches(blob))
        check(batches, "raw fetch returned no batch")
        check(all(b["producer_id"] >= 0 for b in batches),
              f"stored batches without a producer id: {[b['producer_id'] for b in batches][:5]}")
        check(any(b["codec"] == lib.CODECS["snappy"] for b in batches),
              f"no snappy batch stored (codecs {sorted({b['codec'] for b in batches})})")


if __name__ == "__main__":
    lib.main(test)
