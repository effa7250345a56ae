"""One lane's copy loop (executor side, all the I/O): source partitions -> same partitions of the remote topics.

A fresh lane starts its commit protocol first (fencing older copies, see commit.py), then reads its resume
offsets from the progress topic and checks them against what the source still holds (start.py). It then
consumes for up to ~commitIntervalMs at a time, produces each record to the same partition (key, value,
headers and timestamp kept) and hands the interval to the commit protocol once every record was acknowledged. A refused record raises a `CopyError` (errors.py); a transient delivery failure aborts the
interval and copies it again from the last commit. At the end of the epoch the lane's clients are closed, or
kept for its next epoch in this worker (sessions.py).
"""
from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition

from ..lanes import LanePartition, transactional_id
from ..progress import ProgressRecord, partition_lag
from ..replication import RecordStamper, policy_for
from ..resource.flowgroup import FlowGroupConfig, Mirror
from . import sessions
from .commit import CommitProtocol, commit_protocol
from .errors import REFUSED, CopyError, LaneFenced, SourceGapError, is_fenced, kafka_error
from .start import close_consumer, new_consumer, new_producer, resume_positions, target_max_message_bytes
from .summary import PartitionSummary

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """One partition's share of the open commit interval."""

    src_first: int
    src_last: int = -1
    count: int = 0
    nbytes: int = 0
    ts_sum: int = 0
    ts_min: int = -1
    tgt_first: int = -1
    tgt_last: int = -1


class _Retry(Exception):
    """Internal: the open interval was aborted for a transient reason; copying resumes at the last commit."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class LaneCopier:
    """Copies one lane's source partitions for one bounded epoch. Use `run()`; it returns the summaries."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
                 epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None,
                 epoch: int | None = None, prev_epoch: int | None = None, attempt: int = 0,
                 carry_seconds: float = 0.0, stop_file: str | None = None) -> None:
        """`epoch`/`prev_epoch` (Spark's epoch ids) let a lane keep its clients for its next epoch in this
        process and resume them there (sessions.py); without them (tests, tools) every run starts and closes
        its own."""
        self.config = config
        self.epoch, self.prev_epoch, self.attempt = epoch, prev_epoch, attempt
        self.carry_seconds, self.stop_file = carry_seconds, stop_file
        self.result: list[PartitionSummary] = []
        self._commits = 0
        self.reused = False  # the lane's kept clients were resumed (see sessions.LaneSession)
        self.mirror = mirror
        self.lane = lane
        self.partitions = list(partitions)
        self.epoch_seconds = config.epochSeconds if epoch_seconds is None else epoch_seconds
        self.should_stop = should_stop or (lambda: False)
        self._protocol_class = commit_protocol(config.delivery)  # exactly-once or at-least-once
        self.source_conf = config.cluster(mirror.source).client_config()
        self.target_conf = config.cluster(mirror.target).client_config()
        self.tid = transactional_id(config.name, mirror.name, lane)
        self.route = {(p.source_topic, p.partition): p.target_topic for p in self.partitions}
        self.summaries = {(p.source_topic, p.partition): PartitionSummary(
            mirror.name, lane, p.source_topic, p.partition, p.target_topic, generation=config.worker.generation)
            for p in self.partitions}
        self.max_bytes: dict[str, int] = {}
        stamper = RecordStamper.of(policy_for(mirror), mirror.source, mirror.target)
        # identity policy only: skip records that came from the target, stamp provenance on the rest
        self.stamper: RecordStamper | None = stamper if stamper.uses_provenance else None
        self._delivery_errors: list[tuple[KafkaError, str, int, int]] = []
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._committed_next: dict[tuple[str, int], int] = {}
        self.protocol: CommitProtocol | None = None  # the producers, see commit.py
        self.consumer: Consumer | None = None

    # ---- the epoch -----------------------------------------------------------------------------------------

    def run(self) -> list[PartitionSummary]:
        """Copy until the epoch ends, the lane is fenced or `should_stop()`; return per-partition summaries."""
        start_ms = _now_ms()
        for s in self.summaries.values():
            s.epoch_start_ms = start_ms
        if not self.partitions:
            return []
        keep = False
        if self.epoch is not None:
            log.info("lane %s: epoch %d starts in worker %d", self.tid, self.epoch, os.getpid())
        try:
            reused = self.reused = sessions.resume(self)
            if not reused:
                self._start()
            try:
                self._guarded(self._loop)
            except LaneFenced:
                if not reused or self._commits:
                    raise
                self._start_afresh()
                self._guarded(self._loop)
            keep = True
        except LaneFenced:
            self._fenced()
        finally:
            self._finish(keep)
            log.info("lane %s: epoch of %.1f s, %d records in %d transactions%s", self.tid,
                     (_now_ms() - start_ms) / 1000, sum(s.records for s in self.result), self._commits,
                     " (kept clients)" if self.reused else "")
        return self.result

    def _start(self) -> None:
        """Fresh clients: producers, init_transactions (fences older copies), THEN progress, then assign."""
        t0 = time.monotonic()
        self.max_bytes = target_max_message_bytes(self.target_conf, set(self.route.values()))
        make_producer = functools.partial(new_producer, self.config, self.target_conf, self.tid, self.max_bytes)
        self.protocol = self._protocol_class(make_producer, self.config.progressTopic)
        self._guarded(self.protocol.start)  # FIRST: aborts and fences older copies
        self.consumer = new_consumer(self.source_conf, self.tid)
        # THEN the progress topic: it can no longer change under us
        positions = resume_positions(self.config, self.mirror, self.consumer, list(self.route))
        self._committed_next = dict(positions)
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        log.info("lane %s: started in %.0f ms (%d partitions)", self.tid, (time.monotonic() - t0) * 1000,
                 len(positions))

    def _start_afresh(self) -> None:
        """Kept clients were fenced before they committed anything: another copy of this lane ran since our
        last epoch. Start afresh (fencing it in turn)."""
        log.info("lane %s: kept clients were fenced since the last epoch; starting afresh", self.tid)
        self._close_clients()
        self.reused = False
        self._pending.clear()
        self._delivery_errors.clear()
        self._start()

    def take_clients(self, kept: LaneCopier) -> None:
        """Continue with the clients and committed positions of this lane's previous copier (sessions.py)."""
        assert kept.consumer is not None
        self.protocol, self.consumer = kept.protocol, kept.consumer
        self.max_bytes = kept.max_bytes
        self._committed_next = dict(kept._committed_next)
        kept.protocol = kept.consumer = None
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in self._committed_next.items()])

    def _guarded(self, op: Callable, *args) -> None:
        """Fatal fencing errors surface from flush()/poll()/init as exceptions: map them to LaneFenced."""
        try:
            op(*args)
        except (KafkaException, SystemError) as e:
            err = kafka_error(e) or self._fatal_error()
            if err is None or not is_fenced(err):
                raise
            raise LaneFenced() from e

    def _fatal_error(self) -> KafkaError | None:
        return self.protocol.fatal_error() if self.protocol is not None else None

    def _close_clients(self) -> None:
        if self.consumer is not None:
            close_consumer(self.consumer)
        if self.protocol is not None:
            self.protocol.close()
        self.protocol = self.consumer = None

    def _fenced(self) -> None:
        log.warning("lane %s fenced by a newer copy; stopping", self.tid)
        self._pending.clear()
        for s in self.summaries.values():
            s.fenced = True

    # ---- the loop ----------------------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self.consumer is not None and self.protocol is not None
        protocol = self.protocol
        interval = self.config.commitIntervalMs / 1000.0
        deadline = time.monotonic() + self.epoch_seconds
        while time.monotonic() < deadline and not self.should_stop():
            interval_end = min(time.monotonic() + interval, deadline)
            try:
                while True:
                    left = interval_end - time.monotonic()
                    if left <= 0:
                        break
                    msgs = self.consumer.consume(num_messages=5000, timeout=left)
                    if msgs:
                        protocol.begin()
                    self._copy(msgs)
                    protocol.producer.poll(0)
                if self._pending:
                    self._commit()
                else:
                    protocol.end_empty()
            except _Retry:
                continue

    def _copy(self, msgs: list) -> None:
        assert self.protocol is not None
        producer = self.protocol.producer
        for m in msgs:
            err = m.error()
            if err is not None:
                self._source_error(err, m)
                continue
            key = (m.topic(), m.partition())
            off = m.offset()
            pend = self._pending.get(key)
            if pend is None:
                pend = self._pending[key] = _Pending(off)
            k, v, h = m.key(), m.value(), m.headers()
            ts_type, ts = m.timestamp()
            pend.src_last = off
            if self.stamper is not None:
                if not self.stamper.should_copy(h):
                    continue  # came from the target: copying it back would loop; progress still advances
                h = self.stamper.headers_for(h)
            pend.count += 1
            pend.nbytes += (len(k) if k else 0) + (len(v) if v else 0)
            pend.ts_sum += ts
            if pend.ts_min < 0 or ts < pend.ts_min:
                pend.ts_min = ts
            cb = functools.partial(self._on_delivery, key, off)
            while True:
                try:
                    producer.produce(self.route[key], value=v, key=k, partition=key[1], headers=h,
                                     timestamp=ts if ts_type != TIMESTAMP_NOT_AVAILABLE else 0, on_delivery=cb)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    self._abort_quietly()
                    err = e.args[0]
                    if err.code() == KafkaError._FATAL:  # "Unable to produce message": the cause is behind it
                        err = self._fatal_error() or err
                    if is_fenced(err):
                        raise LaneFenced() from e
                    self._raise_refused(err, key[0], key[1], off)

    def _source_error(self, err: KafkaError, m) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._abort_quietly()
            topic, part = m.topic(), m.partition()
            nxt = self._committed_next.get((topic, part), -1)
            lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            raise SourceGapError(f"mirror {self.mirror.name!r}: source {self.mirror.source}/{topic} partition "
                                 f"{part}: offset out of range while copying (next to copy {nxt}, source holds "
                                 f"{lo}..{hi - 1}): records were deleted before being mirrored ({err.str()})")
        if err.fatal() or not err.retriable():
            self._abort_quietly()
            raise CopyError(f"mirror {self.mirror.name!r}: consuming from {self.mirror.source}/{m.topic()} "
                            f"partition {m.partition()} failed: {err.name()}: {err.str()}")
        log.warning("source error (retried by the client): %s", err.str())

    def _commit(self) -> None:
        """Wait for the records' acks, then have the protocol commit them with their progress."""
        assert self.protocol is not None
        while self.protocol.producer.flush(30) > 0:
            pass
        self._check_delivery()
        commit_ms = _now_ms()
        recs = [ProgressRecord(self.mirror.source, topic, part, pend.src_last + 1, pend.src_first, pend.src_last,
                               self.route[(topic, part)], pend.tgt_first, pend.tgt_last, pend.count, commit_ms,
                               self.config.worker.generation, self.config.name, self.mirror.name, self.lane,
                               pend.nbytes)
                for (topic, part), pend in self._pending.items()]
        self.protocol.commit(recs, functools.partial(self._on_delivery, ("<progress>", -1), -1))
        self._check_delivery()
        done_ms = _now_ms()
        for rec in recs:
            key = (rec.source_topic, rec.partition)
            pend = self._pending[key]
            s = self.summaries[key]
            if s.source_first < 0:
                s.source_first, s.target_first = rec.source_first, rec.target_first
            s.source_last, s.target_last, s.next_offset = rec.source_last, rec.target_last, rec.next_offset
            s.records += pend.count
            s.bytes += pend.nbytes
            s.transactions += 1
            if pend.count:
                s.latency_ms_sum += pend.count * done_ms - pend.ts_sum
                s.latency_ms_max = max(s.latency_ms_max, done_ms - pend.ts_min)
            self._committed_next[key] = rec.next_offset
        self._pending.clear()
        self._commits += 1

    # ---- delivery reports --------------------------------------------------------------------------------

    def _on_delivery(self, key: tuple[str, int], src_offset: int, err: KafkaError | None, msg) -> None:
        if err is not None:
            self._delivery_errors.append((err, key[0], key[1], src_offset))
            return
        pend = self._pending.get(key)
        if pend is not None:
            off = msg.offset()
            if pend.tgt_first < 0 or off < pend.tgt_first:
                pend.tgt_first = off
            if off > pend.tgt_last:
                pend.tgt_last = off

    def _check_delivery(self) -> None:
        if not self._delivery_errors:
            return
        err, topic, part, off = self._delivery_errors[0]
        self._delivery_errors.clear()
        self._abort_quietly()
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._FATAL) or err.fatal():
            err = self._fatal_error() or err  # a fenced producer purges its queue: report the cause
        if is_fenced(err):
            raise LaneFenced()
        if topic == "<progress>":
            raise CopyError(f"mirror {self.mirror.name!r}: writing progress to {self.mirror.target}/"
                            f"{self.config.progressTopic} failed: {err.name()}: {err.str()}")
        if err.code() in REFUSED or err.fatal() or not err.retriable():
            self._raise_refused(err, topic, part, off)
        # retriable leftovers after the client's own retries: abort and continue from the last commit
        log.warning("delivery failed (%s); transaction aborted, re-copying from the last commit", err.str())
        self._rewind()
        raise _Retry()

    def _raise_refused(self, err: KafkaError, topic: str, part: int, offset: int) -> None:
        target = self.route.get((topic, part), "?")
        extra = ""
        if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
            limit = self.max_bytes.get(target)
            extra = f" (target topic max.message.bytes={limit})" if limit else " (target max.message.bytes)"
        raise CopyError(f"mirror {self.mirror.name!r}: the target refused the record at source "
                        f"{self.mirror.source}/{topic} partition {part} offset {offset} -> "
                        f"{self.mirror.target}/{target}: {err.name()}: {err.str()}{extra}; "
                        f"the transaction was aborted and nothing after the last commit was skipped")

    def _rewind(self) -> None:
        self._pending.clear()
        assert self.consumer is not None
        for (t, p), off in self._committed_next.items():
            self.consumer.seek(TopicPartition(t, p, off))

    def _abort_quietly(self) -> None:
        if self.protocol is not None:
            self.protocol.abort()
        self._pending.clear()

    # ---- the end of the epoch ------------------------------------------------------------------------------

    def _finish(self, keep: bool = False) -> None:
        """Summaries' end figures; then keep the clients for this lane's next epoch, or close them."""
        end_ms = _now_ms()
        if self.consumer is not None:
            self._end_offsets_and_lag()
        for s in self.summaries.values():
            s.epoch_end_ms = end_ms
        self.result = [replace(s) for s in self.summaries.values()]  # the task's rows, whatever happens next
        if keep and self.epoch is not None and self.consumer is not None and self.protocol is not None:
            sessions.keep(self)
        else:
            self._close_clients()

    def _end_offsets_and_lag(self) -> None:
        """Each summary's source end offset, next offset and lag as the epoch ends."""
        assert self.consumer is not None
        for (topic, part), s in self.summaries.items():
            try:
                lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=5,
                                                             cached=False)
            except KafkaException:
                lo, hi = 0, -1
            s.source_end = hi
            s.next_offset = self._committed_next.get((topic, part), s.next_offset)
            # in offsets (-1: unknown); the driver's live monitor counts the small ones exactly
            s.lag = partition_lag(lo, hi, s.next_offset) if hi >= 0 and s.next_offset >= 0 else -1


def copy_lane(config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
              epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None
              ) -> list[PartitionSummary]:
    """Run one lane for one epoch, with clients of its own (tests and tools; Spark tasks use LaneCopier)."""
    return LaneCopier(config, mirror, lane, partitions, epoch_seconds, should_stop).run()
