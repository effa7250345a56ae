"""Which Kafka client errors a mirror waits out and which stop it; backoff and the one-line-per-change log."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying.errors import (CopyError, Fault, LaneFenced, Unreachable, answered, classify,
                                        talking_to, transient_reason)
from sparkmirror.outage import Backoff, Outage, Retrying
from sparkmirror.topicsync import TopicRecreated, TopicSyncError

E = KafkaError


@pytest.mark.parametrize("code", [
    E._TRANSPORT, E._MSG_TIMED_OUT, E._ALL_BROKERS_DOWN, E._TIMED_OUT, E.REQUEST_TIMED_OUT,
    E.NOT_LEADER_FOR_PARTITION, E.LEADER_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS, E.NETWORK_EXCEPTION, E._STATE,
])
def test_cluster_not_answering_is_waited_out(code: int) -> None:
    err = KafkaError(code)
    assert classify(err) is Fault.TRANSIENT
    assert transient_reason(KafkaException(err)) is not None


def test_client_flags_decide_unlisted_codes() -> None:
    assert classify(KafkaError(E.UNKNOWN, retriable=True)) is Fault.TRANSIENT
    assert classify(KafkaError(E.UNKNOWN, txn_requires_abort=True)) is Fault.TRANSIENT
    assert classify(KafkaError(E.OUT_OF_ORDER_SEQUENCE_NUMBER, fatal=True)) is Fault.TRANSIENT  # a new producer cures it
    assert classify(KafkaError(E.UNKNOWN)) is Fault.PERMANENT  # not understood: reported, not looped on


@pytest.mark.parametrize("code", [
    E.TOPIC_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    E.SASL_AUTHENTICATION_FAILED, E._AUTHENTICATION, E.MSG_SIZE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE,
    E.INVALID_CONFIG, E.POLICY_VIOLATION, E.UNKNOWN_TOPIC_OR_PART, E._UNKNOWN_TOPIC,
])
def test_clusters_saying_no_stop_the_mirror(code: int) -> None:
    assert classify(KafkaError(code, retriable=True)) is Fault.PERMANENT  # even when the client would retry
    if code in (E.SASL_AUTHENTICATION_FAILED, E._AUTHENTICATION):  # waited on for the credentials' grace first
        assert "AuthenticationFailed" in (transient_reason(KafkaException(KafkaError(code))) or "")
    else:
        assert transient_reason(KafkaException(KafkaError(code))) is None


@pytest.mark.parametrize("code", [E._FENCED, E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH])
def test_fencing_is_its_own_kind(code: int) -> None:
    assert classify(KafkaError(code, fatal=True)) is Fault.FENCED


def test_a_silence_is_told_from_an_answer() -> None:
    """A lane asks the coordinator whether it was fenced only when the target answered (loop.py)."""
    def waited_out(code: int) -> Unreachable:
        try:
            with talking_to("target", "b", "copying"):
                raise KafkaException(KafkaError(code, txn_requires_abort=True))
        except Unreachable as e:
            return e
        raise AssertionError("not waited out")

    assert answered(waited_out(E.UNKNOWN))  # what a broker said to an EndTxn racing a newer copy's fencing
    assert answered(waited_out(E.CONCURRENT_TRANSACTIONS))
    assert not answered(waited_out(E._MSG_TIMED_OUT))
    assert not answered(waited_out(E._TRANSPORT))
    assert not answered(TimeoutError())


def test_causes_and_timeouts_are_followed() -> None:
    try:
        try:
            raise KafkaException(KafkaError(E._TRANSPORT, "Connection refused"))
        except KafkaException as e:
            raise TopicSyncError("mirrors[m].source: cluster 'a' is unreachable") from e
    except TopicSyncError as wrapped:
        assert transient_reason(wrapped) == "_TRANSPORT: Connection refused"
    assert transient_reason(TimeoutError()) == "timed out"
    assert transient_reason(TopicRecreated("topic recreated")) is None  # a policy stop, no cluster fault
    assert transient_reason(RuntimeError("progress topic is not compacted")) is None


def test_talking_to_names_the_side_and_cluster() -> None:
    with pytest.raises(Unreachable) as u:
        with talking_to("target", "b", "reading progress"):
            raise KafkaException(KafkaError(E._TIMED_OUT, "Timed out"))
    assert (u.value.side, u.value.cluster, u.value.what) == ("target", "b", "target cluster 'b'")
    assert "reading progress: _TIMED_OUT" in u.value.reason
    with pytest.raises(CopyError, match=r"source cluster 'a' refuses the mirror: authorization refused "
                                        r"\(AuthorizationFailed\): reading offsets: TOPIC_AUTHORIZATION_FAILED"):
        with talking_to("source", "a", "reading offsets"):
            raise KafkaException(KafkaError(E.TOPIC_AUTHORIZATION_FAILED))
    with pytest.raises(CopyError, match=r"target cluster 'b': writing failed: MSG_SIZE_TOO_LARGE"):
        with talking_to("target", "b", "writing"):
            raise KafkaException(KafkaError(E.MSG_SIZE_TOO_LARGE))
    with pytest.raises(KafkaException):  # fencing passes through, for the lane to map to LaneFenced
        with talking_to("target", "b", "init"):
            raise KafkaException(KafkaError(E._FENCED, fatal=True))
    with pytest.raises(LaneFenced):
        with talking_to("target", "b", "init"):
            raise LaneFenced()


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(first=0.5, cap=4.0, jitter=0.0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5
    jittered = Backoff(first=1.0, cap=1.0, jitter=0.2)
    assert all(1.0 <= jittered.next() <= 1.2 for _ in range(50))


def test_outage_says_each_change_once() -> None:
    o = Outage("mirror 'm'")
    first = o.failed("target", "target cluster 'b'", "_TRANSPORT", now=1000.0)
    assert first is not None and first.startswith("mirror 'm': target cluster 'b' unreachable since ")
    assert first.endswith("(_TRANSPORT), retrying")
    assert o.failed("target", "target cluster 'b'", "_MSG_TIMED_OUT", now=1010.0) is None  # a retry: no line
    assert o.waiting == "target cluster 'b' unreachable" and o.since == 1000.0
    assert o.answered("source", now=1050.0) is None  # was never down
    assert o.answered("target", now=1083.0) == "mirror 'm': target cluster 'b' reachable again after 83 s"
    assert o.answered("target", now=1090.0) is None and o.waiting is None and o.since is None


def test_retrying_keeps_transient_failures_and_raises_the_rest(caplog) -> None:
    calls: list[str] = []
    r = Retrying("mirror 'm' topic management", "a cluster", transient_reason, Backoff(first=0.0, jitter=0.0))

    def down() -> None:
        calls.append("down")
        raise KafkaException(KafkaError(E._ALL_BROKERS_DOWN, "1/1 brokers are down"))

    with caplog.at_level("WARNING", logger="sparkmirror.outage"):
        assert r(down) is False and r(down) is False
        assert r(lambda: calls.append("up")) is True
    assert calls == ["down", "down", "up"]
    said = [rec.getMessage() for rec in caplog.records]
    assert len(said) == 2 and "unreachable since" in said[0] and "reachable again after" in said[1]
    with pytest.raises(TopicRecreated):
        r(lambda: (_ for _ in ()).throw(TopicRecreated("recreated")))
