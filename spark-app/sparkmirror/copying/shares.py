"""A partition's share of a lane's open commit interval: what was copied for it and what the target
acknowledged. The unit the commit protocols, the progress records and the offset map are made of, whichever
path (records today) copied it."""
from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import KafkaError

DeliveryError = tuple[KafkaError, str, int, int]
"""(error, topic, partition, source offset): a write the target refused or could not take; topic `<progress>`
for a progress record."""

PartitionKey = tuple[str, int]
"""(source topic, partition)."""


@dataclass(eq=False)
class Share:
    """One partition's share of the open commit interval, and the delivery reports of its records.

    The share itself is every one of its records' delivery callback (`__call__`): no object made per record,
    which was the copy loop's largest Python cost after produce() itself, and no reference cycle (a bound
    method kept on the share made every share cyclic garbage, about 1,900 an epoch per lane at 5,000
    records/s, which only Python's full collections freed). The idempotent producer reports a
    partition's records in the order they were produced, so the n-th report is the record at `offsets[n]`."""

    src_first: int
    topic: str
    partition: int
    errors: list[DeliveryError]  # the lane's
    src_last: int = -1
    count: int = 0
    nbytes: int = 0
    ts_sum: int = 0
    ts_min: int = -1
    timestamps: list[int] = field(default_factory=list)  # the records' own, for the latency histogram
    offsets: list[int] = field(default_factory=list)  # source offsets of the records produced, in order
    reports: int = 0
    tgt_first: int = -1
    tgt_last: int = -1
    batches: int = 0  # batch path: batches forwarded as they were
    rebuilt: dict[str, int] | None = None  # batch path: batches rebuilt, per reason
    transformed: dict[str, int] | None = None  # records the mirror's transforms dropped / found not JSON

    @property
    def acknowledged(self) -> bool:
        """Every record produced for this share was reported (acknowledged, or failed: see the lane's errors)."""
        return self.reports >= self.count

    def absorb(self, later: Share) -> None:
        """Take in the same partition's share of a later interval (one progress record covers both)."""
        self.src_last = later.src_last
        self.count += later.count
        self.nbytes += later.nbytes
        self.ts_sum += later.ts_sum
        self.timestamps += later.timestamps
        if later.ts_min >= 0 and (self.ts_min < 0 or later.ts_min < self.ts_min):
            self.ts_min = later.ts_min
        if later.tgt_first >= 0 and (self.tgt_first < 0 or later.tgt_first < self.tgt_first):
            self.tgt_first = later.tgt_first
        self.tgt_last = max(self.tgt_last, later.tgt_last)
        self.batches += later.batches
        if later.rebuilt:
            self.rebuilt = self.rebuilt or {}
            for why, n in later.rebuilt.items():
                self.rebuilt[why] = self.rebuilt.get(why, 0) + n
        if later.transformed:
            self.note(later.transformed)

    def note(self, transformed: dict[str, int]) -> None:
        """Add records the transforms dropped or found not JSON (`transforms.Counts`' outcomes)."""
        mine = self.transformed = self.transformed or {}
        for what, n in transformed.items():
            if n:
                mine[what] = mine.get(what, 0) + n

    def __call__(self, err: KafkaError | None, msg) -> None:
        """The delivery report of this share's next record."""
        n = self.reports
        self.reports = n + 1
        if err is not None:
            self.errors.append((err, self.topic, self.partition, self.offsets[n] if n < len(self.offsets) else -1))
            return
        off = msg.offset()
        if self.tgt_first < 0 or off < self.tgt_first:
            self.tgt_first = off
        if off > self.tgt_last:
            self.tgt_last = off


Interval = dict[PartitionKey, Share]
"""A commit interval: the shares of the partitions it copied."""


def merged(intervals: list[Interval]) -> Interval:
    """Consecutive intervals as one (their progress is written together): the first absorbs the others."""
    out = intervals[0]
    for later in intervals[1:]:
        for key, share in later.items():
            if key in out:
                out[key].absorb(share)
            else:
                out[key] = share
    return out
