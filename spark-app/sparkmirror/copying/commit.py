"""The commit protocol: how a lane's copied records and their progress records become durable together.

Both delivery modes hold the lane's transactional.id in one producer, `fence`, the lane's fencing token.
Order of start-up matters: that producer is initialised FIRST (`start()`: init_transactions aborts any open
transaction of an older copy of this lane and fences it), and only THEN does the loop read the progress
topic, so the resume offsets cannot change any more under this copy.

`ExactlyOnce`: every ~commitIntervalMs one transaction commits the copied records together with one progress
record per source partition it touched (`producer` and `fence` are the same transactional producer).

`AtLeastOnce`: the records go through an idempotent, non-transactional `producer`, and progress is written
only after the records it covers were acknowledged, so a crash repeats records but never loses one. The
progress records go in small transactions of `fence`: a newer copy of the lane stops an older one at its next
progress write (the older one can then repeat at most one commit interval of records, and can never move
progress backwards).

The loop calls `begin()` before the first record of a commit interval, `commit()` once all of the interval's
records were acknowledged, `end_empty()` when the interval has nothing to commit and `abort()` when it gives
the interval up. At-least-once commits are `pipelined`: the loop copies on while an ended interval waits for its
acks and its progress transaction runs in a thread (loop.py).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, Producer

from ..progress import ProgressRecord
from ..progress.record import anchor_block
from ..resource.flowgroup import Delivery
from .errors import LaneFenced, is_fenced, kafka_error

ProducerFactory = Callable[[bool], Producer]
"""`make(transactional)`: a new producer for the target; a transactional one holds the lane's transactional.id."""
OnDelivery = Callable[[KafkaError | None, object], None]


TRANSACT_SECONDS = 60.0
"""How long a transactional operation is retried; then the lane starts afresh (its progress says what stuck)."""


def transact(op: Callable, *args) -> None:
    """Run a transactional operation; retry retriable errors for a while, map fencing to LaneFenced."""
    deadline = time.monotonic() + TRANSACT_SECONDS
    while True:
        try:
            op(*args)
            return
        except KafkaException as e:
            err = e.args[0]
            if is_fenced(err):
                raise LaneFenced() from e
            if err.retriable() and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            raise


def flush_quietly(producer: Producer) -> None:
    """Last flush before a producer is dropped."""
    try:
        producer.flush(10)
    except (KafkaException, SystemError):  # SystemError: see CommitProtocol.fatal_error
        pass  # fenced or fatal: nothing of ours is left uncommitted that matters


class CommitProtocol(ABC):
    """One lane's producers and the order in which records and progress are committed."""

    producer: Producer
    """Produces the copied records."""
    fence: Producer
    """Holds the lane's transactional.id and writes the progress records."""
    pipelined = False
    """commit() may run in a thread of its own while the loop produces on: the records are not in the progress
    transaction (the loop calls it only after they were acknowledged)."""

    def __init__(self, progress_topic: str) -> None:
        self.progress_topic = progress_topic
        self._anchored: dict[tuple[str, str, int], int] = {}  # source partition -> anchor block last committed

    def start(self) -> None:
        """The first call of a fresh lane: aborts the open transaction of any older copy and fences it."""
        self.fence.init_transactions(60)

    def resumed(self, positions: dict[tuple[str, int, int], int]) -> None:
        """Where the lane continues mirroring each source partition it has progress for: a partition's first
        range is anchored only when it enters another anchor block (the block's anchor was written already)."""
        self._anchored.update({k: anchor_block(o - 1) for k, o in positions.items() if o > 0})

    @abstractmethod
    def begin(self) -> None:
        """A commit interval is about to produce its first record."""

    @abstractmethod
    def commit(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        """Every record of the interval is acknowledged: write its progress and commit."""

    def end_empty(self) -> None:
        """The interval ends with nothing to commit."""

    def abort(self) -> None:
        """Give the interval up, quietly (the caller is failing or copying it again anyway)."""

    def abort_checking_fence(self, timeout: float = 30.0) -> None:
        """Abort the open transaction on the coordinator; LaneFenced when a newer copy of the lane took its
        transactional.id over. A failure the broker answered otherwise (UNKNOWN_SERVER_ERROR for an EndTxn
        racing a newer copy's InitProducerId) does not say so; this abort does (PRODUCER_FENCED)."""
        try:
            self.fence.abort_transaction(timeout)
        except (KafkaException, SystemError) as e:
            err = kafka_error(e)
            if err is not None and is_fenced(err):
                raise LaneFenced() from e

    def fatal_error(self) -> KafkaError | None:
        """The producer's fatal error, when the client raised a bare SystemError from flush() (it does when
        the fatal error is raised while a delivery callback runs): any transactional call reports it."""
        try:
            self.fence.abort_transaction(5)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            return err if err is not None and err.fatal() else None
        return None

    def close(self) -> None:
        flush_quietly(self.producer)

    def progress_messages(self, progress: Iterable[ProgressRecord]
                          ) -> tuple[list[tuple[bytes, bytes]], dict[tuple[str, str, int], int]]:
        """The (key, value) messages of `progress`: each record, and an anchor after each that enters another
        anchor block (see `progress/record.py`); and the blocks anchored by them, taken in by `anchored` once
        they are committed. Every copy path writes these same messages."""
        out: list[tuple[bytes, bytes]] = []
        anchored: dict[tuple[str, str, int], int] = {}
        for rec in progress:
            value = rec.value()
            out.append((rec.key(), value))
            block = anchor_block(rec.source_first)
            if self._anchored.get(rec.source_partition) != block:
                out.append((rec.anchor_key(), value))
                anchored[rec.source_partition] = block
        return out, anchored

    def anchored(self, blocks: dict[tuple[str, str, int], int]) -> None:
        self._anchored.update(blocks)

    def _write_progress(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        """The progress messages through the fence, and its transaction committed."""
        messages, anchored = self.progress_messages(progress)
        for key, value in messages:
            self.fence.produce(self.progress_topic, key=key, value=value, on_delivery=on_delivery)
        transact(self.fence.commit_transaction, 60)
        self.anchored(anchored)


class ExactlyOnce(CommitProtocol):
    """Records and their progress in one transaction of one producer."""

    def __init__(self, make_producer: ProducerFactory, progress_topic: str) -> None:
        super().__init__(progress_topic)
        self.producer = self.fence = make_producer(True)
        self._open = False  # a transaction was begun in this interval

    def begin(self) -> None:
        if not self._open:
            transact(self.producer.begin_transaction)
            self._open = True

    def commit(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        self._write_progress(progress, on_delivery)
        self._open = False

    def end_empty(self) -> None:
        if self._open:  # only source errors/markers arrived: close the empty transaction
            transact(self.producer.commit_transaction, 60)
            self._open = False

    def abort(self) -> None:
        self._open = False
        try:
            self.producer.abort_transaction(30)
        except KafkaException:
            pass


class AtLeastOnce(CommitProtocol):
    """Records acknowledged by an idempotent producer; then their progress in a transaction of the fence."""

    pipelined = True

    def __init__(self, make_producer: ProducerFactory, progress_topic: str) -> None:
        super().__init__(progress_topic)
        self.producer = make_producer(False)
        self.fence = make_producer(True)

    def begin(self) -> None:
        pass  # the records are not transactional

    def commit(self, progress: Iterable[ProgressRecord], on_delivery: OnDelivery) -> None:
        transact(self.fence.begin_transaction)
        self._write_progress(progress, on_delivery)

    def close(self) -> None:
        super().close()
        flush_quietly(self.fence)


def commit_protocol(delivery: Delivery) -> type[CommitProtocol]:
    return ExactlyOnce if delivery == Delivery.EXACTLY_ONCE else AtLeastOnce
