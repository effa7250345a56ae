"""Driver-side planning of epochs against real brokers: a new source topic is planned at the next epoch when the
last one ended early (a lane saw it), not at the next refresh; every lane looks for new topics at the same
moments; each planned epoch says what it cost."""
from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

import pytest

from sparkmirror.datasource import MirrorStreamReader, RouteWatch
from sparkmirror_dev.testing import create_topic, unique_name

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.scale import PLANNED  # noqa: E402  the scale benchmark reads these lines

pytestmark = pytest.mark.kafka


def planned_topics(reader: MirrorStreamReader, start: dict, end: dict) -> set[str]:
    return {s for part in reader.partitions(start, end) for s, _t, _n in part.routes}


def test_an_epoch_that_ended_early_is_planned_with_a_fresh_topic_sync(kafka_a, kafka_b, flowgroup, caplog):
    caplog.set_level(logging.INFO, logger="sparkmirror")
    prefix = unique_name("plan-early")
    first = create_topic(kafka_a.bootstrap, f"{prefix}-first", 2)
    # a refresh interval far longer than the test: only the early end can make the reader look again
    cfg = flowgroup(re.escape(prefix) + ".*", epochSeconds=60, mirror={"refreshTopicsIntervalSeconds": 600})
    reader = MirrorStreamReader({"config": cfg.model_dump_json(), "mirror": cfg.mirrors[0].name})
    e1 = reader.latestOffset()
    assert planned_topics(reader, {"epoch": 0}, e1) == {first}
    planned = PLANNED.search(caplog.text)
    assert planned and planned.group(4, 5) == ("2", "2") and "2 partitions of 1 topics" in caplog.text, caplog.text

    second = create_topic(kafka_a.bootstrap, f"{prefix}-second", 1)
    e2 = reader.latestOffset()  # seconds into a 60-s epoch: it ended early
    assert planned_topics(reader, e1, e2) == {first, second}

    third = create_topic(kafka_a.bootstrap, f"{prefix}-third", 1)
    reader._planned_at = time.monotonic() - 60  # this epoch ran its full length: the refresh interval rules
    e3 = reader.latestOffset()
    assert third not in planned_topics(reader, e2, e3)


def test_every_lane_looks_for_new_topics_at_the_same_moments(kafka_a, kafka_b, flowgroup):
    cfg = flowgroup("nothing-here", mirror={"refreshTopicsIntervalSeconds": 2})
    while time.time() % 2 > 0.2:  # just after a tick, so that both lanes start between the same two ticks
        time.sleep(0.02)
    first = RouteWatch(cfg, cfg.mirrors[0], ())
    time.sleep(0.7)
    second = RouteWatch(cfg, cfg.mirrors[0], ())  # a lane whose task started later, or on another executor
    assert first.next_check == second.next_check
    assert first.next_check % 2 == 0 and 0 < first.next_check - time.time() <= 2
