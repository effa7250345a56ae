"""The source deleted records that were never mirrored: an explicit policy, never a silent loss."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from sparkmirror.copying import SourceGapError, copy_lane
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic

from sparkmirror_dev.testing import recreate_topic

from .conftest import produce_numbered, read_topic


def _mirrored_100(kafka_a, kafka_b, topic, flowgroup, policy: str):
    """A one-partition mirror that copied its first 100 records."""
    src = topic(kafka_a, 1)
    dst = topic(kafka_b, 1, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, sourceGapPolicy=policy)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 1)])[0].partitions)
    produce_numbered(kafka_a.bootstrap, src, 1, 0, 100)
    assert sum(s.records for s in copy_lane(cfg, mirror, 0, parts, 2.0)) == 100
    return cfg, mirror, parts, src, dst


def _setup(kafka_a, kafka_b, topic, flowgroup, policy: str):
    cfg, mirror, parts, src, dst = _mirrored_100(kafka_a, kafka_b, topic, flowgroup, policy)
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


def _recreated_setup(kafka_a, kafka_b, topic, flowgroup, policy: str, which: str):
    """100 records mirrored, then (mirror stopped) the source or the remote topic deleted and created again,
    and 200 records produced to the source: the committed next offset (100) is inside the new topic's range,
    so only the topic ids can tell."""
    cfg, mirror, parts, src, dst = _mirrored_100(kafka_a, kafka_b, topic, flowgroup, policy)
    if which == "source":
        recreate_topic(kafka_a.bootstrap, src, 1)
        produce_numbered(kafka_a.bootstrap, src, 1, 1000, 200)  # the new topic's records: 1000..1199
    else:
        recreate_topic(kafka_b.bootstrap, dst, 1)
        produce_numbered(kafka_a.bootstrap, src, 1, 100, 100)
    return cfg, mirror, parts, src, dst


def _values(bootstrap: str, topic: str) -> list[int]:
    return [int(r.value.split(b":")[1]) for r in read_topic(bootstrap, topic)[0]]


def test_source_topic_recreated_while_stopped_is_caught_by_its_topic_id(kafka_a, kafka_b, topic, flowgroup,
                                                                         caplog):
    cfg, mirror, parts, _, dst = _recreated_setup(kafka_a, kafka_b, topic, flowgroup, "fail", "source")
    with pytest.raises(SourceGapError, match=r"partition 0: the source topic was deleted and created again since "
                                             r"offset 100 was committed \(topic id \S+ -> \S+\)"):
        copy_lane(cfg, mirror, 0, parts, 2.0)
    assert _values(kafka_b.bootstrap, dst) == list(range(100))  # nothing of the new topic skipped silently
    skip = cfg.model_copy(update={"sourceGapPolicy": "skip"})
    with caplog.at_level(logging.ERROR, logger="sparkmirror.copying"):
        assert sum(s.records for s in copy_lane(skip, skip.mirrors[0], 0, parts, 2.0)) == 200
    assert "deleted and created again" in caplog.text
    assert _values(kafka_b.bootstrap, dst) == list(range(100)) + list(range(1000, 1200))  # all of the new topic


def test_remote_topic_recreated_while_stopped_is_caught_by_its_topic_id(kafka_a, kafka_b, topic, flowgroup,
                                                                         caplog):
    cfg, mirror, parts, src, dst = _recreated_setup(kafka_a, kafka_b, topic, flowgroup, "fail", "target")
    with pytest.raises(SourceGapError, match=r"the remote topic b/\S+ was deleted and created again since offset "
                                             r"100 was committed .*what was mirrored into it before is gone"):
        copy_lane(cfg, mirror, 0, parts, 2.0)
    skip = cfg.model_copy(update={"sourceGapPolicy": "skip"})
    with caplog.at_level(logging.ERROR, logger="sparkmirror.copying"):
        assert sum(s.records for s in copy_lane(skip, skip.mirrors[0], 0, parts, 2.0)) == 100
    assert "NOT copied again" in caplog.text
    assert _values(kafka_b.bootstrap, dst) == list(range(100, 200))
    # the next start reads progress stamped with the new remote topic's id: no second report
    caplog.clear()
    produce_numbered(kafka_a.bootstrap, src, 1, 200, 10)
    with caplog.at_level(logging.ERROR, logger="sparkmirror.copying"):
        assert sum(s.records for s in copy_lane(cfg, mirror, 0, parts, 2.0)) == 10
    assert "created again" not in caplog.text
    assert _values(kafka_b.bootstrap, dst) == list(range(100, 210))
