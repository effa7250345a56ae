"""A WRITE refused by ACLs reaches a transactional producer only as an invalid transaction state, and either
the records' delivery reports or the commit itself can report it first (which one depends on timing). Both
orders must stop the lane with the refusal named, never wait on it as an outage (a CI run on a busy machine
waited 240 s). The commit fails on cue here (the order is what is forced); whether the topic is refused is asked
of a real broker with KRaft's authorizer (`secured_kafka`: user `limited` may not WRITE `a.denied-*`), never
patched. The whole job refused on a secured cluster: tests/job/test_security.py."""
from __future__ import annotations

import gc
import weakref

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying import targetwriter
from sparkmirror.copying.errors import CopyError, Refused, Unreachable, talking_to
from sparkmirror.copying.batchlane import BatchLaneCopy, lane_copy
from sparkmirror.copying.lane import LaneCopy
from sparkmirror.copying.shares import Share
from sparkmirror.faultkind import Kind
from sparkmirror.lanes import LanePartition
from sparkmirror.refusal import write_refused
from sparkmirror.resource.flowgroup import CopyPath, FlowGroupConfig
from sparkmirror_dev.testing import create_topic, unique_name

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


def _target(cluster, tmp_path, user: str) -> dict:
    """The secured cluster's SASL_SSL listener as `user` (SCRAM), the flow group's target entry."""
    pw = tmp_path / f"{user}.password"
    pw.write_text(cluster.security.scram_users[user])
    return {"alias": "tgt", "bootstrapServers": cluster.bootstrap_of("SASL_SSL"),
            "tls": {"caFiles": [str(cluster.security.ca.cert)]},
            "authentication": {"type": "scram-sha-512", "username": user, "password": {"file": str(pw)}}}


def _copier(target: dict | None = None, target_topic: str = "src.t") -> LaneCopy:
    cfg = FlowGroupConfig.model_validate({
        "name": "fg", "clusters": [{"alias": "src", "bootstrapServers": "127.0.0.1:1"},
                                   target or {"alias": "tgt", "bootstrapServers": "127.0.0.1:2"}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": "t",
                     "emitCheckpoints": False}]})
    copier = LaneCopy(cfg, cfg.mirrors[0], 0, [LanePartition("t", 0, target_topic)])
    copier.writer.protocol = _FailingCommit()  # type: ignore[assignment]
    copier.writer.interval[("t", 0)] = Share(0, "t", 0, copier.writer.errors, src_last=4, count=5)
    return copier


@pytest.fixture(scope="module")
def acl_topics(secured_kafka) -> tuple[str, str]:
    """(a topic `limited` may not WRITE, one it may), made through the admin door."""
    denied = create_topic(secured_kafka.bootstrap, "a.denied-" + unique_name("w"), 1)
    return denied, create_topic(secured_kafka.bootstrap, "a.allowed-" + unique_name("w"), 1)


@pytest.mark.kafka
def test_the_cluster_says_which_topic_the_principal_may_not_write(secured_kafka, acl_topics, tmp_path) -> None:
    denied, allowed = acl_topics
    limited = _copier(_target(secured_kafka, tmp_path, "limited")).ctx.target_conf
    mirror = _copier(_target(secured_kafka, tmp_path, "mirror")).ctx.target_conf
    assert write_refused(limited, [allowed, denied]) == denied
    assert write_refused(limited, [allowed]) is None
    assert write_refused(mirror, [denied, allowed]) is None  # the ACL is the principal's, not the topic's
    assert write_refused({"bootstrap.servers": "127.0.0.1:1"}, [denied], timeout=1.0) is None  # no answer: an outage


@pytest.mark.kafka
def test_a_commit_refused_by_acls_stops_the_lane_naming_the_topic(secured_kafka, acl_topics, tmp_path) -> None:
    denied, _ = acl_topics
    copier = _copier(_target(secured_kafka, tmp_path, "limited"), denied)
    with pytest.raises(Refused, match=rf"'tgt' refuses the mirror: authorization refused \(AuthorizationFailed\): "
                                      rf"mirror '[^']+' may not write topic '{denied}'.*TOPIC_AUTHORIZATION") as e:
        copier.committer.commit_now()
    assert e.value.kind is Kind.AUTHORIZATION and e.value.cluster == "tgt"
    assert copier.writer.protocol is not None and copier.writer.protocol.aborted == 1


@pytest.mark.kafka
def test_a_commit_failing_while_the_topic_is_writable_is_waited_out(secured_kafka, acl_topics, tmp_path) -> None:
    _, allowed = acl_topics
    with pytest.raises(Unreachable):
        with talking_to("target", "tgt", "copying"):
            _copier(_target(secured_kafka, tmp_path, "limited"), allowed).committer.commit_now()


def test_the_records_delivery_error_is_reported_before_the_commits(monkeypatch) -> None:
    """When the records' own reports are waiting, they name the cause (here a record too large). The topic check
    answers "writable" here (it has its own tests above): what is checked is which report names the cause."""
    monkeypatch.setattr(targetwriter, "write_refused", lambda conf, topics: None)
    copier = _copier()
    copier.writer.errors.append((KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"), "t", 0, 3))
    with pytest.raises(CopyError, match=r"offset 3 -> tgt/src\.t: MSG_SIZE_TOO_LARGE"):
        copier.committer.commit_now()


class _RefusedProgress(_FailingCommit):
    """Writes progress as at-least-once's fence does, its delivery report saying the target refused it."""

    def commit(self, progress, on_delivery) -> None:
        on_delivery(KafkaError(KafkaError.POLICY_VIOLATION, "refused by the topic's policy"), None)


@pytest.mark.parametrize("copy", ["records", "batches"])
def test_both_paths_tell_a_refused_progress_write_alike(copy: str) -> None:
    """The committer's delivery checks are one (targetwriter.py): on the batch path too a refused progress write
    ends the lane naming the progress topic, its open interval given up first."""
    copier = _copier()
    if copy == "batches":
        cfg = copier.config.model_copy(update={"copy_path": CopyPath.BATCHES})
        copier = lane_copy(cfg, cfg.mirrors[0], 0, [LanePartition("t", 0, "src.t")])
        assert isinstance(copier, BatchLaneCopy)
        copier.writer.interval[("t", 0)] = Share(0, "t", 0, copier.writer.errors, src_last=4, count=5)
    copier.writer.protocol = _RefusedProgress()  # type: ignore[assignment]
    with pytest.raises(CopyError, match=rf"writing progress to tgt/{copier.config.progressTopic} failed: "
                                        r"POLICY_VIOLATION"):
        copier.committer.commit_now()
    assert copier.writer.protocol.aborted == 1  # type: ignore[union-attr]


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
