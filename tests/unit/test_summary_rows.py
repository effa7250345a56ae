"""Which summary rows a lane yields: only partitions with something new, and its first one, so the epoch boundary
does not grow with idle partitions (10,000 rows an epoch at 10,000 partitions); the driver keeps the rest."""
from __future__ import annotations

from sparkmirror.copying.lane import LaneCopy
from sparkmirror.lanes import LanePartition
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.stats import MirrorStats


def _copier(n: int) -> LaneCopy:
    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "clusters": [{"alias": "src", "bootstrapServers": "127.0.0.1:1"},
                                   {"alias": "tgt", "bootstrapServers": "127.0.0.1:2"}],
        "mirrors": [{"name": "m", "source": "src", "target": "tgt", "topics": "t", "emitCheckpoints": False}]})
    return LaneCopy(cfg, cfg.mirrors[0], 0, [LanePartition("t", p, "src.t") for p in range(n)])


def _epoch(c: LaneCopy, lag: dict[int, int], records: dict[int, int]) -> list[int]:
    """One epoch's end: set the figures the loop would have, return the partitions reported."""
    for (_t, p), s in c.summaries.items():
        s.records, s.next_offset, s.source_end, s.lag = records.get(p, 0), 100, 100 + lag.get(p, 0), lag.get(p, 0)
    rows = c.ledger.worth_reporting()
    for s in c.summaries.values():
        s.records = 0
    return [r.partition for r in rows]


def test_a_fresh_lane_reports_every_partition_then_only_what_changed() -> None:
    c = _copier(5)
    assert _epoch(c, {}, {}) == [0, 1, 2, 3, 4]
    assert _epoch(c, {}, {}) == [0]                  # idle: the first partition alone says the lane ran
    assert _epoch(c, {3: 7}, {}) == [0, 3]           # lag moved
    assert _epoch(c, {3: 7}, {2: 10}) == [0, 2]      # copied
    c.summaries[("t", 4)].waiting = "target cluster 'tgt' unreachable"
    assert _epoch(c, {3: 7}, {}) == [0, 4]           # a state is said every epoch


def test_kept_clients_carry_what_was_reported() -> None:
    c = _copier(3)
    _epoch(c, {}, {})
    nxt = _copier(3)
    nxt.ledger.reported = c.ledger.reported  # what take_clients does
    assert _epoch(nxt, {}, {}) == [0]
    assert _epoch(_copier(3), {}, {}) == [0, 1, 2]   # a fresh start reports everything again


def test_the_driver_keeps_unreported_partitions_and_zeroes_their_rates() -> None:
    stats = MirrorStats("m")
    row = {"mirror": "m", "lane": 0, "source_topic": "t", "target_topic": "src.t", "records": 50, "bytes": 500,
           "next_offset": 100, "source_end": 103, "lag": 3, "transactions": 1, "latency_ms_sum": 0,
           "latency_ms_max": 0, "epoch_start_ms": 0, "epoch_end_ms": 10_000, "error": None, "waiting": None,
           "waiting_since_ms": 0, "latency_le": None}
    stats.update([{**row, "partition": 0}, {**row, "partition": 1}])
    assert stats.lag() == 6 and stats.partitions[("t", 1)].records_per_s == 5.0
    stats.update([{**row, "partition": 0, "records": 0, "bytes": 0, "lag": 0}])
    assert stats.lag() == 3  # partition 1's last lag stands
    assert stats.partitions[("t", 1)].records_per_s == 0.0 and stats.partitions[("t", 1)].records_total == 50
