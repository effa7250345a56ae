"""A WRITE refused by ACLs reaches a transactional producer only as an invalid transaction state, and either
the records' delivery reports or the commit itself can report it first (which one depends on timing). Both
orders must stop the lane with the refusal named, never wait on it as an outage (a CI run on a busy machine
waited 240 s). The protocol here fails on cue; the real refusal is tested on a secured cluster in
tests/job/test_security.py."""
from __future__ import annotations

import gc
import weakref

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying import writer
from sparkmirror.copying.errors import CopyError, Unreachable, talking_to
from sparkmirror.copying.lane import LaneCopy
from sparkmirror.copying.shares import Share
from sparkmirror.lanes import LanePartition
from sparkmirror.resource.flowgroup import FlowGroupConfig

INVALID = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", txn_requires_abort=True)


class _Producer:
    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


class _FailingCommit:
    """Commits by raising the error the client raises for a refused AddPartitionsToTxn."""

    def __init__(self) -> None:
        self.producer = _Producer()
        self.aborted = 0

    def commit(self, progress, on_delivery) -> None:
        raise KafkaException(INVALID)

    def abort(self) -> None:
        self.aborted += 1


def _copier() -> LaneCopy:
    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "clusters": [{"alias": "src", "bootstrapServers": "127.0.0.1:1"},
                                   {"alias": "tgt", "bootstrapServers": "127.0.0.1:2"}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": "t",
                     "emitCheckpoints": False}]})
    copier = LaneCopy(cfg, cfg.mirrors[0], 0, [LanePartition("t", 0, "src.t")])
    copier.writer.protocol = _FailingCommit()  # type: ignore[assignment]
    copier.writer.interval[("t", 0)] = Share(0, "t", 0, copier.writer.errors, src_last=4, count=5)
    return copier


def test_a_commit_refused_by_acls_stops_the_lane_naming_the_topic(monkeypatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(writer, "write_refused", lambda conf, topics: asked.extend(topics) or topics[0])
    copier = _copier()
    with pytest.raises(CopyError, match=r"refuses to let the mirror write topic 'src\.t'.*TOPIC_AUTHORIZATION"):
        copier.committer.commit_now()
    assert asked == ["src.t"] and copier.writer.protocol is not None and copier.writer.protocol.aborted == 1


def test_a_commit_failing_while_the_topic_is_writable_is_waited_out(monkeypatch) -> None:
    monkeypatch.setattr(writer, "write_refused", lambda conf, topics: None)
    with pytest.raises(Unreachable):
        with talking_to("target", "tgt", "copying"):
            _copier().committer.commit_now()


def test_the_records_delivery_error_is_reported_before_the_commits(monkeypatch) -> None:
    """When the records' own reports are waiting, they name the cause (here a record too large)."""
    monkeypatch.setattr(writer, "write_refused", lambda conf, topics: None)
    copier = _copier()
    copier.writer.errors.append((KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"), "t", 0, 3))
    with pytest.raises(CopyError, match=r"offset 3 -> tgt/src\.t: MSG_SIZE_TOO_LARGE"):
        copier.committer.commit_now()


def test_delivery_reports_are_matched_to_records_by_their_order_in_the_partition() -> None:
    """One bound callback serves every record of a partition: the n-th report is the n-th record produced, so an
    error names that record's source offset and successes give the target range."""
    class Msg:
        def __init__(self, offset: int) -> None:
            self._offset = offset

        def offset(self) -> int:
            return self._offset

    errors: list = []
    pend = Share(10, "t", 2, errors)
    pend.offsets += [10, 12, 15]  # source offsets with gaps (aborted records, markers)
    pend(None, Msg(40))  # the share is the callback: nothing made per record
    pend(None, Msg(41))
    pend(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"), Msg(-1))
    assert (pend.tgt_first, pend.tgt_last) == (40, 41)
    assert [(e.code(), t, p, o) for e, t, p, o in errors] == [(KafkaError.MSG_SIZE_TOO_LARGE, "t", 2, 15)]
    freed = weakref.ref(pend)
    gc.disable()
    try:
        del pend  # no cycle through itself: refcounting frees it, not a full collection
        assert freed() is None
    finally:
        gc.enable()
