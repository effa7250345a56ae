"""A batch lane's target writer: where batches are written. Each source partition's fetched batches go to the
same partition of its remote topic, as bytes, through the commit protocol's producer on the wire
(batchcommit.py, batchwriter.py); a batch that cannot go as it is is rebuilt first (rebuild.py), counted per
reason. A `TargetWriter` (targetwriter.py) as writer.py's `RecordWriter` is: the open interval's shares are
filled from the produce results (the target offsets every batch got), so the ledger writes the same offset map
as on the record path. A refused write is named (partition, source offset, the target's limit)."""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import kafka.errors as kerrors
from confluent_kafka import KafkaException

from .batchcommit import BatchAtLeastOnce, BatchExactlyOnce, BatchProtocol
from .batchwriter import PartitionRefused
from .batches import Batch, BatchFormatError, Unforwardable
from .batchreader import Fetched
from .coalesce import COALESCE_BELOW, COALESCE_INTO, merge, runs
from .context import LaneContext
from .errors import CopyError, CorruptBatch, LaneFenced, is_fenced, kafka_error
from .forwarding import first_not_as_is, tally
from .rebuild import UndecodableBatch, rebuild
from .shares import PartitionKey, Share
from .start import new_producer, target_max_message_bytes
from .targetwriter import TargetWriter
from .transformbatch import TRANSFORMED, transform_batch
from .txnholder import taken_over
from ..transforms import TransformFailed, compiled
from ..wire.cluster import Wire
from .wiretalk import wire_talk

log = logging.getLogger(__name__)
TOO_LARGE = (kerrors.MessageSizeTooLargeError, kerrors.RecordListTooLargeError)
Planned = tuple[Batch | None, int, int, "str | None", int]
"""A batch to produce (None: every record of it dropped by the mirror's transforms; its offsets still count), its
records' first and last source offsets, why it was rebuilt (None: as fetched), and how many source batches it
holds."""
COALESCED = "coalesced"  # the rebuilt-batches label of small source batches merged (coalesce.py)


def _as_they_are(plan: list[Planned] | list[Batch]) -> bool:
    """A partition's plan that is its fetched batches, each as it is (`BatchTarget._planned`)."""
    return bool(plan) and isinstance(plan[0], Batch)


def _source_first(plan: list[Planned] | list[Batch]) -> int:
    return plan[0].base_offset if _as_they_are(plan) else plan[0][1]  # type: ignore[union-attr,index]


def _refused_offset(plan: list[Planned] | list[Batch], batch: int) -> int:
    """The source offset where the `batch`-th batch written of a partition's plan starts (the writer's count of
    what it sent; a planned entry the transforms emptied was not sent), the plan's first when not known."""
    sent = [b.base_offset for b in plan] if _as_they_are(plan) else [  # type: ignore[union-attr]
        first for b, first, _, _, _ in plan if b is not None]  # type: ignore[misc]
    return sent[batch] if 0 <= batch < len(sent) else _source_first(plan)


class BatchTarget(TargetWriter):
    """The lane's connections to its target, its commit protocol, and the open interval they write. Batches
    raise where they fail; only at-least-once's progress fence reports through callbacks (targetwriter.py)."""

    protocol: BatchExactlyOnce | BatchAtLeastOnce | None  # type: ignore[assignment]

    def __init__(self, ctx: LaneContext, abort: Callable[[], None]) -> None:
        super().__init__(ctx, abort)
        self.wire: Wire | None = None
        self.forwarded = 0  # batches that went as they were fetched
        self.rebuilt: Counter[str] = Counter()  # batches rebuilt, per `Unforwardable.label`
        self.transforms = compiled(ctx.mirror)  # the mirror's record transforms (transformbatch.py), if any
        self._notes: dict[PartitionKey, dict[str, int]] = {}  # what they dropped / found not JSON, for the shares
        self._held: tuple[int, int] | None = None  # the lane's producer id and epoch when its clients last closed

    def _talk(self, what: str):
        return wire_talk("target", self.ctx.mirror.target, what)

    # ---- the producer's life -------------------------------------------------------------------------------

    def open(self, protocol_class: BatchProtocol) -> None:
        """Connections and the commit protocol; its start fences older copies of the lane (FIRST, lane.py)."""
        ctx = self.ctx
        with self._talk("starting the lane's producer"):
            self.max_bytes = target_max_message_bytes(ctx.target_conf, set(ctx.route.values()))
            self.wire = Wire(ctx.target_conf, client_id=ctx.tid)

            def make_fence():
                return new_producer(ctx.config, ctx.target_conf, ctx.tid, self.max_bytes, True)

            self.protocol = protocol_class(self.wire, ctx.tid, ctx.config.progressTopic,
                                           ctx.config.transactionTimeoutMs, make_fence)
        self.guarded(self.protocol.start)
        self._held = None

    def taken_over(self) -> bool:
        """Whether another copy of the lane took its transactional id since this lane's clients closed
        (txnholder.py): asked before a start that follows a fault, which would fence that copy."""
        if self._held is None:
            return False
        with self._talk("asking who holds the lane's transactional id"):
            wire = Wire(self.ctx.target_conf, client_id=self.ctx.tid)
            try:
                return taken_over(wire, self.ctx.tid, *self._held)
            finally:
                wire.close()

    def take(self, kept: BatchTarget) -> None:
        self.wire, kept.wire = kept.wire, None
        self.protocol, kept.protocol = kept.protocol, None
        self.max_bytes = kept.max_bytes
        self.forwarded, self.rebuilt = kept.forwarded, kept.rebuilt

    def close(self) -> None:
        if self.protocol is not None:
            writer = self.protocol.producer
            if writer.transactional and writer.producer_id >= 0:
                self._held = (writer.producer_id, writer.epoch)
            self.protocol.close()
        if self.wire is not None:
            self.wire.close()
        self.protocol = self.wire = None

    def guarded(self, op: Callable, *args) -> None:
        """The target's errors named: fencing is `LaneFenced`, silence `Unreachable`, a refusal `CopyError`
        (the progress fence of at-least-once is librdkafka's: mapped as writer.py maps it)."""
        try:
            with self._talk("copying"):
                op(*args)
        except (KafkaException, SystemError) as e:
            err = kafka_error(e) or (self.protocol.fatal_error() if self.protocol is not None else None)
            if err is None:
                raise
            if is_fenced(err):
                raise LaneFenced() from e
            if isinstance(e, KafkaException):
                raise
            raise KafkaException(err) from e

    # ---- writing -------------------------------------------------------------------------------------------

    def _forwardable(self, f: Fetched, limit: int, key: PartitionKey = ("", -1)) -> list[Planned] | list[Batch]:
        """What to produce of a partition's fetch: small uncompressed batches merged into batches of up to
        `limit` bytes (coalesce.py), the batches that cannot go as they are rebuilt, the others as they are. A
        batch to rebuild or transform whose records cannot be read ends the copy, the open interval given up.
        A fetch whose every batch goes as it is (none to rebuild or merge: a compressed topic's) is its own plan,
        the batches themselves, checked in one call (forwarding.py)."""
        try:
            if self.transforms is not None:
                return self._transformed(f, key)
            return self._planned(f, limit, key)
        except UndecodableBatch as e:  # a permanent fault of the source's data
            self._abort()
            mirror = self.ctx.mirror
            raise CorruptBatch(f"mirror {mirror.name!r}: source cluster {mirror.source!r}: {key[0]}[{key[1]}] {e}; "
                               f"nothing from offset {e.offset} on was copied") from e

    def _planned(self, f: Fetched, limit: int, key: PartitionKey) -> list[Planned] | list[Batch]:
        """The plan of a mirror without transforms: merged, rebuilt or as it is, batch by batch."""
        rest = f.batches
        if rest and rest[0].base_offset >= f.fetch_offset and first_not_as_is(rest, COALESCE_BELOW) < 0:
            self.forwarded += len(rest)
            return rest
        out: list[Planned] = []
        groups = []
        if rest and rest[0].base_offset < f.fetch_offset:  # a resume inside it: rebuilt, alone
            rest, groups = rest[1:], [([rest[0]], Unforwardable.STARTS_BEFORE)]
        for group, why in groups + runs(rest, limit):
            b = group[0]
            if len(group) > 1:
                try:
                    out.append((merge(group), b.base_offset, group[-1].last_offset, COALESCED, len(group)))
                except BatchFormatError as e:  # batches the source took, and whose CRCs hold: the target judges
                    log.warning("lane %s: %s[%d] %s; forwarded one by one", self.ctx.tid, key[0], key[1], e)
                    for one in group:
                        self._as_it_is(one, None, f.fetch_offset, out)
                    continue
                self.rebuilt[COALESCED] += len(group)
                continue
            self._as_it_is(b, why, f.fetch_offset, out)
        return out

    def _as_it_is(self, b: Batch, why: Unforwardable | None, fetch_offset: int, out: list[Planned]) -> None:
        """One batch no transform changed: forwarded as fetched, or rebuilt for `why` (left out when nothing of it
        is to be copied), counted either way."""
        if why is None:
            out.append((b, b.base_offset, b.last_offset, None, 1))
            self.forwarded += 1
            return
        made = rebuild(b, fetch_offset)
        self.rebuilt[why.label] += 1
        if made is not None:
            out.append((made.batch, made.source_first, made.source_last, why.label, 1))

    def _transformed(self, f: Fetched, key: PartitionKey) -> list[Planned]:
        """A mirror with transforms: each batch through them (no merging); a batch they leave as it was goes as
        fetched (or rebuilt for its own reason), a touched one rebuilt from what they made, an emptied one left
        out with its offsets."""
        out: list[Planned] = []
        topic, part = key
        chain = self.transforms
        assert chain is not None
        note = self._notes.setdefault(key, {"dropped": 0, "not_json": 0})
        for b in f.batches:
            not_json = chain.counts.not_json
            try:
                t = transform_batch(b, chain, topic, part, f.fetch_offset)
            except TransformFailed as e:
                self._abort()
                raise CopyError(f"mirror {self.ctx.mirror.name}: {e}") from e
            note["dropped"] += t.dropped
            note["not_json"] += chain.counts.not_json - not_json
            if t.touched:
                self.rebuilt[TRANSFORMED] += 1
                out.append((t.batch, t.source_first, t.source_last, TRANSFORMED, 1))
                continue
            self._as_it_is(b, b.unforwardable(), f.fetch_offset, out)
        return out

    def write(self, fetched: dict[PartitionKey, Fetched]) -> None:
        """Produce the fetched batches into the open interval, each to its remote topic's same partition."""
        assert self.protocol is not None
        route, plan = self.ctx.route, {}  # per source partition: its Planned, or its batches as they are
        for key, f in fetched.items():
            if f.batches:
                limit = min(COALESCE_INTO, self.max_bytes.get(route[key]) or COALESCE_INTO)
                plan[key] = self._forwardable(f, limit, key)
        if not plan:
            return
        to_target = {(route[k], k[1]): batches for k, v in plan.items()
                     if (batches := v if _as_they_are(v) else [b for b, _, _, _, _ in v if b is not None])}
        written = {}
        if to_target:
            try:
                with self._talk("producing"):
                    written = self.protocol.producer.produce(to_target)
            except CopyError as e:
                self._refused(e, plan)
                raise
        interval, errors = self.interval, self.errors
        for key, sent in plan.items():
            if not sent:
                continue
            share = interval.get(key)
            if share is None:
                share = interval[key] = Share(_source_first(sent), key[0], key[1], errors)
            if key in self._notes:
                share.note(self._notes.pop(key))
            if _as_they_are(sent):  # every batch as it is (`_planned`)
                share.batches += len(sent)
                share.src_last = sent[-1].last_offset
                n, nbytes, ts_sum, share.ts_min, first, share.tgt_last = tally(
                    sent, written[(route[key], key[1])], share.timestamps, share.ts_min)
                share.count += n
                share.reports += n  # acknowledged: produce returned
                share.nbytes += nbytes
                share.ts_sum += ts_sum
                if share.tgt_first < 0:
                    share.tgt_first = first
                continue
            results = iter(written.get((route[key], key[1]), ()))
            for b, first, last, why, sources in sent:
                if why is None:
                    share.batches += 1
                else:
                    share.rebuilt = share.rebuilt or {}
                    share.rebuilt[why] = share.rebuilt.get(why, 0) + sources
                share.src_last = last
                if b is None:  # every record dropped by the transforms: the offsets count, nothing is written
                    continue
                base = next(results)
                n = b.record_count
                share.count += n
                share.reports += n  # acknowledged: produce returned
                share.nbytes += len(b.raw)
                ts = b.max_timestamp
                share.ts_sum += n * ts
                share.timestamps += [ts] * n
                if share.ts_min < 0 or b.base_timestamp < share.ts_min:
                    share.ts_min = b.base_timestamp
                if share.tgt_first < 0:
                    share.tgt_first = base
                share.tgt_last = base + n - 1

    def _refused(self, e: CopyError, plan: dict[PartitionKey, list[Planned] | list[Batch]]) -> None:
        """A refusal names what was refused; the open interval is given up first."""
        self._abort()
        cause = e.__cause__
        if isinstance(cause, PartitionRefused) and issubclass(cause.error, TOO_LARGE):
            route = self.ctx.route
            key = next((k for k in plan if (route.get(k), k[1]) == cause.partition), next(iter(plan)))
            target = route.get(key, "?")
            limit = self.max_bytes.get(target)
            mirror = self.ctx.mirror
            raise CopyError(f"mirror {mirror.name!r}: the target refused the record batch at source "
                            f"{mirror.source}/{key[0]} partition {key[1]} offset "
                            f"{_refused_offset(plan[key], cause.batch)} -> "
                            f"{mirror.target}/{target}: {cause}" +
                            (f" (target topic max.message.bytes={limit})" if limit else "") +
                            "; the transaction was aborted and nothing after the last commit was skipped") from e

