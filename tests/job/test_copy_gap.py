"""The source deleted records that were never mirrored: an explicit policy, never a silent loss."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror.copying import SourceGapError, copy_lane
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic

from .conftest import produce_numbered, read_topic


def _setup(kafka_a, kafka_b, topic, flowgroup, policy: str):
    src = topic(kafka_a, 1)
    dst = topic(kafka_b, 1, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, sourceGapPolicy=policy)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 1)])[0].partitions)
    produce_numbered(kafka_a.bootstrap, src, 1, 0, 100)
    assert sum(s.records for s in copy_lane(cfg, mirror, 0, parts, 2.0)) == 100
    produce_numbered(kafka_a.bootstrap, src, 1, 100, 100)  # offsets 100..199, never mirrored
    admin = AdminClient({"bootstrap.servers": kafka_a.bootstrap})
    fut = admin.delete_records([TopicPartition(src, 0, 150)])  # retention "deleted" 100..149
    list(fut.values())[0].result(30)
    return cfg, mirror, parts, dst


def test_gap_fails_by_default_naming_the_range(kafka_a, kafka_b, topic, flowgroup):
    cfg, mirror, parts, dst = _setup(kafka_a, kafka_b, topic, flowgroup, "fail")
    with pytest.raises(SourceGapError, match=r"partition 0: the source no longer holds offsets 100\.\.149"):
        copy_lane(cfg, mirror, 0, parts, 2.0)
    assert len(read_topic(kafka_b.bootstrap, dst)[0]) == 100  # what was mirrored stays


def test_gap_skip_policy_continues_and_says_so(kafka_a, kafka_b, topic, flowgroup, caplog):
    cfg, mirror, parts, dst = _setup(kafka_a, kafka_b, topic, flowgroup, "skip")
    with caplog.at_level(logging.ERROR, logger="sparkmirror.copying"):
        assert sum(s.records for s in copy_lane(cfg, mirror, 0, parts, 2.0)) == 50
    assert "LOST" in caplog.text and "100..149" in caplog.text
    values = [r.value for r in read_topic(kafka_b.bootstrap, dst)[0]]
    assert values == [f"0:{i}".encode() for i in list(range(100)) + list(range(150, 200))]
