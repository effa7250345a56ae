"""An exactly-once lane that has read everything its source had commits after a quarter of commitIntervalMs
(its records are visible only at the commit), and still copies every record exactly once; a lane reading full
batches of a backlog keeps whole intervals (shorter transactions there cost throughput)."""
from __future__ import annotations

import threading
import time

import pytest

from confluent_kafka import Producer

from sparkmirror.copying import LaneCopy, loop, run_epoch
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.resource.flowgroup import Delivery

from .conftest import numbered_sequences, produce_numbered


def test_a_trickle_commits_after_a_quarter_of_the_interval(kafka_a, kafka_b, topic, flowgroup) -> None:
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, delivery=Delivery.EXACTLY_ONCE, commitIntervalMs=2000)
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(cfg.mirrors[0].name, 1, [(src, dst, 2)])[0].partitions)
    copier = LaneCopy(cfg, cfg.mirrors[0], 0, parts, 12.0)
    runner = threading.Thread(target=run_epoch, args=(copier,))
    runner.start()
    producer = Producer({"bootstrap.servers": kafka_a.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    try:
        for seq in range(30):  # a record a partition every 0.2 s for 6 s: the lane reads all there is each time
            for part in range(2):
                producer.produce(src, key=str(seq).encode(), value=f"{part}:{seq}".encode(), partition=part)
            assert producer.flush(10) == 0
            time.sleep(0.2)
    finally:
        runner.join(60)
    assert not runner.is_alive()
    assert numbered_sequences(kafka_b.bootstrap, dst) == {p: list(range(30)) for p in range(2)}
    assert sorted(s.records for s in copier.result) == [30, 30]
    # whole 2-s intervals would give at most 4 transactions in these 6 s; quarters about 12
    assert copier.commits >= 7, copier.commits


def test_full_batches_of_a_backlog_keep_whole_intervals(kafka_a, kafka_b, topic, flowgroup,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 2 records make a backlog of 300,000 last longer than the epoch: every read is full, so no
    interval ends early (quarters of the 250-ms interval would give 16 transactions in the 1-s epoch). The
    epoch is short because the lane copies fast: lingering its commit interval, its producer no longer spins a
    core beside the copy loop, and a 2-s epoch copied all 300,000 (CI, 2 cores)."""
    monkeypatch.setattr(loop, "READ_BATCH", 2)
    src = topic(kafka_a, 2)
    dst = topic(kafka_b, 2, name=f"a.{src}")
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 150_000, {"queue.buffering.max.messages": 400_000})
    cfg = flowgroup(src, lanes=1, delivery=Delivery.EXACTLY_ONCE, commitIntervalMs=250)
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(cfg.mirrors[0].name, 1, [(src, dst, 2)])[0].partitions)
    copier = LaneCopy(cfg, cfg.mirrors[0], 0, parts, 1.0)
    run_epoch(copier)
    copied = sum(s.records for s in copier.result)
    assert 0 < copied < 300_000, copied  # the backlog outlasted the epoch: every read was a full batch
    assert copier.commits <= 5, copier.commits  # 4 whole intervals and the epoch's end
    seqs = numbered_sequences(kafka_b.bootstrap, dst)
    assert all(s == list(range(len(s))) for s in seqs.values()) and sum(map(len, seqs.values())) == copied
