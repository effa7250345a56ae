"""The batch path's commit protocols (commit.py's contract, on the wire): how a batch lane's forwarded batches
and their progress records become durable together, and how a newer copy of the lane fences an older one.

`BatchExactlyOnce`: one transactional producer on the wire (batchwriter.py) holds the lane's transactional id.
Its InitProducerId fences older copies of the lane, record-path copies included (the same id, the same
coordinator), FIRST, before the lane reads its progress. The interval's batches, then its progress messages
(the very messages commit.py writes, as one batch per progress-topic partition, partitioned by key as the
record path's murmur2 partitioner does, so compaction keeps one latest value per key), then EndTxn.

`BatchAtLeastOnce`: the batches go through an idempotent producer on the wire (acknowledged when `produce`
returns); their progress is written afterwards in small transactions of a librdkafka `fence`, exactly as the
record path's `AtLeastOnce` writes it, in the committer's thread (pipelined)."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import Producer
from kafka.partitioner.default import murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder

from ..progress import ProgressRecord
from ..wire.cluster import Wire
from ..wire.connection import WireError
from .batches import Batch, split_batches
from .batchwriter import BatchWriter
from .commit import CommitProtocol, OnDelivery, flush_quietly, transact
from .errors import LaneFenced
from .ledger import now_ms

FenceFactory = Callable[[], Producer]
"""A librdkafka producer holding the lane's transactional.id (at-least-once's progress writer)."""


def key_partition(key: bytes, partitions: int) -> int:
    """The partition librdkafka's `murmur2_random` (and Java's default) partitioner picks for `key`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def progress_batches(messages: list[tuple[bytes, bytes]], topic: str, partitions: int
                     ) -> dict[tuple[str, int], list[Batch]]:
    """The progress messages as one uncompressed v2 batch per progress-topic partition they go to."""
    builders: dict[int, DefaultRecordBatchBuilder] = {}
    counts: dict[int, int] = {}
    ts = now_ms()
    for key, value in messages:
        p = key_partition(key, partitions)
        b = builders.get(p)
        if b is None:
            b = builders[p] = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
            counts[p] = 0
        b.append(counts[p], ts, key, value, [])
        counts[p] += 1
    return {(topic, p): split_batches(b.build()) for p, b in sorted(builders.items())}


class _BatchProtocol(CommitProtocol):
    """What both batch protocols share: the writer on the wire, and no librdkafka producer for the records."""

    producer: BatchWriter  # type: ignore[assignment]

    def __init__(self, wire: Wire, writer: BatchWriter, progress_topic: str) -> None:
        super().__init__(progress_topic)
        self.wire = wire
        self.producer = writer

    def begin(self) -> None:
        pass  # partitions join the transaction as the writer first produces to them

    def fatal_error(self):
        return None  # the wire writer raises its errors where they happen

    def close(self) -> None:
        pass  # the writer's connections are the target's (batchtarget.py closes them)


class BatchExactlyOnce(_BatchProtocol):
    """Batches and their progress in one transaction of the lane's producer on the wire."""

    def __init__(self, wire: Wire, tid: str, progress_topic: str, transaction_timeout_ms: int,
                 make_fence: FenceFactory) -> None:
        super().__init__(wire, BatchWriter(wire, tid, transaction_timeout_ms), progress_topic)
        self._progress_partitions = 0

    def start(self) -> None:
        self.producer.init()  # FIRST: fences older copies of the lane
        self._progress_partitions = max(p for t, p in self.wire.leaders([self.progress_topic])) + 1

    def commit(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        messages, anchored = self.progress_messages(progress)
        if messages:
            self.producer.produce(progress_batches(messages, self.progress_topic, self._progress_partitions))
        self.producer.commit()
        self.anchored(anchored)

    def end_empty(self) -> None:
        self.producer.commit()  # nothing joined the transaction: nothing is sent

    def abort(self) -> None:
        try:
            self.producer.abort()
        except (WireError, LaneFenced):
            pass  # the next start's InitProducerId aborts it, or a newer copy already did

    def abort_checking_fence(self, timeout: float = 30.0) -> None:
        try:
            self.producer.abort()
        except WireError:
            pass  # not answered: the next start fences whatever is open


class BatchAtLeastOnce(_BatchProtocol):
    """Batches acknowledged by an idempotent producer on the wire; then their progress in a transaction of the
    lane's librdkafka fence."""

    pipelined = True

    def __init__(self, wire: Wire, tid: str, progress_topic: str, transaction_timeout_ms: int,
                 make_fence: FenceFactory) -> None:
        super().__init__(wire, BatchWriter(wire, None, transaction_timeout_ms), progress_topic)
        self.fence = make_fence()

    def start(self) -> None:
        super().start()  # the fence's init_transactions: FIRST
        self.producer.init()

    def commit(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        transact(self.fence.begin_transaction)
        self._write_progress(progress, on_delivery)

    def abort_checking_fence(self, timeout: float = 30.0) -> None:
        CommitProtocol.abort_checking_fence(self, timeout)

    def fatal_error(self):
        return CommitProtocol.fatal_error(self)

    def close(self) -> None:
        flush_quietly(self.fence)


BatchProtocol = type[BatchExactlyOnce] | type[BatchAtLeastOnce]
