"""Where a share group's start offset goes on the target when it falls on a transaction marker.

A start offset translated past a partition's last mirrored record is the offset after it, which on a target the
lanes write with transactions is that transaction's commit marker. Kafka 4.4 takes such a start offset, but the
first share consumer of the group then gets no record of any partition for a while (seen: 12 s with nothing
delivered, where a start offset on a record or at the end delivered at once). So the start offset moves to the
first committed record at or after it, or to the partition's end (last stable offset) when there is none: only
markers and aborted records lie in between, which no consumer would get, so nothing is skipped.
"""
from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition

log = logging.getLogger(__name__)


class RecordFinder:
    """A read_committed reader of the target's partitions (made on first use)."""

    def __init__(self, conf: dict[str, str], timeout: float = 10.0) -> None:
        self.conf, self.timeout = conf, timeout
        self._consumer: Consumer | None = None

    def first_at(self, topic: str, partition: int, offset: int) -> int:
        """The offset of the first committed record at or after `offset`, or the end when there is none; `offset`
        itself when the read fails or takes too long (the start offset as translated)."""
        if self._consumer is None:
            self._consumer = Consumer({**self.conf, "group.id": f"sparkmirror-share-{uuid.uuid4().hex[:8]}",
                                       "enable.auto.commit": False, "isolation.level": "read_committed",
                                       "enable.partition.eof": True, "auto.offset.reset": "error",
                                       "fetch.wait.max.ms": 20})
        c = self._consumer
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline:
                for m in c.consume(num_messages=1, timeout=0.1):
                    if m.error() is None:
                        return max(offset, m.offset())
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return max(offset, m.offset())
                    log.warning("reading %s[%d] from offset %d on the target failed: %s", topic, partition, offset,
                                m.error().str())
                    return offset
            return offset
        finally:
            c.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
