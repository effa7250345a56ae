"""A lane keeps its clients between consecutive epochs in one worker process, and never at the cost of
exactly-once: a copy of the lane that ran elsewhere in between fences the kept producer, and the lane starts
afresh from the progress topic."""
from __future__ import annotations

import pytest

from sparkmirror import copier
from sparkmirror.copier import LaneCopier
from sparkmirror.flowgroup import Delivery
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic

from .conftest import produce_numbered, read_topic


@pytest.fixture
def lane(kafka_a, kafka_b, topic, flowgroup):
    def make(delivery: Delivery = Delivery.EXACTLY_ONCE):
        src = topic(kafka_a, 2)
        dst = topic(kafka_b, 2, name=f"a.{src}")
        cfg = flowgroup(src, lanes=1, delivery=delivery)
        mirror = cfg.mirrors[0]
        ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
        parts = list(plan_lanes(mirror.name, 1, [(src, dst, 2)])[0].partitions)

        def run(epoch: int | None, prev: int | None, attempt: int = 0) -> LaneCopier:
            c = LaneCopier(cfg, mirror, 0, parts, 2.0, epoch=epoch, prev_epoch=prev, attempt=attempt)
            c.run()
            return c

        return src, dst, run

    yield make
    for s in list(copier._SESSIONS.values()):
        s.close()
    copier._SESSIONS.clear()


def _seqs(bootstrap: str, topic: str) -> dict[int, list[int]]:
    return {p: [int(r.value.split(b":")[1]) for r in rs] for p, rs in read_topic(bootstrap, topic).items()}


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_consecutive_epochs_reuse_the_lane_clients(kafka_a, kafka_b, lane, delivery):
    src, dst, run = lane(delivery)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 300)
    first = run(10, 0)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 300)
    second = run(20, 10)
    produce_numbered(kafka_a.bootstrap, src, 2, 600, 100)
    stale = run(40, 30)  # the kept session ended at epoch 20, not 30: someone else may have run epoch 30
    produce_numbered(kafka_a.bootstrap, src, 2, 700, 100)
    retried = run(50, 40, attempt=1)  # a retried task never trusts kept clients

    assert (first.reused, second.reused, stale.reused, retried.reused) == (False, True, False, False)
    assert sorted(s.records for s in second.summaries.values()) == [300, 300]
    assert _seqs(kafka_b.bootstrap, dst) == {p: list(range(800)) for p in range(2)}


def test_kept_clients_fenced_by_another_copy_start_afresh(kafka_a, kafka_b, lane):
    src, dst, run = lane(Delivery.EXACTLY_ONCE)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 200)
    run(10, 0)  # keeps its clients, as if epoch 10 ran in this worker
    produce_numbered(kafka_a.bootstrap, src, 2, 200, 200)
    elsewhere = run(None, None)  # the same lane run by another worker: init_transactions fences ours
    assert sorted(s.records for s in elsewhere.summaries.values()) == [200, 200]
    produce_numbered(kafka_a.bootstrap, src, 2, 400, 100)
    resumed = run(20, 10)  # looks like our next epoch, but the kept producer was fenced

    assert not resumed.reused, "the fenced clients should have been replaced"
    assert not any(s.fenced for s in resumed.summaries.values())
    assert sorted(s.records for s in resumed.summaries.values()) == [100, 100]
    assert _seqs(kafka_b.bootstrap, dst) == {p: list(range(500)) for p in range(2)}
