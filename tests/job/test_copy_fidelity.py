"""Record fidelity of one lane copy, byte for byte, per partition, against real brokers (no Spark needed)."""
from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer

from sparkmirror.copying import copy_lane
from sparkmirror.resource.flowgroup import Delivery
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic, read_progress

from .conftest import read_topic

MAX = 200_000  # the target's (and source's) max.message.bytes in this test


def _fill(bootstrap: str, topic: str) -> None:
    """Every kind of record the mirror must keep: nulls, tombstones, headers, old timestamps, compressed."""
    errors: list = []
    # batch.size below max.message.bytes: the broker limits whole batches, not single records
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": MAX - 1000,
                      "on_delivery": lambda err, _m: err and errors.append(err)})
    base_ts = 1_600_000_000_000
    for part in range(3):
        plain.produce(topic, key=b"k", value=b"v", partition=part, timestamp=base_ts + part)
        plain.produce(topic, key=b"tombstone", value=None, partition=part, timestamp=base_ts + 10)
        plain.produce(topic, key=None, value=b"no key", partition=part)
        plain.produce(topic, key=b"", value=b"", partition=part)  # empty, not null
        plain.produce(topic, key=b"\x00\xff\x10", value=bytes(range(256)), partition=part,
                      headers=[("h", b"1"), ("h", b"2"), ("bin", bytes([0, 255, 7])), ("empty", b""),
                               ("null", None)])
        plain.produce(topic, key=b"big", value=os.urandom(MAX - 400), partition=part)  # near the limit
    assert plain.flush(30) == 0 and not errors, errors
    for codec in ("zstd", "lz4", "gzip", "snappy"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50})
        for i in range(300):
            p.produce(topic, key=f"{codec}-{i}".encode(), value=(f"{codec} payload {i} " * 20).encode(),
                      partition=i % 3, headers=[("codec", codec.encode())], timestamp=base_ts + 1000 + i)
        assert p.flush(30) == 0


@pytest.mark.parametrize("copy", ["records", "batches"])
@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_copy_keeps_every_field(kafka_a, kafka_b, topic, flowgroup, delivery, copy):
    cfg_topic = {"max.message.bytes": str(MAX)}
    src = topic(kafka_a, 3, cfg_topic)
    dst = topic(kafka_b, 3, cfg_topic, name=f"a.{src}")
    _fill(kafka_a.bootstrap, src)
    cfg = flowgroup(src, delivery=delivery.value, copy=copy)
    mirror = cfg.mirrors[0]
    target = cfg.cluster("b").client_config()
    ensure_progress_topic(target, cfg.progressTopic)

    lanes = plan_lanes(mirror.name, cfg.lanes_of(mirror), [(src, dst, 3)])
    summaries = [s for lane in lanes for s in copy_lane(cfg, mirror, lane.index, list(lane.partitions), 3.0)]

    source, mirrored = read_topic(kafka_a.bootstrap, src), read_topic(kafka_b.bootstrap, dst)
    for part in range(3):
        want = [(r.key, r.value, r.headers, r.timestamp) for r in source[part]]
        got = [(r.key, r.value, r.headers, r.timestamp) for r in mirrored[part]]
        assert len(want) == 406, len(want)
        assert len(got) == len(want), (len(got), [s for s in summaries if s.partition == part], mirrored[part][0].offset)
        assert got == want, f"partition {part} differs"
    by_part = {s.partition: s for s in summaries}
    assert sorted(by_part) == [0, 1, 2]
    for part, s in by_part.items():
        assert s.records == 406 and s.lag == 0 and not s.fenced
        assert s.source_first == 0 and s.next_offset == source[part][-1].offset + 1
        assert s.target_last == mirrored[part][-1].offset
        assert s.bytes > MAX - 400
    state = read_progress(target, cfg.progressTopic, "a")
    assert {p: r.next_offset for (_, _, p), r in state.latest.items()} == {
        p: source[p][-1].offset + 1 for p in range(3)}
    # the dense offset map translates a source commit boundary to the exact target offset
    for (_, _, p), omap in state.maps.items():
        last = omap.records[-1]
        assert omap.translate(last.source_last + 1) == mirrored[p][-1].offset + 1
        assert omap.translate(0) == mirrored[p][0].offset


def test_resume_copies_only_new_records(kafka_a, kafka_b, topic, flowgroup):
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 2)])[0].partitions)
    from .conftest import produce_numbered
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 500)
    copy_lane(cfg, mirror, 0, parts, 2.0)
    produce_numbered(kafka_a.bootstrap, src, 2, 500, 500)
    second = copy_lane(cfg, mirror, 0, parts, 2.0)
    assert sorted(s.records for s in second) == [500, 500]
    mirrored = read_topic(kafka_b.bootstrap, dst)
    for part in range(2):
        assert [r.value for r in mirrored[part]] == [f"{part}:{i}".encode() for i in range(1000)]
