"""A lane keeps its clients between consecutive epochs in one worker process, and never at the cost of
exactly-once: a copy of the lane that ran elsewhere in between fences the kept producer, and the lane starts
afresh from the progress topic."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from sparkmirror.copying import LaneCopy, run_epoch
from sparkmirror.copying.batchlane import lane_copy
from sparkmirror.copying.growth import Growth
from sparkmirror.resource.flowgroup import Delivery
from sparkmirror.lanes import LanePartition, plan_lanes
from sparkmirror.progress import ensure_progress_topic

from .conftest import close_kept_lanes, numbered_sequences, produce_numbered, read_topic, wait_for

pytestmark = pytest.mark.minutes(2.7)


@pytest.fixture
def lane(kafka_a, kafka_b, topic, flowgroup):
    def make(delivery: Delivery = Delivery.EXACTLY_ONCE, copy: str = "records"):
        src = topic(kafka_a, 2)
        dst = topic(kafka_b, 2, name=f"a.{src}")
        cfg = flowgroup(src, lanes=1, delivery=delivery, copy=copy)
        mirror = cfg.mirrors[0]
        ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
        parts = list(plan_lanes(mirror.name, 1, [(src, dst, 2)])[0].partitions)

        def run(epoch: int | None, prev: int | None, attempt: int = 0, carry: float = 0.0,
                more: tuple[LanePartition, ...] = (), watch=None, seconds: float = 2.0, stop=None) -> LaneCopy:
            c = lane_copy(cfg, mirror, 0, parts + list(more), seconds, stop, epoch=epoch, prev_epoch=prev,
                          attempt=attempt, carry_seconds=carry, watch=watch)
            run_epoch(c)
            return c

        run.new_topic = lambda: _new_topic(kafka_a, kafka_b, topic)  # a topic for the lane to gain
        return src, dst, run

    yield make
    close_kept_lanes()


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
    assert sorted(s.records for s in second.result) == [300, 300]
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(800)) for p in range(2)}


def test_kept_clients_fenced_by_another_copy_start_afresh(kafka_a, kafka_b, lane):
    src, dst, run = lane(Delivery.EXACTLY_ONCE)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 200)
    run(10, 0)  # keeps its clients, as if epoch 10 ran in this worker
    produce_numbered(kafka_a.bootstrap, src, 2, 200, 200)
    elsewhere = run(None, None)  # the same lane run by another worker: init_transactions fences ours
    assert sorted(s.records for s in elsewhere.result) == [200, 200]
    produce_numbered(kafka_a.bootstrap, src, 2, 400, 100)
    resumed = run(20, 10)  # looks like our next epoch, but the kept producer was fenced

    assert not resumed.reused, "the fenced clients should have been replaced"
    assert not any(s.fenced for s in resumed.result)
    assert sorted(s.records for s in resumed.result) == [100, 100]
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(500)) for p in range(2)}


def _new_topic(kafka_a, kafka_b, topic) -> tuple[str, str, tuple[LanePartition, ...]]:
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    return src, dst, tuple(LanePartition(src, p, dst) for p in range(2))


class _LateGain:
    """What a RouteWatch hands the copier (routewatch.py has its own tests): `gained`, once, `after` s after the
    copy loop first asks."""

    def __init__(self, gained: tuple[LanePartition, ...], after: float) -> None:
        self.gained, self.after, self.at, self.growing = list(gained), after, 0.0, False
        self.handed = 0.0  # when the copier got them (time.monotonic())

    def changed(self) -> bool:
        return False

    def ready(self) -> list[LanePartition]:
        self.at = self.at or time.monotonic() + self.after
        if self.gained and time.monotonic() >= self.at:
            out, self.gained = self.gained, []
            self.handed = time.monotonic()
            return out
        return []


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_partitions_gained_at_an_epochs_end_are_copied_once(kafka_a, kafka_b, lane, delivery, caplog, monkeypatch):
    """Partitions a lane gains mid-epoch are prepared on a thread while it copies on; ones still being prepared
    when the epoch ends are taken in before it returns, and its next epoch (planned with them) goes on with the
    same clients: every record of both topics once."""
    caplog.set_level(logging.INFO, logger="sparkmirror")
    src, dst, run = lane(delivery)
    new_src, new_dst, more = run.new_topic()
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    produce_numbered(kafka_a.bootstrap, new_src, 2, 0, 80)
    grown, prepare = Growth.grown, Growth.prepare
    taken_at_end: list[bool] = []

    def spy(self, block: bool) -> None:
        if block and self._preparing is not None:
            taken_at_end.append(not self._preparing[0].done())
        grown(self, block)

    def slow_prepare(self, *args):  # a loaded target at 10,000 partitions: its progress read took up to 0.8 s
        time.sleep(0.8)
        return prepare(self, *args)

    monkeypatch.setattr(Growth, "grown", spy)
    monkeypatch.setattr(Growth, "prepare", slow_prepare)
    first = run(10, 0, carry=60.0, watch=_LateGain(more, 1.6))  # the epoch copies 2 s
    monkeypatch.undo()
    assert taken_at_end == [True], "the preparation was not running when the epoch ended"
    assert first.route.keys() >= {(p.source_topic, p.partition) for p in more}
    produce_numbered(kafka_a.bootstrap, new_src, 2, 80, 20)
    nxt = run(20, 10, more=more)

    assert nxt.reused and "started in" not in caplog.text.split("added to its kept clients")[1]
    copied = [s.records for r in (first, nxt) for s in r.result if s.source_topic == new_src]
    assert sum(copied) == 200
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(100)) for p in range(2)}
    assert numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(100)) for p in range(2)}


LONG_EPOCH = 60.0
"""An epoch far longer than a gained partition may wait for its first copy (`TAKEN_WITHIN`)."""
TAKEN_WITHIN = 10.0
"""Seconds from a lane's gaining a partition until its records are on the target: a bound on taking it mid-epoch
(preparation, a commit), not a speed claim. The lane's own start is not counted: on brokers just started (their
coordinators loading) the first case's records were on the target 10.3 s after the lane began."""


@pytest.mark.parametrize("delivery,copy", [(Delivery.EXACTLY_ONCE, "records"), (Delivery.EXACTLY_ONCE, "batches"),
                                            (Delivery.AT_LEAST_ONCE, "batches")])
def test_a_partition_gained_mid_epoch_is_copied_within_the_epoch(kafka_a, kafka_b, lane, delivery, copy, caplog):
    """Partitions the source gains mid-epoch are copied from their first offset while the epoch runs, on either
    path (issue 36: a batch lane took them only at its next epoch). Then another copy of the lane takes over
    (exactly-once: fencing the running one while it copies, its open transaction aborted as a crash leaves it;
    at-least-once: once it stopped) and goes on from the progress topic: the progress covered the gained
    partitions from their first offset, so every record of both topics is there once."""
    caplog.set_level(logging.INFO, logger="sparkmirror")
    src, dst, run = lane(delivery, copy)
    new_src, new_dst, more = run.new_topic()
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    produce_numbered(kafka_a.bootstrap, new_src, 2, 0, 80)
    stop, ran, failed, watch = threading.Event(), [], [], _LateGain(more, 1.0)

    def epoch() -> None:
        try:
            ran.append(run(None, None, watch=watch, seconds=LONG_EPOCH, stop=stop.is_set))
        except BaseException as e:  # noqa: BLE001 - raised in the test's thread below
            failed.append(e)

    runner = threading.Thread(target=epoch, name="gaining-lane", daemon=True)
    runner.start()
    try:
        wait_for(lambda: numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(80)) for p in range(2)}
                 or bool(failed), LONG_EPOCH / 2, f"the gained topic's first records on the target ({copy})")
        seen = time.monotonic() - watch.handed  # handed before any of their records could be copied
        assert not failed and runner.is_alive(), "the epoch ended instead of taking the partitions in place"
        produce_numbered(kafka_a.bootstrap, src, 2, 100, 40)  # while it copies on
        produce_numbered(kafka_a.bootstrap, new_src, 2, 80, 40)
        if delivery is Delivery.AT_LEAST_ONCE:  # its progress follows what it copied: stop, then take over
            wait_for(lambda: [numbered_sequences(kafka_b.bootstrap, t) for t in (dst, new_dst)] == [
                {p: list(range(n)) for p in range(2)} for n in (140, 120)], 30, "the records produced while it copies")
            stop.set()
            runner.join(30)
        taker = run(None, None, more=more)  # exactly-once: fences the lane while it copies the gained topic
    finally:
        stop.set()
        runner.join(60)
    assert not runner.is_alive() and not failed, failed
    assert "2 partitions added to its kept clients" in caplog.text
    assert caplog.text.count("started in") == 2, "a lane started afresh for the partitions it gained"
    if delivery is Delivery.AT_LEAST_ONCE:  # it stopped with all of them committed: the taker had nothing left
        assert sum(s.records for s in taker.result) == 0
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(140)) for p in range(2)}
    assert numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(120)) for p in range(2)}
    assert seen < TAKEN_WITHIN < LONG_EPOCH
    print(f"{copy}/{delivery.value}: the gained topic's first records on the target {seen:.1f} s after the lane "
          f"gained it (a {LONG_EPOCH:.0f}-s epoch)")


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_a_lane_that_gains_a_topic_keeps_its_clients(kafka_a, kafka_b, lane, delivery, caplog, monkeypatch):
    """The new topic's partitions start where a fresh start would (the beginning: no progress yet), the kept
    ones go on where they were; the lane does not start afresh. (At-least-once here also takes the path of a
    lane gaining many topics: one metadata request for all topics.)"""
    from sparkmirror.copying import reader

    if delivery is Delivery.AT_LEAST_ONCE:
        monkeypatch.setattr(reader, "ONE_METADATA_REQUEST_ABOVE", 0)
    caplog.set_level(logging.INFO, logger="sparkmirror")
    src, dst, run = lane(delivery)
    new_src, new_dst, more = run.new_topic()
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 200)
    produce_numbered(kafka_a.bootstrap, new_src, 2, 0, 150)  # there before the lane is planned with it
    first = run(10, 0, carry=60.0)
    produce_numbered(kafka_a.bootstrap, src, 2, 200, 100)
    grown = run(20, 10, more=more)
    produce_numbered(kafka_a.bootstrap, src, 2, 300, 50)
    produce_numbered(kafka_a.bootstrap, new_src, 2, 150, 50)
    nxt = run(30, 20, more=more)

    assert (first.reused, grown.reused, nxt.reused) == (False, True, True)
    assert "2 partitions added to its kept clients" in caplog.text
    assert "started in" not in caplog.text.split("added to its kept clients")[1], "the lane started afresh"
    assert sorted(s.records for s in grown.result if s.source_topic == new_src) == [150, 150]
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(350)) for p in range(2)}
    assert numbered_sequences(kafka_b.bootstrap, new_dst) == {p: list(range(200)) for p in range(2)}


@pytest.mark.parametrize("delivery,copy", [(Delivery.EXACTLY_ONCE, "records"), (Delivery.AT_LEAST_ONCE, "records"),
                                            (Delivery.EXACTLY_ONCE, "batches")])
def test_a_partition_added_to_a_kept_topic_is_copied_by_the_kept_clients(kafka_a, kafka_b, lane, delivery, copy,
                                                                         caplog):
    """The kept producer wrote the remote topic while it had 2 partitions; its metadata did not know the third,
    and refused it (_UNKNOWN_PARTITION failed the mirror) until it was made to look again. On the batch path
    (issue 36) the kept wire connections take the new partition at the next epoch, from its start."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    caplog.set_level(logging.INFO, logger="sparkmirror")
    src, dst, run = lane(delivery, copy)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    first = run(10, 0, carry=60.0)
    for cluster, topic in ((kafka_a, src), (kafka_b, dst)):  # as topic sync does before the plan grows
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    produce_numbered(kafka_a.bootstrap, src, 3, 100, 60)
    grown = run(20, 10, more=(LanePartition(src, 2, dst),))

    assert (first.reused, grown.reused) == (False, True)
    assert "1 partitions added" in caplog.text  # to the kept clients, not a fresh start
    assert numbered_sequences(kafka_b.bootstrap, dst) == {0: list(range(160)), 1: list(range(160)),
                                                          2: list(range(100, 160))}


def test_a_lane_that_lost_a_partition_starts_afresh(kafka_a, kafka_b, lane):
    """Only a grown plan keeps the clients: one without a kept partition is another plan."""
    src, dst, run = lane(Delivery.EXACTLY_ONCE)
    _new_src, _new_dst, more = run.new_topic()
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    run(10, 0, more=more)
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 100)
    shrunk = run(20, 10)
    assert not shrunk.reused
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(200)) for p in range(2)}


def _carrying() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("carry-")]


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_lane_copies_between_epochs_until_its_next_task(kafka_a, kafka_b, lane, delivery):
    src, dst, run = lane(delivery)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    first = run(10, 0, carry=60.0)
    assert sorted(s.records for s in first.result) == [100, 100]
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 100)  # while "Spark" is between epochs
    wait_for(lambda: sum(len(v) for v in read_topic(kafka_b.bootstrap, dst).values()) == 400, 60,
             "records produced between epochs mirrored before the next epoch's task")
    nxt = run(20, 10)  # takes the carrying clients over, with what they copied
    assert nxt.reused and not _carrying()
    assert sorted(s.records for s in nxt.result) == [100, 100]
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(200)) for p in range(2)}


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_lane_copying_between_epochs_is_fenced_by_its_next_copy_elsewhere(kafka_a, kafka_b, lane, delivery):
    """At-least-once fences through its progress transactions: the carrier stops at its next progress write,
    so it repeats at most that commit interval and never moves progress backwards."""
    from sparkmirror.progress import read_progress

    src, dst, run = lane(delivery)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    run(10, 0, carry=60.0)
    assert _carrying()
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 300)
    elsewhere = run(None, None)  # the next task in another worker: init_transactions fences the carrier
    produce_numbered(kafka_a.bootstrap, src, 2, 400, 100)  # the carrier tries to copy these: it is fenced
    wait_for(lambda: not _carrying(), 30, "the fenced carrier to stop")
    last = run(None, None)
    assert not any(s.fenced for s in elsewhere.result)
    got = numbered_sequences(kafka_b.bootstrap, dst)
    if delivery == Delivery.EXACTLY_ONCE:
        assert got == {p: list(range(500)) for p in range(2)}
    else:
        assert {p: sorted(set(v)) for p, v in got.items()} == {p: list(range(500)) for p in range(2)}
        cfg_target = {"bootstrap.servers": kafka_b.bootstrap}
        latest = read_progress(cfg_target, last.config.progressTopic, "a").latest
        assert sorted(r.next_offset for r in latest.values()) == [500, 500], "progress moved backwards"


def test_kept_clients_report_only_the_partitions_that_moved(kafka_a, kafka_b, lane):
    """A lane resuming its kept clients yields rows only for partitions with something new (and its first one):
    the clients carry what they reported, so an idle partition is not reported again (copying/ledger.py)."""
    src, dst, run = lane(Delivery.EXACTLY_ONCE)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 200)
    first = run(10, 0)
    produce_numbered(kafka_a.bootstrap, src, 1, 200, 100)  # partition 0 only
    second = run(20, 10)
    assert not first.reused and second.reused
    assert sorted((s.partition, s.records) for s in first.result) == [(0, 200), (1, 200)]
    assert [(s.partition, s.records) for s in second.result] == [(0, 100)]  # partition 1 had nothing new
    assert numbered_sequences(kafka_b.bootstrap, dst) == {0: list(range(300)), 1: list(range(200))}


def test_kept_clients_read_past_their_commit_go_back_to_it(kafka_a, kafka_b, lane):
    """Kept clients resume at the committed offsets: records their consumer took after the last commit (read,
    never committed) are copied by the next epoch, not skipped; the other partitions are left as they are."""
    from confluent_kafka import TopicPartition

    from sparkmirror.copying import sessions

    src, dst, run = lane(Delivery.EXACTLY_ONCE)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    first = run(10, 0)
    kept = sessions._SESSIONS[first.tid].copier
    # assigned as a lane copying on between epochs leaves it (this one was kept without copying on)
    kept.reader.consumer.assign([TopicPartition(t, p, o) for (t, p), o in kept.ledger.committed_next.items()])
    produce_numbered(kafka_a.bootstrap, src, 1, 100, 50)  # partition 0 only
    taken = 0
    for _ in range(100):  # the kept consumer reads them, as an interval that is then aborted would
        taken += len([m for m in kept.reader.consumer.consume(100, 0.2) if m.error() is None])
        if taken >= 50:
            break
    assert taken == 50
    second = run(20, 10)
    assert second.reused
    assert [(s.partition, s.records) for s in second.result] == [(0, 50)]
    assert numbered_sequences(kafka_b.bootstrap, dst) == {0: list(range(150)), 1: list(range(100))}
