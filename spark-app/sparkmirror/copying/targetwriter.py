"""What a lane's target writer is to the committer, on either copy path: the open interval, the commit protocol,
and the delivery reports the commit depends on. The record path's writer (writer.py) and the batch path's
(batchtarget.py) both write into shares and commit through `IntervalCommitter`, so what went wrong with a
delivery (fencing, an outage, a refusal) is told here once, for both."""
from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException

from ..faultkind import Kind
from ..progress import ProgressRecord
from ..refusal import write_refused
from .commit import CommitProtocol
from .context import LaneContext
from .errors import CopyError, Fault, LaneFenced, Refused, Unreachable, classify, describe, refusal_kind, refused
from .shares import DeliveryError, Interval, PartitionKey

PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)  # records dropped with their transaction


class TargetWriter:
    """The lane's commit protocol, the open interval it writes, and the delivery reports served so far."""

    protocol: CommitProtocol | None

    def __init__(self, ctx: LaneContext, abort: Callable[[], None]) -> None:
        self.ctx = ctx
        self._abort = abort  # the lane gives its open interval up before a refusal is raised
        self.protocol = None
        self.max_bytes: dict[str, int] = {}
        self.errors: list[DeliveryError] = []
        self.interval: Interval = {}  # the open commit interval
        self.before_fatal: Callable[[], None] = lambda: None  # transactional calls of others end first
        self.open_keys: Callable[[], Iterable[PartitionKey]] = lambda: self.interval  # what a refusal lists

    def taken_over(self) -> bool:
        """Whether another copy of the lane took its transactional id since its clients closed; the record
        path's librdkafka cannot ask (the progress check in lane.py is its answer)."""
        return False

    def take_interval(self) -> Interval:
        """The open interval, ended: a new one opens."""
        interval, self.interval = self.interval, {}
        return interval

    def fatal_error(self) -> KafkaError | None:
        self.before_fatal()  # the fence's transactional calls are not to overlap
        return self.protocol.fatal_error() if self.protocol is not None else None

    def serve_reports(self) -> None:
        """Serve the delivery reports the records' producer holds (none where nothing reports by callback)."""

    # ---- the committer's calls -------------------------------------------------------------------------------

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
        self.serve_reports()
        self.check_delivery()
        self.raise_if_write_refused(e.args[0], [rec.target_topic for rec in recs])
        raise e

    # ---- refusals ------------------------------------------------------------------------------------------

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
        """A record's delivery refused: the mirror stops, naming the record and where it was going."""
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
