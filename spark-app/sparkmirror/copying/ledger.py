"""A lane's ledger: what it committed (next offset and running totals per source partition), the progress records
that make an interval durable, and the epoch's per-partition summaries counted from them.

Shared by every copy path and both commit protocols: the offset map (source first..last -> target first..last)
is written here, from the shares the writer filled, so checkpoints, failover and `verify` read the same thing
whichever path copied the records."""
from __future__ import annotations

import time
from collections.abc import Iterable
from ..progress import ProgressRecord
from .context import LaneContext
from .shares import Interval, PartitionKey
from .start import TopicIds
from .summary import PartitionSummary, latency_le


def now_ms() -> int:
    return int(time.time() * 1000)


def commit_times(ms: list[float], pipelined: bool = False, acks_ms: list[float] | None = None) -> str:
    """How long the commits held the loop (records wait meanwhile): the figure behind the tail latency. Pipelined
    commits (at-least-once) hold nothing: theirs is the time from an interval's end to its progress committed.
    `acks_ms`: the part of each exactly-once commit spent waiting for its records' acks, before the progress
    records and the transaction's end (their target offsets go into the progress records, so that wait cannot
    overlap the commit)."""
    if not ms:
        return ""

    def spread(values: list[float]) -> tuple[float, float, float]:
        v = sorted(values)
        return v[len(v) // 2], v[min(len(v) - 1, len(v) * 99 // 100)], v[-1]

    what = "progress committed" if pipelined else "commits"
    p50, p99, top = spread(ms)
    acks = ""
    if acks_ms:
        a50, a99, atop = spread(acks_ms)
        acks = f" (of which waiting for acks {a50:.0f} ms median, {a99:.0f} ms p99, {atop:.0f} ms max)"
    return f", {what} {p50:.0f} ms median, {p99:.0f} ms p99, {top:.0f} ms max{acks}"


class Ledger:
    """The lane's committed positions and this epoch's summaries."""

    def __init__(self, ctx: LaneContext) -> None:
        self.ctx = ctx
        self.summaries: dict[PartitionKey, PartitionSummary] = {k: self.new_summary(k) for k in ctx.route}
        self.committed_next: dict[PartitionKey, int] = {}
        self.committed_totals: dict[PartitionKey, tuple[int, int]] = {}  # (records, bytes) carried on
        self.topic_ids = TopicIds()  # of the lane's topics at its start, stamped on its progress records
        self.commits = 0
        self.commit_ms: list[float] = []  # how long each commit held the loop (acks, progress, transaction)
        self.acks_ms: list[float] = []  # the part of each exactly-once commit spent waiting for acks
        # (next offset, source end, lag) per partition as last reported by this lane's clients: see worth_reporting
        self.reported: dict[PartitionKey, tuple[int, int, int]] = {}

    def new_summary(self, key: PartitionKey) -> PartitionSummary:
        return PartitionSummary(self.ctx.mirror.name, self.ctx.lane, key[0], key[1], self.ctx.route[key],
                                generation=self.ctx.config.worker.generation)

    def take(self, kept: Ledger) -> None:
        """Go on from the positions, totals and reports of the lane's previous copier (kept clients)."""
        self.reported = kept.reported
        self.topic_ids = kept.topic_ids
        self.committed_next = dict(kept.committed_next)
        self.committed_totals = dict(kept.committed_totals)

    def resumed(self, positions: dict[PartitionKey, int], totals: dict[PartitionKey, tuple[int, int]]) -> None:
        """Where the lane goes on from, read from the progress topic."""
        self.committed_next.update(positions)
        self.committed_totals.update(totals)

    def progress_records(self, interval: Interval) -> list[ProgressRecord]:
        ctx, commit_ms, totals = self.ctx, now_ms(), self.committed_totals
        cfg, route = ctx.config, ctx.route
        return [ProgressRecord(ctx.mirror.source, topic, part, share.src_last + 1, share.src_first, share.src_last,
                               route[(topic, part)], share.tgt_first, share.tgt_last, share.count, commit_ms,
                               cfg.worker.generation, cfg.name, ctx.mirror.name, ctx.lane, share.nbytes,
                               cfg.resource, self.topic_ids.source.get(topic, ""),
                               self.topic_ids.target.get(route[(topic, part)], ""),
                               totals.get((topic, part), (0, 0))[0] + share.count,
                               totals.get((topic, part), (0, 0))[1] + share.nbytes)
                for (topic, part), share in interval.items()]

    def committed(self, recs: Iterable[ProgressRecord], interval: Interval, t0: float) -> None:
        """The records of `interval` and their progress are durable: count them in the summaries."""
        done_ms = now_ms()
        for rec in recs:
            key = (rec.source_topic, rec.partition)
            share = interval[key]
            s = self.summaries[key]
            if s.source_first < 0:
                s.source_first, s.target_first = rec.source_first, rec.target_first
            s.source_last, s.target_last, s.next_offset = rec.source_last, rec.target_last, rec.next_offset
            s.records += share.count
            s.bytes += share.nbytes
            s.transactions += 1
            s.batches += share.batches
            if share.rebuilt:
                for why, n in share.rebuilt.items():
                    s.rebuilt[why] = s.rebuilt.get(why, 0) + n
            if share.transformed:
                for what, n in share.transformed.items():
                    s.transformed[what] = s.transformed.get(what, 0) + n
            if share.count:
                s.latency_ms_sum += share.count * done_ms - share.ts_sum
                s.latency_ms_max = max(s.latency_ms_max, done_ms - share.ts_min)
                s.latency_le = [a + b for a, b in zip(s.latency_le, latency_le(done_ms, share.timestamps))]
            self.committed_next[key] = rec.next_offset
            self.committed_totals[key] = (rec.records_total, rec.bytes_total)
        self.commits += 1
        self.commit_ms.append((time.monotonic() - t0) * 1000)

    def epoch_started(self, start_ms: int) -> None:
        for s in self.summaries.values():
            s.epoch_start_ms = start_ms

    def epoch_start_ms(self) -> int:
        return min((s.epoch_start_ms for s in self.summaries.values()), default=now_ms())

    def fenced(self) -> None:
        for s in self.summaries.values():
            s.fenced = True

    def worth_reporting(self) -> list[PartitionSummary]:
        """The rows this epoch yields: partitions that copied, or whose offsets or lag moved since this lane's
        clients last reported them (all of them after a fresh start), or that carry a state (fenced, waiting,
        error); and the lane's first partition always, so an idle lane still reports its epoch. At 10,000 partitions
        an idle epoch was 10,000 rows saying nothing new, and handing 2,250 of them to Spark took a lane 1-2 s at
        its epoch's end (bench/scale.py); the driver keeps the last row of each partition."""
        out = []
        for i, (key, s) in enumerate(self.summaries.items()):
            now = (s.next_offset, s.source_end, s.lag)
            if i == 0 or s.records or s.transactions or s.fenced or s.error or s.waiting or \
                    self.reported.get(key) != now:
                out.append(s)
                self.reported[key] = now
        return out

    def next_epoch(self) -> None:
        """From here on the counters are the next epoch's (kept clients copy on between epochs)."""
        self.summaries = {k: PartitionSummary(s.mirror, s.lane, s.source_topic, s.partition, s.target_topic,
                                              generation=s.generation) for k, s in self.summaries.items()}
