"""Time lag of a source partition: the age of its oldest record not mirrored yet, from that record's timestamp.

Offsets tell how many records wait, not for how long. The oldest waiting record is the one at the partition's
mirrored position (the next offset to copy), so its timestamp is read from the source: one fetch of that
offset. The cost is bounded, since the driver's monitor polls every few seconds over possibly thousands of
partitions:
- only partitions that are behind are read (a caught-up partition's time lag is 0 without a fetch);
- a partition is read again only when its position moved and its last reading is `refresh_s` old, so a
  partition copying steadily costs one fetch per `refresh_s`; until then its last timestamp stands, which is
  older than the true one: the age is over-stated by at most `refresh_s`, never under-stated;
- at most `max_partitions` per call, those read longest ago first; the others keep their last reading;
- each fetch returns one record batch at most (`max.partition.fetch.bytes` 1: the broker sends the first batch
  whole), read_committed, so an aborted record or a marker is never taken for the oldest waiting one.
A partition not read within `timeout` has no figure (None) until a later call reads it.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

TP = tuple[str, int]


class OldestRecordTimes:
    """Timestamps (ms) of the records at given source positions, read sparingly (see the module doc)."""

    def __init__(self, source_conf: dict[str, str], timeout: float = 2.0, refresh_s: float = 10.0,
                 max_partitions: int = 64, clock=time.monotonic, **consumer_args: Any) -> None:
        self.timeout, self.refresh_s, self.max_partitions, self.clock = timeout, refresh_s, max_partitions, clock
        self.consumer = Consumer({**source_conf, "group.id": f"sparkmirror-age-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "auto.offset.reset": "earliest", "enable.partition.eof": True,
                                  "max.partition.fetch.bytes": 1, "fetch.max.bytes": 1000,
                                  "message.max.bytes": 1000,  # librdkafka's least; fetch.max.bytes may not be below
                                  "queued.max.messages.kbytes": 1024}, **consumer_args)
        self._read: dict[TP, tuple[int, int, float]] = {}  # tp -> (position, timestamp ms, when read)
        self.fetches = 0  # partitions read since start (what the bound is about)

    def timestamps(self, positions: Mapping[TP, int]) -> dict[TP, int]:
        """(topic, partition) -> position of its oldest waiting record, in; -> that record's timestamp, out."""
        now = self.clock()
        for tp in set(self._read) - set(positions):
            del self._read[tp]  # caught up or gone: read afresh when it falls behind again
        due = [tp for tp, pos in positions.items()
               if tp not in self._read or (self._read[tp][0] != pos and now - self._read[tp][2] >= self.refresh_s)]
        due.sort(key=lambda tp: self._read[tp][2] if tp in self._read else float("-inf"))
        self._fetch({tp: positions[tp] for tp in due[: self.max_partitions]})
        return {tp: r[1] for tp in positions if (r := self._read.get(tp)) is not None}

    def _fetch(self, todo: dict[TP, int]) -> None:
        if not todo:
            return
        c, open_ = self.consumer, set(todo)
        deadline = time.monotonic() + self.timeout
        try:
            c.assign([TopicPartition(t, p, pos) for (t, p), pos in todo.items()])
            while open_ and time.monotonic() < deadline:
                for m in c.consume(num_messages=max(len(open_), 1), timeout=0.2):
                    tp = (m.topic(), m.partition())
                    if tp not in open_:
                        continue
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            open_.discard(tp)  # nothing readable yet (an open transaction): no figure
                        continue
                    _kind, ts = m.timestamp()
                    if ts >= 0:
                        self._read[tp] = (todo[tp], ts, self.clock())
                    open_.discard(tp)
                    c.pause([TopicPartition(*tp)])
        except KafkaException as e:
            log.debug("reading the oldest waiting records of %s failed: %s", sorted(todo), e)
        finally:
            self.fetches += len(todo)
            try:
                c.unassign()
            except KafkaException:
                pass

    def close(self) -> None:
        self.consumer.close()

