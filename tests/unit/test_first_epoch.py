"""When a new worker generation reports its takeover: once every mirror of its flow group ended an epoch after
it (handoff.takeover.first_epoch), with when and the records that epoch copied."""
from __future__ import annotations

from sparkmirror.handoff.takeover import first_epoch
from sparkmirror.stats import MirrorStats


def _epoch(stats: MirrorStats, records: int, end_ms: int, latency_max: int = 0, partition: int = 0) -> None:
    stats.update([{"source_topic": "t", "partition": partition, "target_topic": "a.t", "records": records,
                   "bytes": records, "epoch_start_ms": end_ms - 1000, "epoch_end_ms": end_ms, "lane": 0,
                   "next_offset": records, "source_end": records, "lag": 0, "latency_ms_sum": records * latency_max,
                   "latency_ms_max": latency_max}])


def test_not_before_every_mirror_ended_an_epoch_after_the_takeover():
    m1, m2 = MirrorStats("m1"), MirrorStats("m2")
    _epoch(m1, 5, 1_000, latency_max=99_000)  # before the takeover (a restarted generation's figures carry on)
    _epoch(m1, 3, 1_000, latency_max=77_000, partition=1)
    before = {"m1": m1.snapshot(), "m2": {}}
    assert first_epoch(before, {"m1": m1.snapshot()}) is None
    _epoch(m1, 40, 3_000, latency_max=1_250)  # records of the handoff's gap waited up to 1.25 s
    assert first_epoch(before, {"m1": m1.snapshot(), "m2": m2.snapshot()}) is None  # m2 has not yet
    _epoch(m2, 0, 3_500)  # an idle mirror's epoch counts: it committed nothing and is done
    assert first_epoch(before, {"m1": m1.snapshot(), "m2": m2.snapshot()}) == \
        {"firstEpochMs": 3_500, "firstEpochRecords": 40, "latencyMaxMs": 1_250}  # partition 1 copied nothing
    assert first_epoch({}, {}) is None  # nothing to wait for is no report
