"""Which source offsets became which target offsets, cut into ranges of about `range_records` records. Pure.

A partition's committed progress records (`OffsetMap.records`, in commit order) are consecutive: each commit
starts where the one before ended. Offsets between two commits are transaction markers (or records nobody copied:
aborted ones, or another producer's on the target), so the ranges tile both sides without holes: a range covers
source offsets from the previous range's end (exclusive) to its last commit's `source_last`, and target offsets
from just after the previous range's last target record to its last commit's `target_last`. A record somebody
else wrote into the target between two commits therefore lands inside a range, where it shows as a difference.
Only what is committed is planned, so a mirror that keeps running meanwhile is never a difference.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ..progress import Range

DEFAULT_RANGE_RECORDS = 50_000


@dataclass(frozen=True)
class VerifyRange:
    """Source offsets [source_from, source_to] and target offsets [target_from, target_to] (inclusive) that hold
    the same records; `committed` is how many records the progress topic says were copied (-1 target offsets:
    none were)."""

    flow_group: str
    mirror: str
    source_cluster: str
    source_topic: str
    partition: int
    source_from: int
    source_to: int
    target_cluster: str
    target_topic: str
    target_from: int
    target_to: int
    committed: int

    def as_dict(self) -> dict:
        return asdict(self)


def plan_ranges(flow_group: str, mirror: str, target_cluster: str, records: Iterable[Range],
                range_records: int = DEFAULT_RANGE_RECORDS) -> list[VerifyRange]:
    """One partition's committed history -> ranges of at least `range_records` committed records (the last one
    may hold fewer; where compaction left only anchors, the offsets between two held commits count instead). A commit is never split: inside a transaction target offsets are only known at its ends."""
    if range_records < 1:
        raise ValueError("range_records must be at least 1")
    out: list[VerifyRange] = []
    group: list[Range] = []
    n = size = 0
    src_next = tgt_next = -1  # where the next range starts on each side (-1: at its first commit)
    prev_last = None
    for rec in records:
        group.append(rec)
        n += rec.count
        # a stretch whose commits compaction dropped (only anchors held, progress/record.py) counts by its offsets
        size += rec.count + (max(0, rec.source_first - prev_last - 1) if prev_last is not None else 0)
        prev_last = rec.source_last
        if size >= range_records:
            out.append(_range(flow_group, mirror, target_cluster, group, n, src_next, tgt_next))
            src_next, tgt_next = out[-1].source_to + 1, _after(out[-1], tgt_next)
            group, n, size = [], 0, 0
    if group:
        out.append(_range(flow_group, mirror, target_cluster, group, n, src_next, tgt_next))
    return out


def _range(flow_group: str, mirror: str, target_cluster: str, group: list[Range], n: int,
           src_next: int, tgt_next: int) -> VerifyRange:
    first, last = group[0], group[-1]
    written = [r for r in group if r.count > 0 and r.target_first >= 0]
    if tgt_next < 0:
        tgt_next = written[0].target_first if written else -1
    tgt_to = written[-1].target_last if written else tgt_next - 1
    if tgt_next < 0:
        tgt_to = -1
    return VerifyRange(flow_group, mirror, first.source_cluster, first.source_topic, first.partition,
                       first.source_first if src_next < 0 else src_next, last.source_last, target_cluster,
                       last.target_topic, tgt_next, tgt_to, n)


def _after(r: VerifyRange, tgt_next: int) -> int:
    """The first target offset of the range after `r`: past its last record, or where `r` would have started."""
    return r.target_to + 1 if r.target_to >= 0 else tgt_next
