"""The live position of one mirror, partition by partition: what the metrics, the runner and the status show.

The progress topic on the target says what is mirrored (committed there is mirrored), the source's offsets what
there is: per-partition lag in records (`progress.partition_lag`: end offset minus next offset to mirror, small
ones counted read_committed so transaction markers do not count), records/s and bytes/s from the progress
records committed in the last RATE_WINDOW_S (live: an epoch's summary comes tens of seconds later), and the
mirror's transactions, each counted once (`_count_transactions`).

Two figures say how long a partition has waited: its time lag (`lag_seconds`: the age of the oldest source
record not mirrored yet, read from the source by `timelag.OldestRecordTimes`) and its commit stall
(`stall_seconds`: how long it has been behind without a commit advancing it, counted from the last commit or
from when this driver first saw it behind).

Apart from `metrics` (the services' threads and the endpoint), which polls it and reads its figures.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, OffsetSpec

from .copying.errors import talking_to
from .progress import CommittedCounter, ProgressTail, lag_position, partition_lag, should_count
from .resource.flowgroup import FlowGroupConfig, Mirror
from .replication import policy_for
from .timelag import OldestRecordTimes
from .topicsync import list_offsets
from .topicplan import select_topics, topic_filter

RATE_WINDOW_S = 10.0


@dataclass
class PartitionLive:
    topic: str
    partition: int
    remote_topic: str | None = None
    next_offset: int | None = None   # next source offset to mirror (None: nothing mirrored yet)
    start_offset: int = 0            # earliest source offset (where a new partition starts)
    end_offset: int = 0              # source end offset
    records_per_s: float = 0.0
    bytes_per_s: float = 0.0         # key + value bytes, over the same window as records_per_s
    last_commit_ms: int | None = None
    counted_lag: int | None = None   # records actually left, when counted (offsets include txn markers)
    mirrored: int = 0                # records mirrored, from the progress topic (all workers, all time)
    mirrored_bytes: int = 0          # their key + value bytes
    behind_since: float | None = None  # when the partition last fell behind (lag > 0), epoch seconds
    oldest_ms: int | None = None     # timestamp of the oldest source record not mirrored yet (when behind)

    @property
    def position(self) -> int:
        return lag_position(self.start_offset, self.next_offset)

    @property
    def lag(self) -> int:
        return partition_lag(self.start_offset, self.end_offset, self.next_offset, self.counted_lag)

    def stall_seconds(self, now: float) -> float:
        """How long the partition has been behind without its mirrored position advancing (0: caught up)."""
        if self.lag <= 0 or self.behind_since is None:
            return 0.0
        return max(now - max(self.behind_since, (self.last_commit_ms or 0) / 1000.0), 0.0)

    def lag_seconds(self, now: float) -> float | None:
        """Time lag: age of the oldest source record not mirrored yet (0: caught up; None: not read yet)."""
        if self.lag <= 0:
            return 0.0
        return None if self.oldest_ms is None else max(now * 1000 - self.oldest_ms, 0.0) / 1000.0


class MirrorMonitor:
    """Live per-partition position of one mirror, from the progress topic and the source's offsets."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, timeout: float = 10.0) -> None:
        self.config, self.mirror, self.timeout = config, mirror, timeout
        self.policy, self.filter = policy_for(mirror), topic_filter(config, mirror)
        self.source_admin = AdminClient(config.cluster(mirror.source).client_config())
        self.tail = ProgressTail(config.cluster(mirror.target).client_config(), config.progressTopic, mirror.source,
                                 resource=config.resource, max_history=config.offsetHistory)
        self.partitions: dict[tuple[str, int], PartitionLive] = {}
        self.updated: float | None = None
        self._counter: CommittedCounter | None = None
        self._oldest: OldestRecordTimes | None = None
        self.transactions = 0  # transactions read from the progress topic since this monitor started
        self._seen_ms: dict[tuple[str, int], int] | None = None  # per partition: newest commit_ms counted

    def _offsets(self, tps: list[tuple[str, int]], spec) -> dict[tuple[str, int], int]:
        return list_offsets(self.source_admin, tps, spec, self.timeout)

    def poll(self) -> dict[tuple[str, int], PartitionLive]:
        """Raises `Unreachable` naming the side when a cluster does not answer. The tail is shared with the
        checkpoints' thread: it is read, and its maps used, under its lock; the source is asked outside it."""
        with self.tail.lock:
            with talking_to("target", self.mirror.target, "reading the progress topic"):
                self.tail.poll(self.timeout)
            latest, maps, totals = self.tail.latest(), self.tail.maps(), self.tail.totals()
            now_ms = time.time() * 1000
            rates = {tp: self._rate(m, now_ms) for tp, m in maps.items()}
            self._count_transactions(maps, latest)
        with talking_to("source", self.mirror.source, "listing topics"):
            md = self.source_admin.list_topics(timeout=self.timeout)
        counts = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
        tps = [(t, p) for t in select_topics(self.policy, self.filter, counts, self.mirror.target)
               for p in range(counts[t])]
        ends, starts = self._offsets(tps, OffsetSpec.latest()), self._offsets(tps, OffsetSpec.earliest())
        out = {}
        for tp in tps:
            pl = PartitionLive(*tp, end_offset=ends.get(tp, 0), start_offset=starts.get(tp, 0))
            rec = latest.get(tp)
            if rec is not None:
                pl.next_offset, pl.remote_topic, pl.last_commit_ms = rec.next_offset, rec.target_topic, rec.commit_ms
                pl.records_per_s, pl.bytes_per_s = rates.get(tp, (0.0, 0.0))
                pl.mirrored, pl.mirrored_bytes = totals.get(tp, (0, 0))
            else:
                pl.remote_topic = self.policy.format_remote_topic(self.mirror.source, tp[0])
            out[tp] = pl
        self._count_small_lags(out)
        self._read_oldest(out)
        now = time.time()
        for tp, pl in out.items():
            before = self.partitions.get(tp)
            if pl.lag > 0:
                pl.behind_since = before.behind_since if before and before.behind_since is not None else now
        self.partitions, self.updated = out, now
        return out

    @staticmethod
    def _rate(m, now_ms: float) -> tuple[float, float]:
        """(records/s, bytes/s) committed over the last RATE_WINDOW_S, from one partition's offset map."""
        n = nbytes = 0
        for r in reversed(m.records):
            if r.commit_ms < now_ms - RATE_WINDOW_S * 1000:
                break
            n += r.count
            nbytes += r.bytes
        return n / RATE_WINDOW_S, nbytes / RATE_WINDOW_S

    def _count_small_lags(self, parts: dict[tuple[str, int], PartitionLive]) -> None:
        """Small lags are counted record by record (see `progress.lag`): offsets include transaction markers."""
        todo = {tp: (pl.position, pl.end_offset) for tp, pl in parts.items()
                if should_count(pl.start_offset, pl.end_offset, pl.next_offset)}
        if not todo:
            return
        if self._counter is None:
            self._counter = CommittedCounter(self.config.cluster(self.mirror.source).client_config(),
                                             min(self.timeout, 5.0))
        for tp, n in self._counter.count(todo).items():
            parts[tp].counted_lag = n

    def _count_transactions(self, maps: dict, latest: dict) -> None:
        """Transactions committed since the last poll, each once: the progress records one transaction writes
        (one per partition it carried) share its lane and commit time. The first poll only sets the mark: the
        counter starts at this driver's start, as Prometheus expects of a counter."""
        first, seen = self._seen_ms is None, self._seen_ms or {}
        fresh: set[tuple[int, int]] = set()
        for tp, m in maps.items():
            rec, mark = latest.get(tp), seen.get(tp, -1)
            if rec is None:
                continue
            if not first:
                for r in reversed(m.records):
                    if r.commit_ms <= mark:
                        break
                    fresh.add((rec.lane, r.commit_ms))
            seen[tp] = max(mark, rec.commit_ms)
        self._seen_ms, self.transactions = seen, self.transactions + len(fresh)

    def _read_oldest(self, parts: dict[tuple[str, int], PartitionLive]) -> None:
        """The timestamp of each behind partition's oldest waiting record (`timelag`: a bounded read)."""
        behind = {tp: pl.position for tp, pl in parts.items() if pl.lag > 0}
        if not behind and self._oldest is None:
            return
        if self._oldest is None:
            self._oldest = OldestRecordTimes(self.config.cluster(self.mirror.source).client_config(),
                                             min(self.timeout, 2.0))
        for tp, ts in self._oldest.timestamps(behind).items():  # a failed read leaves a partition without figure
            parts[tp].oldest_ms = ts

    def carry_on_from(self, old: "MirrorMonitor") -> None:
        """Go on from `old`'s figures (made again with new credentials): counters and the partitions' times."""
        self.transactions, self._seen_ms = old.transactions, old._seen_ms
        self.partitions, self.updated = old.partitions, old.updated

    def close(self) -> None:
        self.tail.close()
        for reader in (self._counter, self._oldest):
            if reader is not None:
                reader.close()
