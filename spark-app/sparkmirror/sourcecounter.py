"""Counting mirrored records on the source (and their copies on the target), for positions no progress range
names exactly: a group inside a range whose source side has gaps (aborted records, transaction markers, records
filtered as loops or dropped by transforms), or in a stretch compaction emptied between two held ranges. Used by
checkpoints and by failover/failback (`progress.Inside`, `progress.Between`)."""
from __future__ import annotations

import logging
import time
import uuid
from array import array
from bisect import bisect_left
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from .progress import Range
from .replication import RecordStamper, provenance
from .transforms import RecordTransforms

log = logging.getLogger(__name__)

class SourceCounter:
    """`Inside` for gapped ranges and `Between` for stretches compaction dropped: counts, on the source, the
    records the copier wrote below an offset (and, for `between`, finds that many on the target).

    Reads read_committed and counts the records the copier copies (all of them, or under the identity policy
    those the provenance header lets through, and of those the ones the mirror's transforms keep: a group on a
    dropped record lands on the next kept one). A range is one transaction (~100 ms of data); a stretch between
    two held ranges is at most about one anchor block (`progress.record.ANCHOR_EVERY` source offsets). Results
    are cached: groups usually sit still.
    """

    def __init__(self, source_conf: dict[str, str], stamper: RecordStamper | None = None, timeout: float = 15.0,
                 target_conf: dict[str, str] | None = None, source_alias: str = "",
                 transforms: RecordTransforms | None = None) -> None:
        self.stamper, self.timeout, self.source_alias = stamper, timeout, source_alias
        self.transforms = transforms
        self.consumer = self._consumer(source_conf)
        self._target_conf = target_conf
        self._target: Consumer | None = None
        self._cache: dict[tuple, int] = {}
        self._stretches: dict[tuple, tuple[array, array]] = {}  # both sides of stretches read whole

    @staticmethod
    def _consumer(conf: dict[str, str]) -> Consumer:
        return Consumer({**conf, "group.id": f"sparkmirror-ckpt-count-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "auto.offset.reset": "error",
                         "fetch.wait.max.ms": 20})  # short reads of data that is there: no long polls

    def __call__(self, r: Range, offset: int) -> int | None:
        return self._cached(("in", r.source_topic, r.partition, r.source_first, r.source_last, offset),
                            lambda: self._count(r.source_topic, r.partition, r.source_first, offset, self.timeout))

    def nth(self, r: Range, n: int) -> int | None:
        """The source offset of range `r`'s n-th copied record (from 0): `OffsetMap.translate_back` inside a
        gapped range. None when the range's records cannot all be counted, or are not `r.count`."""
        def find() -> int | None:  # read below source_last: the partition may end right after it
            got = self._offsets(self.consumer, r.source_topic, r.partition, r.source_first, r.source_last,
                                self._copies, self.timeout)
            if got is None or len(got) not in (r.count, r.count - 1) or not 0 <= n < r.count:
                return None
            return got[n] if n < len(got) else r.source_last  # the range's last record, when it was copied
        return self._cached(("nth", r.source_topic, r.partition, r.source_first, r.source_last, n), find)

    def between(self, before: Range, after: Range, start: int, offset: int) -> int | None:
        """Both sides of the stretch are read whole and must hold as many copied records as each other (a
        compacted topic, another writer or a repeat makes them differ): then the record that was `offset` is
        where it is on the target, exactly; otherwise None (the caller repeats, never skips)."""
        stretch = self._stretch(before, after, start)
        if stretch is None:
            return None
        source, target = stretch
        n = bisect_left(source, offset)
        return target[n] if n < len(target) else after.target_first

    def _stretch(self, before: Range, after: Range, start: int) -> tuple[array, array] | None:
        if self._target_conf is None:
            return None
        key = (before.source_topic, before.partition, before.source_last, after.source_first, after.target_topic,
               start)
        if key in self._stretches:
            return self._stretches[key]
        budget = max(self.timeout, 60.0)  # at most ~one anchor block on each side
        source = self._offsets(self.consumer, before.source_topic, before.partition, before.source_last + 1,
                               after.source_first, self._copies, budget)
        if source is None:
            return None
        if self._target is None:
            self._target = self._consumer(self._target_conf)
        target = self._offsets(self._target, after.target_topic, after.partition, start, after.target_first,
                               self._mirrored, budget)
        if target is None:
            return None
        if len(target) != len(source):
            log.warning("%s[%d]: source offsets %d..%d hold %d copied records, their target stretch %d..%d holds %d "
                        "(compacted topics or another writer): consumer offsets there translate to the stretch's "
                        "start", before.source_topic, before.partition, before.source_last + 1,
                        after.source_first - 1, len(source), start, after.target_first - 1, len(target))
            return None
        if len(self._stretches) >= 32:  # up to ~one block of offsets each: hold few
            self._stretches.clear()
        self._stretches[key] = (source, target)
        return source, target

    def _copies(self, m) -> bool:
        if self.stamper is not None and not self.stamper.should_copy(m.headers()):
            return False
        return self.transforms is None or self.transforms.keeps(m)

    def _mirrored(self, m) -> bool:
        return self.stamper is None or provenance(m.headers())[-1:] == [self.source_alias]

    def _cached(self, key: tuple, count: Callable[[], int | None]) -> int | None:
        if key in self._cache:
            return self._cache[key]
        n = count()
        if n is not None:  # an outage or a timeout is asked again next time
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = n
        return n

    def _count(self, topic: str, partition: int, first: int, offset: int, timeout: float) -> int | None:
        """Records the copier copies in [first, offset) of a source partition (None: not all there to count)."""
        got = self._offsets(self.consumer, topic, partition, first, offset, self._copies, timeout)
        return None if got is None else len(got)

    def _offsets(self, consumer: Consumer, topic: str, partition: int, first: int, end: int, keep: Callable,
                 timeout: float) -> array | None:
        """Offsets in [first, end) of the records `keep` takes (None: the partition ended before `end`, or the
        read failed or ran out of time)."""
        out = array("q")
        if end <= first:
            return out
        for m in self._read(consumer, topic, partition, first, timeout):
            if m is None:
                return None
            if m.offset() >= end:
                return out
            if keep(m):
                out.append(m.offset())
        return None

    def _read(self, consumer: Consumer, topic: str, partition: int, first: int, timeout: float):
        """Messages of one partition from `first` until the caller stops; None once the partition ends or the
        read fails (logged), and then nothing more; nothing more when `timeout` passes."""
        consumer.assign([TopicPartition(topic, partition, first)])
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for m in consumer.consume(num_messages=1000, timeout=0.05):  # what is there: no batch wait
                    if m.error() is not None:
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            log.warning("counting %s[%d] from offset %d failed: %s", topic, partition, first,
                                        m.error().str())
                        yield None
                        return
                    yield m
        finally:
            consumer.unassign()

    def close(self) -> None:
        self.consumer.close()
        if self._target is not None:
            self._target.close()
