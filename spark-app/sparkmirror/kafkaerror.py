"""The KafkaError behind an exception raised by a librdkafka client, its code and its text: one reading for every
confluent-kafka client the job uses (the record path's lanes, topic management, ACL sync, share-group configs).

librdkafka's fatal errors can surface as a SystemError whose cause is the KafkaException (raised inside a delivery
callback during flush or poll), so the cause chain is followed a few links.
"""
from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException


def kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError behind `exc` or its causes; None when there is none."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def error_code(exc: BaseException) -> int | None:
    """The Kafka (or librdkafka's local, negative) error code behind `exc`; None when it carries none."""
    err = kafka_error(exc)
    return err.code() if err is not None else None


def error_text(exc: BaseException) -> str:
    """What the error says: librdkafka's text of its code and message, else the exception's own (or its type)."""
    err = kafka_error(exc)
    return err.str() if err is not None else (str(exc) or type(exc).__name__)
