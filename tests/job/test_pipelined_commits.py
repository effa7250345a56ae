"""At-least-once commits are pipelined: a lane copies on while an ended interval's progress is being written,
and that progress still never covers a record the target did not acknowledge."""
from __future__ import annotations

import threading

import pytest

from sparkmirror.copying import LaneCopy, run_epoch
from sparkmirror.copying.commit import AtLeastOnce
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic, read_progress
from sparkmirror.resource.flowgroup import Delivery

from .conftest import numbered_sequences, produce_numbered, read_topic, wait_for


def _lane(kafka_a, kafka_b, topic, flowgroup, interval_ms: int, epoch_s: float):
    """An at-least-once lane over a new 2-partition topic: (source, remote topic, config, copier)."""
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, delivery=Delivery.AT_LEAST_ONCE, commitIntervalMs=interval_ms)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, 2)])[0].partitions)
    return src, dst, cfg, LaneCopy(cfg, mirror, 0, parts, epoch_s)


@pytest.fixture
def held_progress(monkeypatch):
    """The first progress commit waits (on the real fence producer) until the test releases it."""
    entered, release = threading.Event(), threading.Event()
    real = AtLeastOnce.commit
    calls = []

    def commit(self, progress, on_delivery):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            entered.set()
            release.wait(30)
        return real(self, progress, on_delivery)

    monkeypatch.setattr(AtLeastOnce, "commit", commit)
    return entered, release, calls


def test_a_slow_progress_commit_does_not_hold_the_copy(kafka_a, kafka_b, topic, flowgroup, held_progress):
    entered, release, calls = held_progress
    src, dst, cfg, copier = _lane(kafka_a, kafka_b, topic, flowgroup, 50, 8.0)
    runner = threading.Thread(target=run_epoch, args=(copier,))
    runner.start()
    try:
        produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
        assert entered.wait(30), "the first interval's progress commit never began"
        produce_numbered(kafka_a.bootstrap, src, 2, 100, 200)  # while that commit is held
        wait_for(lambda: sum(len(v) for v in read_topic(kafka_b.bootstrap, dst).values()) == 600, 20,
                 "records produced while a progress commit was held copied meanwhile")
        assert len(calls) == 1, "a second progress commit began before the first ended"
    finally:
        release.set()
        runner.join(60)
    assert not runner.is_alive()
    assert all(name.startswith("progress-") for name in calls), calls  # written beside the loop, not in it
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(300)) for p in range(2)}
    assert sorted(s.records for s in copier.result) == [300, 300]
    latest = read_progress({"bootstrap.servers": kafka_b.bootstrap}, cfg.progressTopic, "a").latest
    assert sorted(r.next_offset for r in latest.values()) == [300, 300]
    # the intervals sealed while the first commit was held went out together (a third commit at most, for
    # acknowledgements not yet served when the first ended)
    assert copier.commits == len(calls) <= 3, calls


def test_progress_waits_for_the_acks_of_every_record_it_covers(kafka_a, kafka_b, topic, flowgroup, monkeypatch):
    """Each progress commit covers only records the target acknowledged before it began."""
    src, dst, _cfg, copier = _lane(kafka_a, kafka_b, topic, flowgroup, 20, 4.0)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 1000)
    unacked: list[int] = []
    real = AtLeastOnce.commit

    def commit(self, progress, on_delivery):
        progress = list(progress)
        # what the target holds now must already include every record this progress says was copied
        ends = {p: len(v) for p, v in read_topic(kafka_b.bootstrap, dst).items()}
        unacked.extend(r.partition for r in progress if ends.get(r.partition, 0) < r.next_offset)
        return real(self, progress, on_delivery)

    monkeypatch.setattr(AtLeastOnce, "commit", commit)
    run_epoch(copier)
    assert unacked == []
    assert copier.commits >= 1
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(1000)) for p in range(2)}
