"""What stops a lane, and how the Kafka client's errors are told apart.

Nothing is ever skipped silently: a record the target refuses (too large, unknown topic, not authorised)
aborts the open interval and raises a `CopyError` naming topic, partition, offset and reason. Being fenced
is no error: a newer copy of the lane took its transactional.id over, and this copy ends cleanly.
"""
from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

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


class Superseded(LaneFenced):
    """A later worker generation took this lane's flow group over (its generation mark is on the progress
    topic); this lane must not copy, whatever its transactional id."""


def kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError behind an exception; librdkafka's fatal errors can surface as a SystemError whose
    cause is the KafkaException (raised inside a delivery callback during flush/poll)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def is_fenced(err: KafkaError) -> bool:
    return err.code() in FENCED or (err.fatal() and "fenced" in err.str().lower())
