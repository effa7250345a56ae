"""A lane's target writer on the record path: where records are written. Each source record is produced to the
same partition of its remote topic (key, value, headers, timestamp kept; provenance headers stamped under the
identity policy) by the commit protocol's producer, into the open interval's share of its partition; delivery
reports fill the shares' target offsets, and a refused write is named (record, topic, the target's limit)."""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException

from ..faultkind import Kind
from ..progress import ProgressRecord
from ..refusal import write_refused
from ..replication import RecordStamper, policy_for
from .commit import CommitProtocol
from .context import LaneContext
from .errors import (CopyError, Fault, LaneFenced, Refused, Unreachable, classify, describe, is_fenced, kafka_error,
                     refusal_kind, refused, talking_to)
from .shares import DeliveryError, Interval, PartitionKey, Share
from .start import new_producer, target_max_message_bytes

PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)  # records dropped with their transaction
log = logging.getLogger(__name__)


class RecordWriter:
    """The lane's producers (its commit protocol) and the open interval they write."""

    def __init__(self, ctx: LaneContext, abort: Callable[[], None]) -> None:
        self.ctx = ctx
        self._abort = abort  # the lane gives its open interval up before a refusal is raised
        self.protocol: CommitProtocol | None = None  # the producers, see commit.py
        self.max_bytes: dict[str, int] = {}
        stamper = RecordStamper.of(policy_for(ctx.mirror), ctx.mirror.source, ctx.mirror.target)
        # identity policy only: skip records that came from the target, stamp provenance on the rest
        self.stamper: RecordStamper | None = stamper if stamper.uses_provenance else None
        self.errors: list[DeliveryError] = []
        self.interval: Interval = {}  # the open commit interval
        self.before_fatal: Callable[[], None] = lambda: None  # transactional calls of others end first
        self.open_keys: Callable[[], Iterable[PartitionKey]] = lambda: self.interval  # what a refusal lists

    # ---- the producers' life -------------------------------------------------------------------------------

    def open(self, protocol_class: type[CommitProtocol]) -> None:
        """Fresh producers; the protocol's start fences older copies of the lane (FIRST, see commit.py)."""
        ctx = self.ctx
        with talking_to("target", ctx.mirror.target, "starting the lane's producer"):
            self.max_bytes = target_max_message_bytes(ctx.target_conf, set(ctx.route.values()))
            make_producer = functools.partial(new_producer, ctx.config, ctx.producer_conf, ctx.tid, self.max_bytes)
            self.protocol = protocol_class(make_producer, ctx.config.progressTopic)
            self.guarded(self.protocol.start)

    def take(self, kept: RecordWriter) -> None:
        """Continue with the producers of the lane's previous copier."""
        self.protocol, kept.protocol = kept.protocol, None
        self.max_bytes = kept.max_bytes

    def close(self) -> None:
        if self.protocol is not None:
            self.protocol.close()
        self.protocol = None

    def guarded(self, op: Callable, *args) -> None:
        """Fatal errors surface from flush()/poll()/init as exceptions, sometimes a bare SystemError: map fencing
        to LaneFenced and give the rest their KafkaError, so they can be classified."""
        try:
            op(*args)
        except (KafkaException, SystemError) as e:
            err = kafka_error(e) or self.fatal_error()
            if err is None:
                raise
            if is_fenced(err):
                raise LaneFenced() from e
            if isinstance(e, KafkaException):
                raise
            raise KafkaException(err) from e

    def fatal_error(self) -> KafkaError | None:
        self.before_fatal()  # the fence's transactional calls are not to overlap
        return self.protocol.fatal_error() if self.protocol is not None else None

    # ---- writing -------------------------------------------------------------------------------------------

    def write(self, msgs: list, on_source_error: Callable[[KafkaError, object], None]) -> None:
        """Produce `msgs` into the open interval (messages carrying a source error go to `on_source_error`)."""
        assert self.protocol is not None
        producer = self.protocol.producer
        interval, route, stamper, errors = self.interval, self.ctx.route, self.stamper, self.errors
        for m in msgs:
            err = m.error()
            if err is not None:
                on_source_error(err, m)
                continue
            key = (m.topic(), m.partition())
            off = m.offset()
            share = interval.get(key)
            if share is None:
                share = interval[key] = Share(off, key[0], key[1], errors)
            k, v, h = m.key(), m.value(), m.headers()
            ts_type, ts = m.timestamp()
            share.src_last = off
            if stamper is not None:
                if not stamper.should_copy(h, (key[0], key[1], off)):
                    continue  # came from the target: copying it back would loop; progress still advances
                h = stamper.headers_for(h)
            share.count += 1
            share.nbytes += (len(k) if k else 0) + (len(v) if v else 0)
            share.ts_sum += ts
            share.timestamps.append(ts)
            share.offsets.append(off)
            if share.ts_min < 0 or ts < share.ts_min:
                share.ts_min = ts
            while True:
                try:
                    producer.produce(route[key], value=v, key=k, partition=key[1], headers=h,
                                     timestamp=ts if ts_type != TIMESTAMP_NOT_AVAILABLE else 0, on_delivery=share)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    err = e.args[0]
                    if err.code() == KafkaError._FATAL:  # "Unable to produce message": the cause is behind it
                        err = self.fatal_error() or err
                    fault = classify(err)
                    if fault is Fault.FENCED:
                        raise LaneFenced() from e
                    if fault is Fault.TRANSIENT:
                        raise Unreachable("target", self.ctx.mirror.target, f"producing: {describe(err)}") from e
                    self._abort()
                    self.raise_refused(err, key[0], key[1], off)

    def take_interval(self) -> Interval:
        """The open interval, ended: a new one opens."""
        interval, self.interval = self.interval, {}
        return interval

    # ---- delivery reports and refusals -----------------------------------------------------------------------

    def on_progress_delivery(self, err: KafkaError | None, _msg) -> None:
        if err is not None:
            self.errors.append((err, "<progress>", -1, -1))

    def check_delivery(self) -> None:
        """Raise what the delivery reports served so far say went wrong: fencing, an outage, a refusal."""
        if not self.errors:
            return
        # a purged record only says its transaction went: another record's error, if any, is the cause
        err, topic, part, off = next((e for e in self.errors if e[0].code() not in PURGED), self.errors[0])
        self.errors.clear()
        if err.code() in (*PURGED, KafkaError._FATAL) or err.fatal():
            err = self.fatal_error() or err  # a fenced producer purges its queue: report the cause
        fault = classify(err)
        if fault is Fault.FENCED:
            raise LaneFenced()
        ctx = self.ctx
        if fault is Fault.TRANSIENT:  # the client's own retries ran out: start afresh from the last commit
            written = ctx.config.progressTopic if topic == "<progress>" else ctx.route.get((topic, part))
            batch = [ctx.route[k] for k in {*self.interval, *self.open_keys()} if k in ctx.route]
            self.raise_if_write_refused(err, sorted({*([written] if written else []), *batch}))
            what = ctx.config.progressTopic if topic == "<progress>" else f"{topic}/{part} offset {off}"
            raise Unreachable("target", ctx.mirror.target, f"delivering {what}: {describe(err)}") \
                from KafkaException(err)  # the error, for `answered`
        self._abort()
        if topic == "<progress>":
            kind = refusal_kind(err)
            if kind.refused:
                raise refused("target", ctx.mirror.target, kind,
                              f"writing progress to {ctx.config.progressTopic}: {describe(err)}")
            raise CopyError(f"mirror {ctx.mirror.name!r}: writing progress to {ctx.mirror.target}/"
                            f"{ctx.config.progressTopic} failed: {describe(err)}")
        self.raise_refused(err, topic, part, off)

    def commit_failed(self, e: KafkaException, recs: list[ProgressRecord]) -> None:
        """The commit can fail before the records' own delivery reports are served: theirs name the cause."""
        assert self.protocol is not None
        self.protocol.producer.poll(0)
        self.check_delivery()
        self.raise_if_write_refused(e.args[0], [rec.target_topic for rec in recs])
        raise e

    def raise_if_write_refused(self, err: KafkaError, written: list[str]) -> None:
        """ACLs: a refused AddPartitionsToTxn leaves only an invalid transaction state, which looks transient;
        the cluster is asked whether the mirror's principal may write the topics, so a refusal stops the mirror
        instead of being waited on."""
        if err.code() not in (KafkaError.INVALID_TXN_STATE, *PURGED) or not written:
            return
        topic = write_refused(self.ctx.target_conf, written)
        if topic is not None:
            self._abort()
            raise Refused("target", self.ctx.mirror.target, Kind.AUTHORIZATION,
                          f"mirror {self.ctx.mirror.name!r} may not write topic {topic!r} (TOPIC_AUTHORIZATION_FAILED: "
                          f"no WRITE permission for the mirror's principal); {describe(err)}")

    def raise_refused(self, err: KafkaError, topic: str, part: int, offset: int) -> None:
        mirror = self.ctx.mirror
        target = self.ctx.route.get((topic, part), "?")
        kind = refusal_kind(err)
        if kind.refused:  # the cluster refuses the mirror, not this record
            raise refused("target", mirror.target, kind, f"writing {mirror.target}/{target} (source "
                          f"{mirror.source}/{topic} partition {part} offset {offset}): {describe(err)}")
        extra = ""
        if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
            limit = self.max_bytes.get(target)
            extra = f" (target topic max.message.bytes={limit})" if limit else " (target max.message.bytes)"
        raise CopyError(f"mirror {mirror.name!r}: the target refused the record at source "
                        f"{mirror.source}/{topic} partition {part} offset {offset} -> "
                        f"{mirror.target}/{target}: {err.name()}: {err.str()}{extra}; "
                        f"the transaction was aborted and nothing after the last commit was skipped")
