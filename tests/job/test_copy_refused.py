"""A record the target refuses stops the mirror with an error that says where and why; nothing is skipped."""
from __future__ import annotations

import os
import re

from confluent_kafka import Producer

from .conftest import produce_numbered, read_topic, wait_for


def test_oversized_record_stops_the_mirror(kafka_a, kafka_b, topic, flowgroup, job):
    src = topic(kafka_a, 2, {"max.message.bytes": str(3_000_000)})
    remote = topic(kafka_b, 2, {"max.message.bytes": str(500_000)}, name=f"a.{src}")
    cfg = flowgroup(src, mirror={"syncTopicConfigs": False})
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    jp = job(cfg)
    wait_for(lambda: sum(len(v) for v in read_topic(kafka_b.bootstrap, remote, 20).values()) == 200
             or jp.proc.poll() is not None, 360, "the first records mirrored")
    assert jp.proc.poll() is None, jp.log()[-3000:]

    # in one transaction, so the lane fetches them together: partition 0's records, then partition 1's small
    # ones, ahead of the big one in the same round: the error names the refused batch, not the round's first
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "message.max.bytes": 3_000_000,
                  "transactional.id": f"refused-{src}", "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    offsets: dict[bytes, int] = {}
    for part, key in ((0, b"ahead0"), (1, b"ahead1")):
        p.produce(src, key=key, value=b"small", partition=part,
                  on_delivery=lambda err, m: offsets.update({m.key(): m.offset()}))
        p.flush(30)  # a batch of its own
    p.produce(src, key=b"big", value=os.urandom(1_000_000), partition=1,
              on_delivery=lambda err, m: offsets.update({m.key(): m.offset()}))
    p.commit_transaction(30)
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 10)  # after the big one: must not be skipped to
    big_offset = offsets[b"big"]
    assert big_offset > offsets[b"ahead1"]

    jp.proc.wait(300)
    log = jp.log()
    assert jp.proc.returncode == 1, log[-3000:]
    line = next((ln for ln in log.splitlines() if ln.startswith("sparkmirror: mirror")), "")
    assert f"a/{src} partition 1 offset {big_offset}" in line, line or log[-3000:]
    # librdkafka says MSG_SIZE_TOO_LARGE (copy: records), the batch path kafka-python's name of the broker's code
    assert re.search("MSG_SIZE_TOO_LARGE|MESSAGE_SIZE_TOO_LARGE", line) and "max.message.bytes=500000" in line, line
    got = read_topic(kafka_b.bootstrap, remote)
    numbered = {part: [r.value for r in got[part] if not (r.key or b"").startswith(b"ahead")] for part in (0, 1)}
    assert numbered[1] == [f"1:{i}".encode() for i in range(100)], "partition 1 skipped or lost"
    assert numbered[0][:100] == [f"0:{i}".encode() for i in range(100)]
