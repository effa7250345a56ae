"""Progress read back: the latest record and the dense offset map of each source partition.

`ProgressState` is what both readers (`reader.py`) fill, by the same two rules:
- a tombstone resets its key: latest record, history and totals are dropped;
- a record whose source range starts *before* the last one held for its key, whose source topic id differs
  or whose remote topic is another also resets it first (the progress topic or the source topic was
  recreated, or the route changed, and mirroring started over): only the new history counts.
Totals (records and bytes mirrored per key) are the latest record's `recTotal`/`bytesTotal`, so they hold across
compaction; records written before those fields existed add up their counts instead.
History is bounded: at most `max_history` ranges per source partition (`spark.offsetHistory`, default
`MAX_HISTORY`), the oldest dropped first (compaction drops old values on the broker too), held as integer
columns (`OffsetMap`), so a driver's memory is bounded by configuration, not by uptime.

`OffsetMap.translate` is the one offset translation (consumer-group checkpoints use it).
"""
from __future__ import annotations

import datetime
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .record import AclsOf, GenerationOf, ProgressRecord, SourcePartition, TopicOf, anchor_block

MAX_HISTORY = 200_000  # progress records kept per source partition (oldest dropped first)

Inside = Callable[["Range", int], "int | None"]
"""inside(range, o): how many records of `range` the copier wrote for source offsets below `o` (None: unknown)."""

Between = Callable[["Range", "Range", int, int], "int | None"]
"""between(before, after, start, o): in a stretch of the map whose ranges compaction dropped (between the held
ranges `before` and `after`; its target records begin at `start`), the target offset of the record that was
source offset `o`, counted on both clusters (None: unknown)."""


class Range(NamedTuple):
    """One committed range of an offset map: what translation and rates need of a progress record."""

    source_first: int
    source_last: int
    target_first: int
    target_last: int
    count: int
    commit_ms: int
    bytes: int
    target_topic: str
    source_topic: str
    partition: int
    mirror: str
    source_cluster: str


_COLUMNS = ("source_first", "source_last", "target_first", "target_last", "count", "commit_ms", "bytes")


class _Ranges(Sequence[Range]):
    """The map's ranges, oldest first, made on access from its columns."""

    def __init__(self, m: "OffsetMap") -> None:
        self._m = m

    def __len__(self) -> int:
        return len(self._m._cols[0]) - self._m._start

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        j = i + self._m._start
        m = self._m
        return Range(*(c[j] for c in m._cols), m.target_topic, m.source_topic, m.partition, m.mirror,
                     m.source_cluster)


class OffsetMap:
    """Source range -> target range history of one source partition, in commit order.

    Held as columns of 64-bit integers (56 bytes a range, against about 400 for a ProgressRecord object):
    a driver follows every partition's progress for hours (one range per commit interval), so what it
    holds per range decides its memory. `records` reads them as `Range`s."""

    def __init__(self, records: Iterable[ProgressRecord | Range] = ()) -> None:
        self._cols = tuple(array("q") for _ in _COLUMNS)
        self._start = 0  # ranges before it were dropped (trimmed in chunks: amortised O(1) per append)
        self.target_topic = self.source_topic = self.mirror = self.source_cluster = ""  # a map is one route
        self.partition = -1
        for r in records:
            self.append(r)

    @property
    def records(self) -> _Ranges:
        return _Ranges(self)

    def __len__(self) -> int:
        return len(self._cols[0]) - self._start

    def append(self, r: ProgressRecord | Range) -> None:
        self.target_topic, self.source_topic, self.partition = r.target_topic, r.source_topic, r.partition
        self.mirror, self.source_cluster = r.mirror, r.source_cluster
        for c, name in zip(self._cols, _COLUMNS):
            c.append(getattr(r, name))

    def keep_last(self, n: int) -> None:
        """Drop all but the newest `n` ranges (at most n/8 extra are held between compactions)."""
        self._start = max(self._start, len(self._cols[0]) - n)
        if self._start > max(n // 8, 1024):
            for c in self._cols:
                del c[: self._start]
            self._start = 0

    def translate(self, offset: int, inside: Inside | None = None, between: Between | None = None) -> int | None:
        """The target offset a consumer at source `offset` (next to read) continues from, exactly.

        At range boundaries and in gap-free ranges this is arithmetic. Past a range, or in a range that wrote
        nothing (every record skipped, e.g. loops filtered by the identity policy), it is the offset after the
        last record the target got. In a range with gaps on the source side (aborted records, transaction
        markers, records filtered as loops) the position inside the range is `target_first + inside(range,
        offset)`; the copier writes each range in one transaction, so its target offsets are consecutive.
        Without `inside`, or if it cannot tell, the range's first target offset (a few records repeated, none
        skipped). Past a range and before the next one held, where compaction dropped the ranges in between
        (only anchors are left there, see `record.py`), it is `between(...)`; without it, or if it cannot
        tell, the offset after the earlier range (records repeated, none skipped). None when `offset` is older
        than the history held, or nothing was written yet.
        """
        firsts = self._cols[0]
        i = bisect_right(firsts, offset, lo=self._start) - 1 - self._start
        if i < 0:
            return None
        r = self.records[i]
        if offset > r.source_last:
            start = self._target_next(i)
            if between is not None and start is not None and i + 1 < len(self):
                after = self.records[i + 1]
                if after.count > 0 and after.target_first > start + 1 and after.source_first > r.source_last + 1:
                    t = between(r, after, start, offset)  # records were copied between: count them
                    if t is not None and start <= t <= after.target_first:
                        return t
            return start
        if r.count == 0:
            return self._target_next(i)
        if offset == r.source_first:
            return r.target_first
        if r.source_last - r.source_first + 1 == r.count == r.target_last - r.target_first + 1:
            return r.target_first + (offset - r.source_first)
        if inside is not None and r.target_last - r.target_first + 1 == r.count:
            n = inside(r, offset)
            if n is not None and 0 <= n <= r.count:
                return r.target_first + n
        return r.target_first

    def translate_back(self, target: int, nth: Callable[[Range, int], int | None] | None = None) -> int | None:
        """The source offset a consumer at `target` (next to read on the target) continues from: the reverse of
        `translate`, for moving a group back after a failover (KIP-1098's reverse checkpoints). Exact at range
        boundaries and inside gap-free ranges; inside a range with gaps, `nth(range, n)`: the source offset of
        the range's n-th copied record (counted on the source), and the consumer continues right after the last
        record it read (the n-1-th): records between it and the next copied one (a transform dropped them, or
        an aborted transaction's) are read on the source, none skipped. Without `nth`, the range's first source
        offset (records repeat, none is skipped). Past a range held, the source offset after it (records repeat
        where compaction dropped the ranges after it). None before the history held or when nothing was
        written."""
        held = [r for r in self.records if r.count > 0 and r.target_first >= 0]
        i = bisect_right([r.target_first for r in held], target) - 1
        if i < 0:
            return None
        r = held[i]
        if target > r.target_last:  # the whole range was read; what follows on the source is not read yet
            return r.source_last + 1
        if r.source_last - r.source_first + 1 == r.count == r.target_last - r.target_first + 1:
            return r.source_first + (target - r.target_first)
        n = target - r.target_first
        if n == 0:
            return r.source_first
        if nth is not None and r.target_last - r.target_first + 1 == r.count:
            s = nth(r, n - 1)
            if s is not None and r.source_first <= s <= r.source_last:
                return s + 1
        return r.source_first

    def target_end(self) -> int | None:
        """The target offset after the last record the map's ranges wrote (None: none wrote any yet)."""
        return self._target_next(len(self) - 1) if len(self) else None

    def dead_blocks(self, target_low: int) -> list[int]:
        """Anchor blocks (`record.anchor_block`) of held ranges that can translate nothing any more: every
        block before that of the newest range whose target records start below `target_low` (the target's
        earliest offset): whatever they map to the target has been deleted by its retention."""
        firsts, tfirsts, counts = self._cols[0], self._cols[2], self._cols[4]
        cut = None
        for j in range(len(firsts) - 1, self._start - 1, -1):
            if counts[j] > 0 and 0 <= tfirsts[j] <= target_low:
                cut = anchor_block(firsts[j])
                break
        if cut is None:
            return []
        return sorted({b for b in map(anchor_block, firsts[self._start:]) if b < cut})

    def _target_next(self, i: int) -> int | None:
        """The target offset after the last record written by ranges up to `i` (None: none wrote any yet)."""
        counts, lasts = self._cols[4], self._cols[3]
        for j in range(self._start + i, self._start - 1, -1):
            if counts[j] > 0 and lasts[j] >= 0:
                return lasts[j] + 1
        return None


@dataclass
class ProgressState:
    """The progress topic read back: latest record, offset map and records mirrored per source partition."""

    latest: dict[SourcePartition, ProgressRecord] = field(default_factory=dict)
    maps: dict[SourcePartition, OffsetMap] = field(default_factory=dict)
    totals: dict[SourcePartition, int] = field(default_factory=dict)  # records mirrored since the last reset
    bytes_totals: dict[SourcePartition, int] = field(default_factory=dict)  # their key + value bytes
    max_history: int = MAX_HISTORY
    generations: dict[GenerationOf, int] = field(default_factory=dict)  # highest worker generation marked
    generation_ids: dict[GenerationOf, dict[str, list[str]]] = field(default_factory=dict)  # and its lanes' ids
    generation_go: dict[GenerationOf, bool] = field(default_factory=dict)  # its older lanes are fenced
    revoked: dict[GenerationOf, int] = field(default_factory=dict)  # the highest generation rolled back, if any
    failovers: dict[GenerationOf, dict] = field(default_factory=dict)  # failed over (the mark's value)
    acls: dict[AclsOf, dict] = field(default_factory=dict)  # ACL records: the latest value per mirror (aclsync)
    topics: dict[TopicOf, dict] = field(default_factory=dict)  # topic records: remote topics created (topicdeletion)
    _tips: dict[SourcePartition, ProgressRecord] = field(default_factory=dict)  # newest range put into each map
    # (flow group, generation, source partition) -> (first, last) commitMs of the ranges read that committed
    # records: where a handoff's visible pause is read from, per partition (handoff/pause.py: a generation's lanes
    # hand over one by one, so a flow group's spans of two generations overlap)
    commit_spans: dict[tuple[str, int, SourcePartition], tuple[int, int]] = field(default_factory=dict)

    def mark_acls(self, of: AclsOf, value: dict | None) -> None:
        """A mirror's ACL record (the newest wins; a tombstone forgets it). Kept as written: `aclsync` reads it."""
        if value is None:
            self.acls.pop(of, None)
        else:
            self.acls[of] = value

    def mark_topic(self, of: TopicOf, value: dict | None) -> None:
        """A created remote topic's record (the newest wins; a tombstone forgets it), kept as written."""
        if value is None:
            self.topics.pop(of, None)
        else:
            self.topics[of] = value

    def mark_failover(self, of: GenerationOf, value: dict) -> None:
        """A failover mark (the newest per flow group wins): active stops every generation, else it was undone."""
        if value.get("active", True):
            self.failovers[of] = value
        else:
            self.failovers.pop(of, None)

    def mark_generation(self, of: GenerationOf, generation: int, ids: dict[str, list[str]] | None = None,
                        go: bool = True, revoked: int = 0) -> None:
        """A generation mark: the higher rank wins (`mark_rank`); the same generation at the same rank adds its
        go and ids (a takeover writes "go": false, then "go": true)."""
        rank, known = mark_rank(generation, revoked), self.rank(of)
        if rank > known:
            self.generations[of] = generation
            self.generation_ids[of] = ids or {}
            self.generation_go[of] = go
            if revoked > generation:
                self.revoked[of] = revoked
            else:
                self.revoked.pop(of, None)
        elif rank == known and generation == self.generations.get(of, 0):
            self.generation_go[of] = self.generation_go.get(of, False) or go
            self.generation_ids[of] = ids or self.generation_ids.get(of, {})

    def rank(self, of: GenerationOf) -> tuple[int, bool]:
        return mark_rank(self.generations.get(of, 0), self.revoked.get(of, 0))

    def ceiling(self, resource: str, uid: str, flow_group: str) -> int:
        """The highest generation number any mark of the flow group names (holding it, or rolled back)."""
        of = (resource, uid, flow_group)
        return max(self.generations.get(of, 0), self.revoked.get(of, 0))

    def _rolled_back(self, of: GenerationOf, generation: int) -> bool:
        return self.generations.get(of, 0) < generation <= self.revoked.get(of, 0)

    def may_copy(self, resource: str, uid: str, flow_group: str, generation: int) -> bool | None:
        """True once `generation` took the flow group over (go), False once a later one did, it was rolled back
        or the flow group was failed over, None meanwhile."""
        of = (resource, uid, flow_group)
        marked = self.generations.get(of, 0)
        if marked > generation or of in self.failovers or self._rolled_back(of, generation):
            return False
        return True if marked == generation and self.generation_go.get(of) else None

    def generation(self, resource: str, uid: str, flow_group: str) -> int:
        """The worker generation that holds `flow_group` by the marks (0: none marked)."""
        return self.generations.get((resource, uid, flow_group), 0)

    def rolled_back(self, resource: str, uid: str, flow_group: str, generation: int) -> bool:
        """Whether `generation` was rolled back: an earlier one took the flow group back from it."""
        return self._rolled_back((resource, uid, flow_group), generation)

    def superseded_why(self, resource: str, uid: str, flow_group: str, generation: int) -> str | None:
        """Why worker `generation` of the flow group must not copy (None: it may, as far as marks go)."""
        of = (resource, uid, flow_group)
        if of in self.failovers:
            return failed_over_message(flow_group, self.failovers[of])
        marked = self.generations.get(of, 0)
        if self._rolled_back(of, generation):
            return (f"worker generation {generation} of flow group {flow_group!r} was rolled back: generation "
                    f"{marked} took the flow group back")
        if marked <= generation:
            return None
        return f"flow group {flow_group!r} was taken over by worker generation {marked}; this is generation {generation}"

    def add(self, rec: ProgressRecord) -> None:
        k = rec.source_partition
        if rec.count > 0:
            of = (rec.flow_group, rec.generation, k)
            first, last = self.commit_spans.get(of, (rec.commit_ms, rec.commit_ms))
            self.commit_spans[of] = (min(first, rec.commit_ms), max(last, rec.commit_ms))
        self._into_map(rec)
        self.latest[k] = rec
        self.totals[k] = rec.records_total if rec.records_total >= 0 else self.totals.get(k, 0) + rec.count
        self.bytes_totals[k] = rec.bytes_total if rec.bytes_total >= 0 else self.bytes_totals.get(k, 0) + rec.bytes

    def add_anchor(self, rec: ProgressRecord) -> None:
        """An anchor (`record.py`): an older range kept beyond compaction, into the offset map only. Read in
        commit order (the reader takes anchors from a one-partition progress topic only), so it is newer than
        everything held but the progress record it was written with, which came right before it."""
        tip = self._tips.get(rec.source_partition)
        if tip is not None and rec.source_first == tip.source_first and not self._starts_over(tip, rec):
            return
        self._into_map(rec)

    def _into_map(self, rec: ProgressRecord) -> None:
        k = rec.source_partition
        m, tip = self.maps.get(k), self._tips.get(k)
        if m is not None and len(m) and tip is not None and self._starts_over(tip, rec):
            self.reset(k)  # mirroring started over (from a recreated topic, or into another): keep the new history
            m = None
        if m is None:
            m = self.maps[k] = OffsetMap()
        m.append(rec)
        if len(m) > self.max_history:
            m.keep_last(self.max_history)
        self._tips[k] = rec

    @staticmethod
    def _starts_over(tip: ProgressRecord, rec: ProgressRecord) -> bool:
        return (rec.source_first < tip.source_first or rec.target_topic != tip.target_topic
                or _other_topic(tip.source_topic_id, rec.source_topic_id))

    def reset(self, k: SourcePartition) -> None:
        """A tombstone (progress deliberately reset) or a restart: forget everything about the partition."""
        self.latest.pop(k, None)
        self.maps.pop(k, None)
        self._tips.pop(k, None)
        self.totals.pop(k, None)
        self.bytes_totals.pop(k, None)

    def resume_totals(self, source_cluster: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (records, bytes) mirrored so far, which the next progress record carries on."""
        return {(t, p): (n, self.bytes_totals.get((c, t, p), 0)) for (c, t, p), n in self.totals.items()
                if c == source_cluster}

    def resume_offsets(self, source_cluster: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> next source offset to copy, for one source cluster."""
        return {(t, p): r.next_offset for (c, t, p), r in self.latest.items() if c == source_cluster}


def _other_topic(before: str, now: str) -> bool:
    """Two topic ids that both are known and differ: the topic was deleted and created again in between."""
    return bool(before and now and before != now)


def mark_rank(generation: int, revoked: int = 0) -> tuple[int, bool]:
    """A generation mark's rank (progress/record.py): a take-back revoking generations up to `revoked` ranks just
    above their own marks, and below any later generation's."""
    return (max(generation, revoked), revoked > generation)


def failed_over_message(flow_group: str, failover: dict) -> str:
    """One line for logs and errors: when, which mirrors, and how to mirror again."""
    at = datetime.datetime.fromtimestamp(int(failover.get("atMs", 0)) / 1000, datetime.timezone.utc)
    return (f"flow group {flow_group!r} was failed over at {at:%Y-%m-%d %H:%M:%S} UTC (`sparkmirror failover`, "
            f"mirrors {', '.join(failover.get('mirrors') or []) or '-'}): it copies nothing more until "
            "`sparkmirror failover --undo` lets it")
