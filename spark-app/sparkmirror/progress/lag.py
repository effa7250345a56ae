"""Lag of a source partition: records left to mirror. The one definition (operator status, driver metrics,
the run display, the copier's epoch summaries).

Offsets alone overcount: they include transaction markers and aborted records. A source written
transactionally (the second hop of a pipe A->B->C, or identity active/active where it is the other mirror's
target) ends with a commit marker, so `high - next` stays >= 1 with nothing left to copy. Small offset lags
are therefore counted record by record, read_committed (`CommittedCounter`), and the count is the lag.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

EXACT_LAG_BELOW = 1000  # offset lags this small are counted record by record

K = TypeVar("K", bound=Hashable)


def lag_position(low: int, next_offset: int | None) -> int:
    """Where mirroring of a partition stands: the next offset to copy, or its low watermark when nothing was
    mirrored yet (or the source no longer holds the next offset)."""
    return low if next_offset is None or next_offset < 0 else max(next_offset, low)


def partition_lag(low: int, high: int, next_offset: int | None, counted: int | None = None) -> int:
    """Records left to mirror: `counted` (read_committed records from the position to `high`) when known,
    else `high - position` (offsets, markers included), never negative."""
    if counted is not None:
        return counted
    return max(0, high - lag_position(low, next_offset))


def should_count(low: int, high: int, next_offset: int | None) -> bool:
    """Whether the offset lag is small enough (and not 0) to be counted record by record."""
    return 0 < high - lag_position(low, next_offset) <= EXACT_LAG_BELOW


class CommittedCounter:
    """Counts the read_committed records of source partitions from a position up to an end offset.

    Cached per partition while (position, end) stay the same: a caught-up partition is read once, not every
    poll. A partition not read to its end within `timeout` (or when reading fails) gets no count: its lag then
    falls back to offsets.
    """

    def __init__(self, source_conf: dict[str, str], timeout: float = 5.0, **consumer_args: Any) -> None:
        """consumer_args: passed to confluent_kafka.Consumer besides the config (e.g. logger=)."""
        self.timeout = timeout
        self.consumer = Consumer({**source_conf, "group.id": f"sparkmirror-lag-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": True}, **consumer_args)
        self._cache: dict[tuple[str, int], tuple[int, int, int]] = {}  # tp -> (position, end, records)

    def count(self, spans: Mapping[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> (position, end) in; (topic, partition) -> records between them out."""
        out = {tp: c[2] for tp, span in spans.items() if (c := self._cache.get(tp)) is not None and c[:2] == span}
        todo = {tp: span for tp, span in spans.items() if tp not in out}
        if not todo:
            return out
        c = self.consumer
        counts = {tp: 0 for tp in todo}
        open_ = set(todo)
        deadline = time.monotonic() + self.timeout
        try:
            c.assign([TopicPartition(t, p, pos) for (t, p), (pos, _end) in todo.items()])
            while open_ and time.monotonic() < deadline:
                for m in c.consume(num_messages=EXACT_LAG_BELOW, timeout=0.5):
                    tp = (m.topic(), m.partition())
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            open_.discard(tp)
                        continue
                    if tp in open_ and m.offset() < todo[tp][1]:
                        counts[tp] += 1
                    if m.offset() >= todo[tp][1] - 1:
                        open_.discard(tp)
        except KafkaException as e:
            log.debug("counting records left on %s failed: %s", sorted(todo), e)
            return out
        finally:
            try:
                c.unassign()
            except KafkaException:
                pass
        for tp in set(todo) - open_:  # only partitions read to their end are exact
            out[tp] = counts[tp]
            self._cache[tp] = (*todo[tp], counts[tp])
        return out

    def close(self) -> None:
        self.consumer.close()


def partition_lags(marks: Mapping[K, tuple[int, int]], next_offsets: Mapping[K, int | None],
                   count: Callable[[dict[K, tuple[int, int]]], Mapping[K, int]] | None = None) -> dict[K, int]:
    """Lag per partition: marks[k] = (low, high) watermarks, next_offsets[k] = next offset to mirror (missing or
    None: nothing mirrored yet). `count` (e.g. a CommittedCounter's, keyed like marks) counts the small ones."""
    spans = {k: (lag_position(lo, next_offsets.get(k)), hi) for k, (lo, hi) in marks.items()
             if should_count(lo, hi, next_offsets.get(k))}
    counted = count(spans) if count is not None and spans else {}
    return {k: partition_lag(lo, hi, next_offsets.get(k), counted.get(k)) for k, (lo, hi) in marks.items()}
