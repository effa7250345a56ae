"""One lane's copy loop (executor side, all the I/O): source partitions -> same partitions of the remote topics.

Order of start-up matters for exactly-once: the transactional producer is initialised FIRST (which aborts any
open transaction of an older copy of this lane and fences it), and only THEN is the progress topic read, so
the resume offsets cannot change any more under this copy. Every ~commitIntervalMs one transaction commits
the copied records together with one progress record per source partition it touched.

`at-least-once` copies the records with an idempotent, non-transactional producer and writes progress only
after the records it covers were acknowledged, so a crash repeats records but never loses one. Its progress
records go in small transactions of a second producer holding the lane's transactional.id: that producer is
the lane's fencing token, so a newer copy of the lane stops an older one at its next progress write (the older
one can then repeat at most one commit interval of records, and can never move progress backwards).

A record the target refuses (too large, unknown topic, not authorised) aborts the transaction and raises a
`CopyError` naming topic, partition, offset and reason: nothing is ever skipped silently.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from confluent_kafka import (TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, ConfigResource

from .resource.flowgroup import Delivery, FlowGroupConfig, Mirror
from .lanes import LanePartition, transactional_id
from .replication import RecordStamper, policy_for
from .progress import ProgressRecord, read_progress

log = logging.getLogger("sparkmirror.copier")

# Errors meaning "the target will never take this record": stop the mirror, do not retry forever.
REFUSED = {
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.POLICY_VIOLATION, KafkaError._MSG_TIMED_OUT,
}
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class CopyError(RuntimeError):
    """The mirror cannot continue without losing data; the message says where and why."""


class SourceGapError(CopyError):
    """The source no longer holds offsets that were never mirrored (retention, truncation, topic recreated)."""


class LaneFenced(Exception):
    """A newer copy of this lane took over (same transactional.id); this copy must stop."""


@dataclass
class PartitionSummary:
    """What one lane did for one source partition during one epoch: the row the Spark task yields."""

    mirror: str
    lane: int
    source_topic: str
    partition: int
    target_topic: str
    records: int = 0
    bytes: int = 0
    source_first: int = -1
    source_last: int = -1
    target_first: int = -1
    target_last: int = -1
    next_offset: int = -1
    source_end: int = -1
    lag: int = -1
    transactions: int = 0
    latency_ms_sum: int = 0
    latency_ms_max: int = -1
    epoch_start_ms: int = 0
    epoch_end_ms: int = 0
    generation: int = 0
    fenced: bool = False
    error: str | None = None  # set on the one row a lane yields when it stopped on a CopyError

    def row(self) -> tuple:
        return tuple(asdict(self).values())


SUMMARY_SCHEMA = ("mirror string, lane int, source_topic string, partition int, target_topic string, "
                  "records long, bytes long, source_first long, source_last long, target_first long, "
                  "target_last long, next_offset long, source_end long, lag long, transactions long, "
                  "latency_ms_sum long, latency_ms_max long, epoch_start_ms long, epoch_end_ms long, "
                  "generation int, fenced boolean, error string")


@dataclass
class _Pending:
    """One partition's share of the open transaction."""

    src_first: int
    src_last: int = -1
    count: int = 0
    nbytes: int = 0
    ts_sum: int = 0
    ts_min: int = -1
    tgt_first: int = -1
    tgt_last: int = -1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError behind an exception; librdkafka's fatal errors can surface as a SystemError whose
    cause is the KafkaException (raised inside a delivery callback during flush/poll)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _is_fenced(err: KafkaError) -> bool:
    return err.code() in FENCED or (err.fatal() and "fenced" in err.str().lower())


def target_max_message_bytes(target_conf: dict[str, str], topics: set[str]) -> dict[str, int]:
    """The target topics' max.message.bytes: the batch size must not exceed it, and errors quote it."""
    if not topics:
        return {}
    admin = AdminClient(target_conf)
    res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in sorted(topics)]
    out: dict[str, int] = {}
    for r, fut in admin.describe_configs(res).items():
        try:
            out[r.name] = int(fut.result(timeout=30)["max.message.bytes"].value)
        except KafkaException as e:
            raise CopyError(f"target topic {r.name!r} cannot be described on the target cluster: "
                            f"{e.args[0].str()}") from e
    return out


class LaneCopier:
    """Copies one lane's source partitions for one bounded epoch. Use `run()`; it returns the summaries."""

    def __init__(self, config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
                 epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None,
                 epoch: int | None = None, prev_epoch: int | None = None, attempt: int = 0,
                 carry_seconds: float = 0.0, stop_file: str | None = None) -> None:
        """`epoch`/`prev_epoch` (Spark's epoch ids) let a lane keep its clients for its next epoch in this
        process and resume them there; without them (tests, tools) every run starts and closes its own."""
        self.config = config
        self.epoch, self.prev_epoch, self.attempt = epoch, prev_epoch, attempt
        self.carry_seconds, self.stop_file = carry_seconds, stop_file
        self.result: list[PartitionSummary] = []
        self._commits = 0
        self.reused = False  # the lane's kept clients were resumed (see _LaneSession)
        self.mirror = mirror
        self.lane = lane
        self.partitions = list(partitions)
        self.epoch_seconds = config.epochSeconds if epoch_seconds is None else epoch_seconds
        self.should_stop = should_stop or (lambda: False)
        self.exactly_once = config.delivery == Delivery.EXACTLY_ONCE
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
        self.producer: Producer | None = None
        self.fence: Producer | None = None  # the transactional producer: `producer` itself for exactly-once
        self.consumer: Consumer | None = None

    # ---- set-up -------------------------------------------------------------------------------------------

    def _make_producer(self, transactional: bool) -> Producer:
        batch = min([1_000_000, *self.max_bytes.values()])
        conf = {**self.target_conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                "batch.size": max(batch - 512, 1024), "message.max.bytes": 100 * 1024 * 1024,
                "partitioner": "murmur2_random", "client.id": self.tid}
        if transactional:
            conf.update({"transactional.id": self.tid, "transaction.timeout.ms": self.config.transactionTimeoutMs,
                         "message.timeout.ms": min(self.config.transactionTimeoutMs, 300000)})
        return Producer(conf)

    def _resume_positions(self) -> dict[tuple[str, int], int]:
        """Resume offsets from the progress topic, checked against what the source still holds."""
        state = read_progress(self.target_conf, self.config.progressTopic, self.mirror.source,
                              list(self.route))
        resume = state.resume_offsets(self.mirror.source)
        positions: dict[tuple[str, int], int] = {}
        assert self.consumer is not None
        for (topic, part) in self.route:
            lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            nxt = resume.get((topic, part))
            if nxt is None:
                positions[(topic, part)] = lo  # never mirrored: from the beginning, as MM2 does
            elif nxt < lo or nxt > hi:
                why = (f"the source no longer holds offsets {nxt}..{lo - 1} (earliest held is {lo}): they were "
                       f"deleted before being mirrored" if nxt < lo else
                       f"the committed next offset {nxt} is beyond the source's end offset {hi}: the topic was "
                       f"recreated or truncated")
                positions[(topic, part)] = self._gap(topic, part, nxt, lo, why)
            else:
                positions[(topic, part)] = nxt
        self._committed_next = dict(positions)
        return positions

    def _gap(self, topic: str, part: int, nxt: int, lo: int, why: str) -> int:
        msg = (f"mirror {self.mirror.name!r}: source {self.mirror.source}/{topic} partition {part}: {why} "
               f"(sourceGapPolicy={self.config.sourceGapPolicy})")
        if self.config.sourceGapPolicy == "fail":
            raise SourceGapError(msg)
        log.error("%s; continuing from offset %d, the skipped range is LOST on the target", msg, lo)
        return lo

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

    # ---- the loop ----------------------------------------------------------------------------------------

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
            reused = self.reused = self._resume_session()
            if not reused:
                self._start()
            try:
                self._guarded(self._loop)
            except LaneFenced:
                if not reused or self._commits:
                    raise
                # another copy of this lane ran since our last epoch: start afresh (fencing it in turn)
                log.info("lane %s: kept clients were fenced since the last epoch; starting afresh", self.tid)
                self._close_clients()
                self.reused = False
                self._pending.clear()
                self._delivery_errors.clear()
                self._start()
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
        """Fresh clients: producer, init_transactions (fences older copies), THEN progress, then assign."""
        t0 = time.monotonic()
        self.max_bytes = target_max_message_bytes(self.target_conf, set(self.route.values()))
        self.producer = self._make_producer(transactional=self.exactly_once)
        self.fence = self.producer if self.exactly_once else self._make_producer(transactional=True)
        self._guarded(self.fence.init_transactions, 60)  # FIRST: aborts and fences older copies
        self.consumer = Consumer({
            **self.source_conf, "group.id": f"{self.tid}.source", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "isolation.level": "read_committed",
            "auto.offset.reset": "error", "enable.partition.eof": False, "client.id": self.tid,
            "fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 65536})
        positions = self._resume_positions()  # THEN: progress can no longer change under us
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        log.info("lane %s: started in %.0f ms (%d partitions)", self.tid, (time.monotonic() - t0) * 1000,
                 len(positions))

    def _guarded(self, op: Callable, *args) -> None:
        """Fatal fencing errors surface from flush()/poll()/init as exceptions: map them to LaneFenced."""
        try:
            op(*args)
        except (KafkaException, SystemError) as e:
            err = _kafka_error(e) or self._fatal_error()
            if err is None or not _is_fenced(err):
                raise
            raise LaneFenced() from e

    def _fatal_error(self) -> KafkaError | None:
        """The producer's fatal error, when the client raised a bare SystemError from flush() (it does when
        the fatal error is raised while a delivery callback runs): any transactional call reports it."""
        if self.fence is None:
            return None
        try:
            self.fence.abort_transaction(5)
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            return err if err is not None and err.fatal() else None
        return None

    def _session_key(self) -> tuple:
        return (self.tid, self.config.model_dump_json(), tuple(sorted(self.route.items())))

    def _resume_session(self) -> bool:
        """Take over this lane's clients kept by this worker process, if they ran exactly the previous epoch.

        Only when no other copy can have run the lane since: the kept session ended at `prev_epoch` (the
        start of this epoch) and this is the task's first attempt. Exactly-once adds fencing as the backstop:
        if another copy did run, its init_transactions fenced the kept producer and `run` starts afresh.
        """
        if self.prev_epoch is None:
            return False
        with _SESSIONS_LOCK:
            session = _SESSIONS.pop(self.tid, None)
        if session is None:
            log.info("lane %s: no kept clients in this worker", self.tid)
            return False
        kept = session.release()  # stops copying between epochs at a transaction boundary
        why = ("they stopped" if kept is None else "plan changed" if session.key != self._session_key() else
               f"they ran epoch {session.last_epoch}, this one follows {self.prev_epoch}"
               if session.last_epoch != self.prev_epoch else f"task attempt {self.attempt}" if self.attempt else "")
        if why:
            log.info("lane %s: not resuming kept clients (%s)", self.tid, why)
            if kept is not None:
                kept._close_clients()
            return False
        assert kept is not None
        self.producer, self.fence, self.consumer = kept.producer, kept.fence, kept.consumer
        self.max_bytes = kept.max_bytes
        self._committed_next = dict(kept._committed_next)
        for k, carried in kept.summaries.items():  # records copied between the epochs count in this one
            mine = self.summaries[k]
            for f in ("records", "bytes", "transactions", "latency_ms_sum"):
                setattr(mine, f, getattr(mine, f) + getattr(carried, f))
            mine.latency_ms_max = max(mine.latency_ms_max, carried.latency_ms_max)
            if carried.source_first >= 0:
                mine.source_first, mine.target_first = carried.source_first, carried.target_first
                mine.source_last, mine.target_last = carried.source_last, carried.target_last
        kept.producer = kept.fence = kept.consumer = None
        self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in self._committed_next.items()])
        return True

    def _close_clients(self) -> None:
        _close(self.producer, self.consumer)
        if self.fence is not None and self.fence is not self.producer:
            _close(self.fence, None)
        self.producer = self.fence = self.consumer = None

    def _fenced(self) -> None:
        log.warning("lane %s fenced by a newer copy; stopping", self.tid)
        self._pending.clear()
        for s in self.summaries.values():
            s.fenced = True

    def _loop(self) -> None:
        assert self.consumer is not None and self.producer is not None
        interval = self.config.commitIntervalMs / 1000.0
        deadline = time.monotonic() + self.epoch_seconds
        while time.monotonic() < deadline and not self.should_stop():
            txn_end = min(time.monotonic() + interval, deadline)
            in_txn = False
            try:
                while True:
                    left = txn_end - time.monotonic()
                    if left <= 0:
                        break
                    msgs = self.consumer.consume(num_messages=5000, timeout=left)
                    if msgs and not in_txn and self.exactly_once:
                        self._txn(self.producer.begin_transaction)
                        in_txn = True
                    self._copy(msgs)
                    self.producer.poll(0)
                if self._pending:
                    self._commit()
                elif in_txn:  # only source errors/markers arrived: close the empty transaction
                    self._txn(self.producer.commit_transaction, 60)
            except _Retry:
                continue

    def _copy(self, msgs: list) -> None:
        producer = self.producer
        assert producer is not None
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
                    if _is_fenced(err):
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

    def _txn(self, op: Callable, *args) -> None:
        """Run a transactional operation; retry retriable errors, map fencing to LaneFenced."""
        for attempt in range(20):
            try:
                op(*args)
                return
            except KafkaException as e:
                err = e.args[0]
                if _is_fenced(err):
                    raise LaneFenced() from e
                if err.retriable() and attempt < 19:
                    time.sleep(0.1)
                    continue
                raise

    def _commit(self) -> None:
        """Wait for the records' acks, then add progress and commit (or, at-least-once, write progress)."""
        producer = self.producer
        assert producer is not None
        while producer.flush(30) > 0:
            pass
        self._check_delivery()
        commit_ms = _now_ms()
        recs: list[ProgressRecord] = []
        for (topic, part), pend in self._pending.items():
            rec = ProgressRecord(self.mirror.source, topic, part, pend.src_last + 1, pend.src_first, pend.src_last,
                                 self.route[(topic, part)], pend.tgt_first, pend.tgt_last, pend.count, commit_ms,
                                 self.config.worker.generation, self.config.name, self.mirror.name, self.lane)
            recs.append(rec)
        fence = self.fence
        assert fence is not None
        if not self.exactly_once:  # the records are acknowledged; their progress goes in a fencing transaction
            self._txn(fence.begin_transaction)
        for rec in recs:
            fence.produce(self.config.progressTopic, key=rec.key(), value=rec.value(),
                          on_delivery=functools.partial(self._on_delivery, ("<progress>", -1), -1))
        self._txn(fence.commit_transaction, 60)
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

    def _check_delivery(self) -> None:
        if not self._delivery_errors:
            return
        err, topic, part, off = self._delivery_errors[0]
        self._delivery_errors.clear()
        self._abort_quietly()
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._FATAL) or err.fatal():
            err = self._fatal_error() or err  # a fenced producer purges its queue: report the cause
        if _is_fenced(err):
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

    def _rewind(self) -> None:
        self._pending.clear()
        assert self.consumer is not None
        for (t, p), off in self._committed_next.items():
            self.consumer.seek(TopicPartition(t, p, off))

    def _abort_quietly(self) -> None:
        if self.exactly_once and self.producer is not None:
            try:
                self.producer.abort_transaction(30)
            except KafkaException:
                pass
        self._pending.clear()

    def _finish(self, keep: bool = False) -> None:
        """Summaries' end figures; then keep the clients for this lane's next epoch, or close them."""
        end_ms = _now_ms()
        if self.consumer is not None:
            for (topic, part), s in self.summaries.items():
                try:
                    _lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=5,
                                                                  cached=False)
                except KafkaException:
                    hi = -1
                s.source_end = hi
                s.next_offset = self._committed_next.get((topic, part), s.next_offset)
                s.lag = max(hi - s.next_offset, 0) if hi >= 0 and s.next_offset >= 0 else -1
        for s in self.summaries.values():
            s.epoch_end_ms = end_ms
        self.result = [replace(s) for s in self.summaries.values()]  # the task's rows, whatever happens next
        if keep and self.epoch is not None and self.consumer is not None and self.producer is not None:
            # from here on the counters are the next epoch's: what is copied between epochs counts there
            self.summaries = {k: PartitionSummary(s.mirror, s.lane, s.source_topic, s.partition, s.target_topic,
                                                  generation=s.generation) for k, s in self.summaries.items()}
            session = _LaneSession(self._session_key(), self.epoch, self)
            with _SESSIONS_LOCK:
                old = _SESSIONS.pop(self.tid, None)
                _SESSIONS[self.tid] = session
            if old is not None:
                stale = old.release()
                if stale is not None:
                    stale._close_clients()
            if self.carry_seconds > 0:
                session.carry_on(self.carry_seconds, self.stop_file)
            else:
                self.consumer.unassign()  # stops fetching; the next epoch assigns the committed positions again
            return
        self._close_clients()


def _close(producer: Producer | None, consumer: Consumer | None) -> None:
    if consumer is not None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass
    if producer is not None:
        try:
            producer.flush(10)
        except (KafkaException, SystemError):  # SystemError: see LaneCopier._fatal_error
            pass  # fenced or fatal: nothing of ours is left uncommitted that matters


class _LaneSession:
    """A lane's clients kept by a (reused) Python worker between epochs.

    Creating them, init_transactions and reading the progress topic cost from a fraction of a second to
    seconds per epoch; keeping them saves that when the lane's next task lands in this worker.

    Lanes also keep COPYING between epochs (`carry_on`): Spark's boundary between two epochs
    (finish the batch, run the sink, write the checkpoint, plan, launch tasks) takes seconds, and every record
    produced meanwhile would wait for it. The carrying thread is just one more copy of the lane: the lane's
    next task either releases it here (it stops at a transaction boundary and hands over its clients) or, in
    another worker, fences it with init_transactions and reads the progress it committed (at-least-once: the
    fenced carrier's next progress write fails, so it repeats at most one commit interval of records). It stops by itself
    after `carry_seconds` or when the stop file (the driver's drain file) appears.
    """

    def __init__(self, key: tuple, last_epoch: int, copier: LaneCopier) -> None:
        self.key, self.last_epoch, self.copier = key, last_epoch, copier
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._released = False
        self._usable = True

    def carry_on(self, seconds: float, stop_file: str | None) -> None:
        """Copy on for up to `seconds`, in a daemon thread."""
        c = self.copier
        c.should_stop = lambda: self._stop.is_set() or (bool(stop_file) and os.path.exists(stop_file))
        c.epoch_seconds = seconds
        self._thread = threading.Thread(target=self._carry, name=f"carry-{c.tid}", daemon=True)
        self._thread.start()

    def _carry(self) -> None:
        c = self.copier
        try:
            c._guarded(c._loop)
        except LaneFenced:
            log.info("lane %s: copying between epochs ended: the lane's next copy took over", c.tid)
            self._usable = False
        except Exception as e:  # noqa: BLE001 - the next task meets it again and reports it
            log.warning("lane %s: copying between epochs stopped: %s", c.tid, e)
            self._usable = False
            c._abort_quietly()
        if not self._released:  # ended by itself (time, drain, fencing): nobody will take the clients
            self._usable = False
        if not self._usable:
            c._close_clients()

    def release(self) -> "LaneCopier | None":
        """Stop copying between epochs (at a transaction boundary) and hand the copier over, if still usable."""
        self._released = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
            if self._thread.is_alive():
                log.warning("lane %s: copying between epochs did not stop; starting afresh", self.copier.tid)
                return None
        return self.copier if self._usable else None


_SESSIONS: dict[str, _LaneSession] = {}
"""transactional.id -> the lane's kept clients, in this Python worker process."""
_SESSIONS_LOCK = threading.Lock()


class _Retry(Exception):
    """Internal: the open transaction was aborted for a transient reason; copying resumes at the last commit."""


def copy_lane(config: FlowGroupConfig, mirror: Mirror, lane: int, partitions: list[LanePartition],
              epoch_seconds: float | None = None, should_stop: Callable[[], bool] | None = None
              ) -> list[PartitionSummary]:
    """Run one lane for one epoch (the executor entry point)."""
    return LaneCopier(config, mirror, lane, partitions, epoch_seconds, should_stop).run()
