"""What stops a lane, what it waits out, and how the Kafka client's errors are told apart.

Three kinds of fault (`classify`):
- FENCED: a newer copy of the lane took its transactional.id over; this copy ends cleanly (`LaneFenced`).
- TRANSIENT: a cluster did not answer (broker down or restarting, leader moving, request timed out). The
  Kafka client reports most of these with `retriable()` False (`_TRANSPORT`, `_ALL_BROKERS_DOWN`,
  `_MSG_TIMED_OUT`, ...), so the flag alone would end the mirror on every outage; they are listed here. A lane
  aborts its open transaction, starts afresh from the progress topic and retries with backoff; the driver keeps
  its last routes. Nothing ends the mirror for an outage of minutes.
- PERMANENT: the clusters answer and say no (authorization, authentication, a record too large, an invalid
  config, an unknown topic, a policy). Nothing is ever skipped silently: the mirror stops with a `CopyError`
  naming cluster, topic, partition and offset.

A refusal (`faultkind`: authentication, authorization, TLS handshake; told by code in `refusal.kind_of`) is a
`Refused` naming the cluster and the kind. Authentication and TLS refusals are first waited on as outages for
the credentials' grace (`credentials.RefusalGrace`, per cluster in this process: a Secret being rotated reaches
the broker and the mounted file apart); a call to the cluster that works starts a later refusal's grace anew.

Unlisted codes follow the client: retriable, abortable or fatal-but-not-fenced (a fresh producer cures it)
is TRANSIENT; anything else is PERMANENT, so an error nobody understands is reported, not looped on.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

from confluent_kafka import KafkaError, KafkaException

from ..credentials import RefusalGrace
from ..faultkind import Kind, refusal_text
from ..kafkaerror import kafka_error
from ..refusal import kind_of

E = KafkaError

FENCED = {E._FENCED, E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED}

PERMANENT = {
    # authorization and authentication
    E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
    E.SASL_AUTHENTICATION_FAILED, E._AUTHENTICATION, E.UNSUPPORTED_SASL_MECHANISM, E.ILLEGAL_SASL_STATE,
    E.SECURITY_DISABLED, E.UNACCEPTABLE_CREDENTIAL,
    # the target will never take this record
    E.MSG_SIZE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_RECORD, E.INVALID_MSG_SIZE, E.INVALID_TIMESTAMP,
    E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_COMPRESSION_TYPE, E.POLICY_VIOLATION,
    # configuration and versions
    E.INVALID_CONFIG, E._INVALID_ARG, E.INVALID_REQUIRED_ACKS, E.INVALID_TRANSACTION_TIMEOUT,
    E.UNSUPPORTED_VERSION, E._UNSUPPORTED_FEATURE, E._NOT_IMPLEMENTED, E.INVALID_REPLICATION_FACTOR,
    E.TOPIC_EXCEPTION,
    # topics that are not there (deleted mid-copy: the gap policy's business, never a silent retry)
    E.UNKNOWN_TOPIC_OR_PART, E._UNKNOWN_TOPIC, E._UNKNOWN_PARTITION, E.UNKNOWN_TOPIC_ID,
    E.TOPIC_DELETION_DISABLED,
}

NO_ANSWER = {
    E._TRANSPORT, E._ALL_BROKERS_DOWN, E._RESOLVE, E._MSG_TIMED_OUT, E._TIMED_OUT, E._TIMED_OUT_QUEUE,
    E.REQUEST_TIMED_OUT, E.NETWORK_EXCEPTION, E.BROKER_NOT_AVAILABLE, E._DESTROY_BROKER, E._NODE_UPDATE,
    E._SSL,  # a handshake cut short by a restarting broker; one OpenSSL refused is a refusal (`refusal_kind`)
}
"""The cluster did not answer: every other transient fault is an answer (see `answered`)."""

TRANSIENT = NO_ANSWER | {
    # leaders and replicas moving
    E.NOT_LEADER_FOR_PARTITION, E.LEADER_NOT_AVAILABLE, E.REPLICA_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.PREFERRED_LEADER_NOT_AVAILABLE, E.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH, E.OFFSET_NOT_AVAILABLE, E.KAFKA_STORAGE_ERROR,
    E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH, E.NOT_CONTROLLER, E.THROTTLING_QUOTA_EXCEEDED,
    # coordinators and transactions in between states
    E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E._WAIT_COORD,
    E.CONCURRENT_TRANSACTIONS, E.TRANSACTION_ABORTABLE, E._STATE, E._PURGE_QUEUE, E._PURGE_INFLIGHT,
    E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.UNKNOWN_PRODUCER_ID, E.INVALID_PRODUCER_ID_MAPPING, E._PREV_IN_PROGRESS,
}


def refusal_kind(err: KafkaError) -> Kind:
    """The kind of refusal `err` is (`Kind.TRANSIENT` when it is none): by code, `refusal.kind_of`."""
    return kind_of(err)


class Fault(Enum):
    FENCED = "fenced"
    TRANSIENT = "transient"
    PERMANENT = "permanent"


def classify(err: KafkaError) -> Fault:
    """What a Kafka client error means for the mirror (see the module doc)."""
    code = err.code()
    if code in FENCED or (err.fatal() and "fenced" in err.str().lower()):
        return Fault.FENCED
    if code in PERMANENT or refusal_kind(err).refused:
        return Fault.PERMANENT
    if code in TRANSIENT or err.retriable() or err.txn_requires_abort() or (err.fatal() and code != E._FATAL):
        return Fault.TRANSIENT
    return Fault.PERMANENT


class CopyError(RuntimeError):
    """The mirror cannot continue without losing data; the message says where and why."""


class SourceGapError(CopyError):
    """The source no longer holds offsets that were never mirrored (retention, truncation, topic recreated)."""


class CorruptBatch(CopyError):
    """A source batch whose CRC32C does not match its bytes (the batch path: fetch after fetch): nothing from it
    on is copied."""


class LaneFenced(Exception):
    """A newer copy of this lane took over (same transactional.id); this copy must stop."""


class Superseded(LaneFenced):
    """A later worker generation took this lane's flow group over (its generation mark is on the progress
    topic); this lane must not copy, whatever its transactional id."""


class Refused(CopyError):
    """A cluster refuses the mirror: `kind` says how (authentication, authorization, TLS handshake)."""

    def __init__(self, side: str, cluster: str, kind: Kind, detail: str) -> None:
        super().__init__(refusal_text(side, cluster, kind, detail))
        self.side, self.cluster, self.kind = side, cluster, kind


class Unreachable(Exception):
    """A cluster did not answer in time: wait and retry, never stop. `side` is 'source' or 'target'."""

    def __init__(self, side: str, cluster: str, reason: str) -> None:
        super().__init__(f"{side} cluster {cluster!r} unreachable: {reason}")
        self.side, self.cluster, self.reason = side, cluster, reason

    @property
    def what(self) -> str:
        """The thing waited for, as log lines and the `run` display name it."""
        return f"{self.side} cluster {self.cluster!r}"


def is_fenced(err: KafkaError) -> bool:
    return classify(err) is Fault.FENCED


def describe(err: KafkaError) -> str:
    return f"{err.name()}: {err.str()}"


def transient_reason(exc: BaseException) -> str | None:
    """Why `exc` is worth waiting out (a cluster that did not answer), or None when it is not: a timed-out
    request, or a Kafka error classified TRANSIENT anywhere in its chain of causes. A refusal new credentials
    could cure (authentication, TLS) is waited out too: its caller's grace decides when it stands (a lane's
    `talking_to`, topic management's `TopicSync.check_refusals`); one that could not (authorization) is not."""
    if isinstance(exc, Unreachable):
        return exc.reason
    err = kafka_error(exc)
    if err is not None:
        kind = refusal_kind(err)
        if kind.rotatable:
            return f"{kind.words} ({kind.value}): {describe(err)}"
        return describe(err) if classify(err) is Fault.TRANSIENT else None
    if isinstance(exc, TimeoutError):  # concurrent.futures' too (an admin request's result), since Python 3.11
        return f"timed out ({exc})" if str(exc) else "timed out"
    return None


def answered(exc: BaseException) -> bool:
    """The cluster answered the request that failed with `exc` (a Kafka error other than a silence): a producer
    can then ask it at once whether a newer copy of the lane fenced it (loop.py, `_probe_fenced`)."""
    err = kafka_error(exc)
    return err is not None and err.code() not in NO_ANSWER


_GRACE: RefusalGrace | None = None


def refused(side: str, cluster: str, kind: Kind, detail: str) -> Exception:
    """What to raise for a refusal of `cluster`: `Unreachable` (waited out) while the credentials' grace lasts
    for a kind new credentials could cure, else `Refused` (the mirror ends, naming the cluster and the kind)."""
    global _GRACE
    if kind.rotatable:
        if _GRACE is None:
            _GRACE = RefusalGrace()
        left = _GRACE.refused_as(cluster)
        if left is not None:
            return Unreachable(side, cluster, f"{kind.words} ({kind.value}): {detail}; waited on for up to "
                                              f"{left:.0f} s more, as credentials being rotated are")
    return Refused(side, cluster, kind, detail)


def accepted(cluster: str) -> None:
    """`cluster` answered a call: a later refusal of it gets a grace of its own."""
    if _GRACE is not None:
        _GRACE.accepted(cluster)


@contextmanager
def talking_to(side: str, cluster: str, what: str) -> Iterator[None]:
    """Run I/O against one cluster: a transient fault becomes `Unreachable(side, cluster)`, a permanent Kafka
    error a `CopyError` that names the cluster and `what` was being done (fencing passes through)."""
    try:
        yield
    except (KafkaException, SystemError, TimeoutError) as e:
        err = kafka_error(e)
        kind = refusal_kind(err) if err is not None else Kind.TRANSIENT
        if kind.refused:
            raise refused(side, cluster, kind, f"{what}: {describe(err)}") from e
        reason = transient_reason(e)
        if reason is not None:
            raise Unreachable(side, cluster, f"{what}: {reason}") from e
        if err is None or classify(err) is Fault.FENCED:
            raise
        raise CopyError(f"{side} cluster {cluster!r}: {what} failed: {describe(err)}") from e
    accepted(cluster)
