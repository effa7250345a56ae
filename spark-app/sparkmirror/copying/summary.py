"""The row a lane task yields per source partition and epoch: all that leaves the executor (records never do)."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass, field

LATENCY_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000)
"""Upper bounds of the end-to-end latency histogram (commit on the target minus the source record's timestamp)."""


def latency_le(done_ms: int, timestamps: list[int]) -> list[int]:
    """Per bound of LATENCY_BUCKETS_MS, how many of the records committed at `done_ms` took at most that long
    (cumulative, as Prometheus' `le` buckets; the count of all is the +Inf bucket)."""
    ts = sorted(timestamps)  # latency <= b  <=>  timestamp >= done_ms - b
    return [len(ts) - bisect_left(ts, done_ms - b) for b in LATENCY_BUCKETS_MS]


@dataclass
class PartitionSummary:
    """What one lane did for one source partition during one epoch: the row the Spark task yields."""

    mirror: str
    lane: int
    source_topic: str
    partition: int
    target_topic: str
    records: int = 0
    bytes: int = 0
    source_first: int = -1
    source_last: int = -1
    target_first: int = -1
    target_last: int = -1
    next_offset: int = -1
    source_end: int = -1
    lag: int = -1
    transactions: int = 0
    latency_ms_sum: int = 0
    latency_ms_max: int = -1
    epoch_start_ms: int = 0
    epoch_end_ms: int = 0
    generation: int = 0
    fenced: bool = False
    error: str | None = None  # set on the one row a lane yields when it stopped on a CopyError
    waiting: str | None = None  # what the lane waited for as the epoch ended: "target cluster 'b' unreachable"
    waiting_since_ms: int = 0
    latency_le: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS_MS))  # see latency_le()
    batches: int = 0  # batch path: batches forwarded as they were fetched
    rebuilt: dict[str, int] = field(default_factory=dict)  # batch path: batches rebuilt, per reason (rebuild.py)
    transformed: dict[str, int] = field(default_factory=dict)  # records the transforms dropped / found not JSON

    def row(self) -> tuple:
        return tuple(asdict(self).values())


SUMMARY_SCHEMA = ("mirror string, lane int, source_topic string, partition int, target_topic string, "
                  "records long, bytes long, source_first long, source_last long, target_first long, "
                  "target_last long, next_offset long, source_end long, lag long, transactions long, "
                  "latency_ms_sum long, latency_ms_max long, epoch_start_ms long, epoch_end_ms long, "
                  "generation int, fenced boolean, error string, waiting string, waiting_since_ms long, "
                  "latency_le array<bigint>, batches long, rebuilt map<string,bigint>, "
                  "transformed map<string,bigint>")
