"""A record batch corrupted in the source's log ends the lane by name on both copy paths, and nothing from it on
reaches the target: the writers compute fresh CRCs over what they write, so a batch not checked as it is read
would land under a valid one. The batch path's refetching is proven at the reader
(`test_batch_copy.py::test_a_corrupt_source_batch_is_fetched_again_then_stops_the_copy_by_name`)."""
from __future__ import annotations

import pytest

from sparkmirror.copying import copy_lane
from sparkmirror.copying.errors import CorruptBatch
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic
from tests.support.corrupt import second_of_three_batches_corrupted

from .conftest import read_topic

pytestmark = pytest.mark.minutes(0.5)


@pytest.mark.parametrize("copy_path", ["records", "batches"])
def test_a_corrupt_source_batch_ends_the_lane_by_name_and_nothing_from_it_on_is_copied(
        kafka_a, kafka_b, topic, flowgroup, copy_path: str) -> None:
    src = topic(kafka_a, 1)
    dst = topic(kafka_b, 1, name=f"a.{src}")
    second_of_three_batches_corrupted(kafka_a.bootstrap, kafka_a.home, src)
    cfg = flowgroup(src, lanes=1, copy=copy_path)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 1)])[0].partitions)
    with pytest.raises(CorruptBatch, match=rf"source cluster 'a': {src}\[0\] the record batch at offset 10 is "
                                           rf"corrupt .*CRC32C.*; nothing from offset 10 on was copied"):
        copy_lane(cfg, mirror, 0, parts, 20.0)
    keys = [r.key for r in read_topic(kafka_b.bootstrap, dst)[0]]
    first = [f"0-{i}".encode() for i in range(10)]
    assert keys == first[:len(keys)], keys  # the batch before it may be there; nothing of the corrupt one or after
