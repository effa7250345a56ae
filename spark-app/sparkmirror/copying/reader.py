"""A lane's source reader: where records are read. One consumer, assigned (no group, no commits), read_committed,
reading from the committed positions; source errors told apart (a gap ends the lane, a transient fault is the
client's to retry), and the source going away and coming back: the consumer keeps its position and reconnects
by itself, so the lane copies on when the source returns, probing it meanwhile."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..outage import Backoff, Outage
from ..progress import partition_lag
from .context import LaneContext
from .errors import (CopyError, CorruptBatch, Fault, SourceGapError, classify, describe, refusal_kind, refused,
                     talking_to)
from .shares import PartitionKey
from .summary import PartitionSummary

log = logging.getLogger(__name__)

ONE_METADATA_REQUEST_ABOVE = 100
"""A lane that gains more topics than this asks the source for all topics' metadata once, not for each of them:
546 topics asked one by one held a lane's loop for 8.8 s at 10,000 partitions (16 ms each); all 10,000
partitions' metadata took 1.3-3.7 s."""


def new_consumer(source_conf: dict[str, str], tid: str) -> Consumer:
    """The lane's source consumer: read_committed, assigned (no group, no commits), errors on lost offsets,
    every batch's CRC32C checked (`check.crcs`, off by librdkafka's default): the producer encodes each record
    anew under a CRC of its own, so a batch corrupted in the source's log would otherwise reach the target under
    a valid one. The user's consumer settings in `source_conf` win over the mirror's defaults (fetch wait, queue
    size, client.id), never over what it owns (refused by the plan, resource/clientconf.py)."""
    return Consumer({
        "fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 65536, "client.id": tid,
        **source_conf, "group.id": f"{tid}.source", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "isolation.level": "read_committed",
        "auto.offset.reset": "error", "enable.partition.eof": False, "check.crcs": True})


def next_batch(consumer: Consumer, limit: int, wait: float) -> list:
    """The records ready now, waiting up to `wait` s only while there are none: librdkafka's batch consume()
    returns early only when its batch is full, so a record that arrived at the start of its timeout waited all
    of it (0-10 ms with the lanes' slices, 5 ms on average, on every record at a steady rate), while poll()
    returns at the first record. One call each: the batch call keeps the per-record cost of large batches."""
    first = consumer.poll(wait)
    if first is None:
        return []
    rest = consumer.consume(num_messages=limit - 1, timeout=0)
    rest.insert(0, first)
    return rest


def close_consumer(consumer: Consumer) -> None:
    try:
        consumer.close()
    except (KafkaException, RuntimeError):
        pass


class SourceReader:
    """The lane's consumer and what the lane knows of its source's state."""

    def __init__(self, ctx: LaneContext, outage: Outage, backoff: Backoff) -> None:
        self.ctx, self.outage, self.backoff = ctx, outage, backoff
        self.consumer: Consumer | None = None
        self._next_probe = 0.0
        # the furthest source offset this lane's clients read or committed, per partition: no progress of its
        # own lies beyond it (see LaneCopy.check_not_taken_over)
        self.reach: dict[PartitionKey, int] = {}

    # ---- the consumer's life ---------------------------------------------------------------------------------

    def open(self) -> None:
        # the client reports "all brokers down" only to an error callback, never through consume()
        self.consumer = new_consumer({**self.ctx.consumer_conf, "error_cb": self._on_client_error}, self.ctx.tid)

    def assign(self, positions: dict[PartitionKey, int]) -> None:
        """Read the lane's partitions from `positions` (a fresh start: the whole plan)."""
        assert self.consumer is not None
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        with talking_to("source", self.ctx.mirror.source, "reading the source's metadata"):
            # the offsets came from an admin client: the consumer knows no leader yet, and for topics it never
            # heard of it waited seconds before fetching (a lane fenced and started afresh copied nothing in a
            # 2-s epoch). One metadata request tells it every assigned partition's leader now.
            self.consumer.list_topics(timeout=30)

    def add(self, positions: dict[PartitionKey, int]) -> None:
        """Read partitions the lane gained too, leaving the others where they are."""
        assert self.consumer is not None
        self.consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        with talking_to("source", self.ctx.mirror.source, "reading the source's metadata"):
            topics = sorted({t for t, _ in positions})  # the new topics' leaders, now (see assign)
            if len(topics) > ONE_METADATA_REQUEST_ABOVE:
                self.consumer.list_topics(timeout=30)
            else:
                for topic in topics:
                    self.consumer.list_topics(topic, timeout=30)

    def take(self, kept: SourceReader, committed: dict[PartitionKey, int]) -> None:
        """Continue with the consumer of the lane's previous copier, from the committed offsets."""
        assert kept.consumer is not None
        self.consumer, kept.consumer = kept.consumer, None
        self.rewind_to(committed)

    def rewind_to(self, committed: dict[PartitionKey, int]) -> None:
        """Kept clients go on from the committed offsets. Only the partitions the consumer read past them (an
        aborted interval) are assigned again, at their committed offset; a partition it read nothing from since
        it was assigned (position unset) is still at it. Assigning all of a lane's partitions again at every
        epoch made the consumer validate each one's position anew: at 5,000 partitions a lane, the next
        assignment (a topic the plan gained) then waited 19-26 s."""
        assert self.consumer is not None
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        if not assigned:  # kept without copying on (sessions.keep): nothing is assigned
            self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in committed.items()])
            return
        moved = [TopicPartition(tp.topic, tp.partition, committed[(tp.topic, tp.partition)])
                 for tp in self.consumer.position([TopicPartition(t, p) for t, p in committed if (t, p) in assigned])
                 if tp.offset >= 0 and tp.offset != committed[(tp.topic, tp.partition)]]
        if moved:
            self.consumer.incremental_unassign(moved)
        missing = [TopicPartition(t, p, o) for (t, p), o in committed.items() if (t, p) not in assigned]
        if moved or missing:
            self.consumer.incremental_assign(moved + missing)

    def unassign(self) -> None:
        """Stop fetching; the next epoch assigns the committed positions again."""
        if self.consumer is not None:
            self.consumer.unassign()

    def close(self, committed: dict[PartitionKey, int]) -> None:
        self.note_reach(committed)
        if self.consumer is not None:
            close_consumer(self.consumer)
        self.consumer = None

    def note_reach(self, committed: dict[PartitionKey, int]) -> None:
        """How far this lane's clients read (the consumer's positions) and committed, before they go."""
        reach = self.reach
        for k, o in committed.items():
            if o > reach.get(k, -1):
                reach[k] = o
        if self.consumer is None:
            return
        try:
            positions = self.consumer.position([TopicPartition(t, p) for t, p in self.ctx.route])
        except KafkaException:
            return  # the committed offsets stand; a start that follows fences as before
        for tp in positions:
            k = (tp.topic, tp.partition)
            if tp.offset > reach.get(k, -1):
                reach[k] = tp.offset

    # ---- reading -------------------------------------------------------------------------------------------

    def read(self, limit: int, wait: float) -> list:
        """The next records (and source errors, see `source_error`)."""
        assert self.consumer is not None
        msgs = next_batch(self.consumer, limit, wait)
        if msgs and "source" in self.outage.down:  # maybe fetched before it went away: ask it before saying so
            self._next_probe = 0.0
        return msgs

    def source_error(self, err: KafkaError, m, committed: dict[PartitionKey, int], abort: Callable[[], None]) -> None:
        """A consumed message that carries an error: a gap or a refusal ends the lane (`abort` first: the open
        interval goes), a transient fault is the client's to retry."""
        if err.code() == KafkaError._PARTITION_EOF:
            return
        mirror = self.ctx.mirror
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._LOG_TRUNCATION):
            abort()
            topic, part = m.topic(), m.partition()
            nxt = committed.get((topic, part), -1)
            assert self.consumer is not None
            lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            raise SourceGapError(f"mirror {mirror.name!r}: source {mirror.source}/{topic} partition "
                                 f"{part}: offset out of range while copying (next to copy {nxt}, source holds "
                                 f"{lo}..{hi - 1}): records were deleted or the log truncated before being "
                                 f"mirrored ({err.str()})")
        if err.code() == KafkaError._BAD_MSG:  # a batch failed its CRC32C (check.crcs): never forwarded
            abort()
            topic, part = m.topic(), m.partition()
            raise CorruptBatch(f"mirror {mirror.name!r}: source cluster {mirror.source!r}: {topic}[{part}] the record "
                               f"batch at offset {m.offset()} is corrupt ({err.str()}); nothing from offset "
                               f"{m.offset()} on was copied")
        fault = classify(err)
        if fault is Fault.TRANSIENT:  # one broker or connection: the client retries and moves on by itself
            log.debug("lane %s: source error, retried by the client: %s", self.ctx.tid, describe(err))
            return
        abort()
        topic, part = m.topic(), m.partition()
        where = (f"topic {topic} partition {part} offset {committed.get((topic, part), -1)}" if topic
                 else f"partitions {', '.join(f'{t}/{p}@{o}' for (t, p), o in sorted(committed.items()))}")
        kind = refusal_kind(err)
        if kind.refused:  # waited on for the credentials' grace when new ones could cure it
            raise refused("source", mirror.source, kind, f"consuming {where}: {describe(err)}")
        raise CopyError(f"mirror {mirror.name!r}: consuming from source cluster {mirror.source!r}, "
                        f"{where} failed: {describe(err)}")

    # ---- the source going away and coming back -------------------------------------------------------------

    def _on_client_error(self, err: KafkaError) -> None:
        """The consumer's error callback (runs inside consume())."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN and "source" not in self.outage.down:
            line = self.outage.failed("source", f"source cluster {self.ctx.mirror.source!r}", describe(err))
            if line:
                log.warning("%s", line)
            self.backoff.reset()
            self._next_probe = time.monotonic() + self.backoff.next()

    def probe_when_due(self) -> None:
        """While the source is away: does it answer a metadata request yet? (between commit intervals)"""
        if "source" not in self.outage.down or time.monotonic() < self._next_probe:
            return
        assert self.consumer is not None
        try:
            self.consumer.list_topics(next(iter(self.ctx.route))[0], timeout=2)
        except KafkaException:
            self._next_probe = time.monotonic() + self.backoff.next()
            return
        line = self.outage.answered("source")
        if line:
            log.warning("%s", line)

    # ---- the epoch's end -----------------------------------------------------------------------------------

    def end_offsets_and_lag(self, summaries: dict[PartitionKey, PartitionSummary],
                            committed: dict[PartitionKey, int]) -> None:
        """Each summary's source end offset, next offset and lag as the epoch ends.

        The offsets are the ones the consumer's last fetch of each partition brought (log start and high
        watermark), not asked for: a request per partition cost a lane of 500 partitions 29 s at every epoch
        end (bench/scale.py). A partition not fetched yet reports no lag (-1). These figures only stand in until
        the driver's monitor, which lists every partition's offsets itself (batched, committed records counted),
        has seen the partition."""
        if self.consumer is None:
            return
        for (topic, part), s in summaries.items():
            try:
                lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            except KafkaException:
                lo, hi = 0, -1
            if lo < 0:  # the fetch did not carry the log start offset: the position is the next offset anyway
                lo = 0
            s.source_end = hi
            s.next_offset = committed.get((topic, part), s.next_offset)
            # in offsets (-1: unknown); the driver's live monitor counts the small ones exactly
            s.lag = partition_lag(lo, hi, s.next_offset) if hi >= 0 and s.next_offset >= 0 else -1
