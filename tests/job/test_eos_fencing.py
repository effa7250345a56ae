"""Two copies of the same lane at once (a zombie and its replacement) never produce a duplicate."""
from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying import LaneCopy, lane_copy, run_epoch
from sparkmirror.copying.commit import ExactlyOnce
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic, read_progress

from .conftest import read_topic, wait_for
from sparkmirror_dev.testing import NumberedProducer

from .test_eos_crash import PARTS

pytestmark = pytest.mark.minutes(2.3)


def _one_lane(kafka_a, kafka_b, topic, flowgroup):
    """A flow group of one lane over a source topic of PARTS partitions and its remote topic."""
    src = topic(kafka_a, PARTS)
    dst = topic(kafka_b, PARTS, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, commitIntervalMs=50)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    return cfg, mirror, src, dst, list(plan_lanes(mirror.name, 1, [(src, dst, PARTS)])[0].partitions)


def _each_once(kafka_b, dst: str, sent: int) -> dict:
    """The remote topic holds every numbered record once per partition, in order; returns what it holds."""
    got = read_topic(kafka_b.bootstrap, dst)
    for part in range(PARTS):
        seqs = [int(r.value.decode().split(":")[1]) for r in got[part]]
        assert seqs == list(range(sent)), f"partition {part}: {len(seqs) - len(set(seqs))} duplicates"
    return got


@pytest.mark.parametrize("older,newer", [("records", "records"), ("batches", "batches"), ("records", "batches")])
def test_second_copy_of_a_lane_fences_the_first(kafka_a, kafka_b, topic, flowgroup, older, newer):
    """Whichever path each copy takes (a mirror switched to `copy: batches` included): the lane's transactional
    id is the same, so the newer copy fences the older one and every record lands once."""
    cfg, mirror, src, dst, parts = _one_lane(kafka_a, kafka_b, topic, flowgroup)
    producer = NumberedProducer(kafka_a.bootstrap, src, rate=400)
    producer.start()
    results: dict[str, list] = {}
    paths = {"zombie": older, "newer": newer, "final": newer}

    def copy(name: str, seconds: float) -> None:
        c = cfg.model_copy(update={"copy_path": paths[name]})
        results[name] = run_epoch(lane_copy(c, mirror, 0, parts, seconds))

    zombie = threading.Thread(target=copy, args=("zombie", 120.0))
    zombie.start()
    target = cfg.cluster("b").client_config()
    wait_for(lambda: bool(read_progress(target, cfg.progressTopic, "a").latest), 60, "the first copy committing")
    time.sleep(1)
    newer = threading.Thread(target=copy, args=("newer", 6.0))
    newer.start()
    newer.join(60)
    zombie.join(150)
    sent = producer.stop()
    copy("final", 4.0)  # catch up what was produced after both stopped

    assert all(s.fenced for s in results["zombie"]), ("the older copy kept running after being fenced", results)
    assert results["zombie"][0].epoch_end_ms < results["zombie"][0].epoch_start_ms + 110_000
    assert not any(s.fenced for s in results["newer"]) and sum(s.records for s in results["newer"]) > 0
    assert sum(s.records for s in results["zombie"]) > 0, "the zombie copied nothing: nothing was tested"
    got = _each_once(kafka_b, dst, sent)
    latest = read_progress(cfg.cluster("b").client_config(), cfg.progressTopic, "a").latest
    assert {k[2]: r.next_offset for k, r in latest.items()} == {p: got[p][-1].offset + 1 - 0 for p in range(PARTS)} \
        or all(r.next_offset >= sent for r in latest.values())


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN, KafkaError._MSG_TIMED_OUT], ids=["answered", "no-answer"])
def test_a_copy_failing_while_a_newer_one_starts_does_not_fence_it(kafka_a, kafka_b, topic, flowgroup, code,
                                                                  caplog):
    """The race behind a CI failure: a newer copy's init_transactions bumped the epoch while the older copy was
    committing; the broker answered the older copy's EndTxn with UNKNOWN_SERVER_ERROR (not PRODUCER_FENCED), the
    older copy took it for a transient fault, started afresh and its own init_transactions fenced the newer copy.

    The older copy's commit is held until the newer one committed, then fails with the broker's answer, or with
    no answer at all (a request timed out). Either way the older copy must stop as fenced, learning it from its
    own producer (the broker answered) or from the progress topic (a newer copy committed past anything this
    copy read), and the newer copy must copy its whole epoch unfenced. Brokers, fencing and progress are real;
    only the moment and the kind of the older copy's failure are set by the test."""
    cfg, mirror, src, dst, parts = _one_lane(kafka_a, kafka_b, topic, flowgroup)
    armed, held, release = threading.Event(), threading.Event(), threading.Event()

    class HeldCommit(ExactlyOnce):
        def commit(self, progress, on_delivery) -> None:
            if armed.is_set() and not held.is_set():
                held.set()
                release.wait(60)
                raise KafkaException(KafkaError(code, "failure set by the test", txn_requires_abort=True))
            super().commit(progress, on_delivery)

    producer = NumberedProducer(kafka_a.bootstrap, src, rate=400)
    producer.start()
    target = cfg.cluster("b").client_config()
    results: dict[str, list] = {}

    def copy(name: str, copier: LaneCopy) -> None:
        results[name] = run_epoch(copier)

    older = LaneCopy(cfg, mirror, 0, parts, 90.0)
    older.protocol_class = HeldCommit
    caplog.set_level(logging.WARNING, logger="sparkmirror.copying")
    older_thread = threading.Thread(target=copy, args=("older", older))
    older_thread.start()
    wait_for(lambda: bool(read_progress(target, cfg.progressTopic, "a").latest), 60, "the older copy committing")
    armed.set()
    wait_for(held.is_set, 30, "the older copy's commit held", interval=0.05)
    before = {k: r.next_offset for k, r in read_progress(target, cfg.progressTopic, "a").latest.items()}
    newer_thread = threading.Thread(target=copy, args=("newer", LaneCopy(cfg, mirror, 0, parts, 8.0)))
    newer_thread.start()
    wait_for(lambda: {k: r.next_offset for k, r in read_progress(target, cfg.progressTopic, "a").latest.items()}
             != before, 60, "the newer copy committing", interval=0.1)
    release.set()
    older_thread.join(120)
    newer_thread.join(60)
    sent = producer.stop()
    copy("final", LaneCopy(cfg, mirror, 0, parts, 4.0))

    assert all(s.fenced for s in results["older"]), ("the older copy went on after a newer one took over", results)
    assert not any(s.fenced for s in results["newer"]), ("the older copy fenced the newer one", results)
    newer = results["newer"][0]
    assert newer.epoch_end_ms - newer.epoch_start_ms >= 7_500, "the newer copy did not copy its whole epoch"
    # which of the two told the older copy: its own producer when the broker answered, the progress topic else
    assert ("stopping rather than fencing it" in caplog.text) == (code == KafkaError._MSG_TIMED_OUT), caplog.text
    _each_once(kafka_b, dst, sent)


def test_two_jobs_of_one_flow_group_at_once(kafka_a, kafka_b, topic, flowgroup, job, tmp_path):
    """Two whole applications of the same flow group (say, both worker generations during a handoff) run side
    by side: each epoch start fences the other's lanes, and the target still holds every record once. Without
    a Lease, the one that started first sees the other's generation mark and exits (status 0) once the other
    took the flow group over; started within the same moment, both carry the same generation and go on
    fencing each other. Either way: every record once."""
    from .test_eos_crash import _check, _target_count

    src = topic(kafka_a, PARTS)
    remote = f"a.{src}"
    cfg = flowgroup(src, epochSeconds=4)
    producer = NumberedProducer(kafka_a.bootstrap, src)
    producer.start()
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    from .conftest import JobProcess

    one = JobProcess(cfg, tmp_path / "one").start()
    two = JobProcess(cfg, tmp_path / "two").start()
    try:
        wait_for(lambda: _target_count(kafka_b.bootstrap, remote) > 0, 300, "copying")
        time.sleep(20)  # both running, fencing each other every epoch
        for jp in (one, two):  # running, or stopped because the other took over: the failure's own lines else
            assert jp.proc.poll() is None or (jp.proc.returncode == 0 and "was taken over by worker generation"
                                              in jp.log()), "\n".join(
                ln for ln in jp.log().splitlines() if "Error" in ln or "sparkmirror:" in ln or "Traceback" in ln
            )[-4000:] or jp.log()[-4000:]
        assert one.proc.poll() is None or two.proc.poll() is None, "neither job copies any more"
        sent = producer.stop()
        wait_for(lambda: _target_count(kafka_b.bootstrap, remote) >= sent * PARTS, 300, "catch-up")
        time.sleep(3)
        _check(kafka_b.bootstrap, remote, sent, True)
        assert "fenced by a newer copy" in one.log() + two.log(), "the two jobs never overlapped on a lane"
        assert one.stop() == 0, one.log()[-3000:]
        assert two.stop() == 0, two.log()[-3000:]
    finally:
        one.kill(9)
        two.kill(9)


def test_a_lane_of_a_superseded_generation_never_fences_the_next(kafka_a, kafka_b, topic, flowgroup):
    """The handoff's race (issue: a superseded driver still planning for a moment after its Lease moved): a lane
    of generation 1 starting after generation 2 wrote its supersede mark must stop without init_transactions,
    so generation 2's lane of the same transactional id, already in a transaction, commits unfenced."""
    import time as clock

    from confluent_kafka import Producer

    from sparkmirror.handoff.takeover import write_mark
    from sparkmirror.resource.names import transactional_id

    cfg, mirror, src, dst, parts = _one_lane(kafka_a, kafka_b, topic, flowgroup)
    later = cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"generation": 2})})
    write_mark(later, "b", [cfg.name], int(clock.time() * 1000), 30.0, go=False)  # takeover's first step
    newer = Producer({"bootstrap.servers": kafka_b.bootstrap, "enable.idempotence": True,
                      "transactional.id": transactional_id(cfg.resource, cfg.name, mirror.name, 0)})
    newer.init_transactions(30)
    newer.begin_transaction()
    newer.produce(dst, value=b"written by generation 2", partition=0)
    assert newer.flush(30) == 0

    rows = run_epoch(LaneCopy(cfg, mirror, 0, parts, 2.0))

    assert rows and all(r.fenced for r in rows), rows  # superseded: it stopped as a fenced lane does
    newer.commit_transaction(30)  # raises when the older lane's init_transactions fenced it
    assert [r.value for rs in read_topic(kafka_b.bootstrap, dst).values() for r in rs] == [b"written by generation 2"]
