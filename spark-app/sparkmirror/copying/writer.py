"""A lane's target writer on the record path: where records are written. Each source record is produced to the
same partition of its remote topic (key, value, headers, timestamp kept; provenance headers stamped under the
identity policy) by the commit protocol's producer, into the open interval's share of its partition; delivery
reports fill the shares' target offsets, and a refused write is named (record, topic, the target's limit)."""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException

from ..replication import RecordStamper, policy_for
from ..transforms import RecordTransforms, TransformFailed, compiled
from .commit import CommitProtocol
from .context import LaneContext
from .errors import CopyError, Fault, LaneFenced, Unreachable, classify, describe, is_fenced, kafka_error, talking_to
from .shares import Share
from .start import new_producer, target_max_message_bytes
from .targetwriter import TargetWriter

log = logging.getLogger(__name__)


class RecordWriter(TargetWriter):
    """The lane's producers (its commit protocol, see commit.py) and the open interval they write."""

    def __init__(self, ctx: LaneContext, abort: Callable[[], None]) -> None:
        super().__init__(ctx, abort)
        stamper = RecordStamper.of(policy_for(ctx.mirror), ctx.mirror.source, ctx.mirror.target)
        # identity policy only: skip records that came from the target, stamp provenance on the rest
        self.stamper: RecordStamper | None = stamper if stamper.uses_provenance else None
        # the mirror's record transforms (transforms.py): a dropped record is skipped like a loop
        self.transforms: RecordTransforms | None = compiled(ctx.mirror)

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

    def serve_reports(self) -> None:
        assert self.protocol is not None
        self.protocol.producer.poll(0)

    # ---- writing -------------------------------------------------------------------------------------------

    def write(self, msgs: list, on_source_error: Callable[[KafkaError, object], None]) -> None:
        """Produce `msgs` into the open interval (messages carrying a source error go to `on_source_error`)."""
        assert self.protocol is not None
        producer = self.protocol.producer
        interval, route, stamper, errors = self.interval, self.ctx.route, self.stamper, self.errors
        transforms = self.transforms
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
            if transforms is not None:
                not_json = transforms.counts.not_json
                try:
                    out = transforms.apply(key[0], key[1], off, ts, k, v, h)
                except TransformFailed as e:
                    self._abort()
                    raise CopyError(f"mirror {self.ctx.mirror.name}: {e}") from e
                if transforms.counts.not_json != not_json:
                    share.note({"not_json": 1})
                if out is None:
                    share.note({"dropped": 1})
                    continue  # dropped: progress still advances, the offset map counts it out (transforms.py)
                k, v, h = out
            if stamper is not None:
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

