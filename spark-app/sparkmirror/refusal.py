"""Telling a cluster that refuses a client (its credentials or certificates) from one that does not answer.

librdkafka reports a refused SASL login or TLS handshake only to the client's error callback; the call that
needed the connection fails as a plain transport failure or time-out, which the mirror would wait out as an
outage for ever. `check_cluster` asks the cluster once with a callback attached and raises the refusal itself.
Shared by the job (topic management) and the operator (lag reader): imports no Spark.
"""
from __future__ import annotations

import logging
import re
import uuid

from confluent_kafka import Consumer, KafkaException

REFUSALS = ("AuthenticationFailed", "TlsFailed")

_QUIET = logging.getLogger("sparkmirror.refusal.kafka")
_QUIET.setLevel(logging.CRITICAL)  # the refusal is raised once, not logged by librdkafka on every retry


def failure_reason(message: str) -> str:
    """The condition reason for a cluster a client could not use: a refusal names itself. Broker addresses
    (`sasl_ssl://host:port/1`) are left out: their protocol names are no refusal."""
    text = re.sub(r"\b[a-z_]+://\S*", "", message.lower())
    if "authentication" in text or "sasl" in text:
        return "AuthenticationFailed"
    if "ssl" in text or "certificate" in text:
        return "TlsFailed"
    if "authoriz" in text:
        return "AuthorizationFailed"
    return "ClusterUnreachable"


def probe_consumer(conf: dict[str, str], errors: list[str] | None = None,
                   logger: logging.Logger = _QUIET) -> Consumer:
    """A short-lived read_committed consumer (no offsets committed); `errors` collects what its error callback
    hears. librdkafka's own log goes to `logger`, not stderr."""
    extra = {"error_cb": lambda err: errors.append(err.str())} if errors is not None else {}
    return Consumer({**conf, "group.id": f"sparkmirror-probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                     "socket.timeout.ms": 5000, "isolation.level": "read_committed", **extra}, logger=logger)


def cause(e: KafkaException, errors: list[str], c: Consumer | None = None) -> str:
    """The refusal behind a failed call when the client saw one, else the call's own error."""
    if c is not None:
        c.poll(0.2)  # the error callback runs only while the client is polled
    refusals = [x for x in errors if failure_reason(x) in REFUSALS]
    return refusals[-1] if refusals else (e.args[0].str() if e.args else str(e))


def check_cluster(conf: dict[str, str], timeout: float, logger: logging.Logger = _QUIET) -> None:
    """Raises KafkaException naming why the cluster cannot be used (unreachable, refusing credentials or TLS)."""
    errors: list[str] = []
    try:
        c = probe_consumer(conf, errors, logger)
    except KafkaException as e:  # a CA or key that is not PEM: librdkafka refuses the config itself
        raise KafkaException(cause(e, errors)) from None
    try:
        c.list_topics(timeout=timeout)
    except KafkaException as e:
        raise KafkaException(cause(e, errors, c)) from None
    finally:
        c.close()


def refusal(conf: dict[str, str], timeout: float) -> str | None:
    """What the cluster answers the client with when it refuses its credentials or certificates, else None
    (it answers, or it is away: an outage to wait out). A plaintext client without credentials is never
    refused: not asked (an outage is not made longer by probes)."""
    if conf.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return None
    try:
        check_cluster(conf, timeout)
    except KafkaException as e:
        text = str(e.args[0]) if e.args else str(e)
        return text if failure_reason(text) in REFUSALS else None
    return None


def write_refused(conf: dict[str, str], topics: list[str], timeout: float = 5.0) -> str | None:
    """The first of `topics` the cluster says this client's principal may not WRITE (the topics' authorized
    operations, asked in one request).

    A transactional producer refused by ACLs only sees its transaction fail (INVALID_TXN_STATE, an abortable
    error that looks transient); the cause goes to librdkafka's log. None when it may write them all or the
    cluster does not answer (an outage is waited out as before)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    wanted = list(dict.fromkeys(topics))
    if not wanted:
        return None
    admin = AdminClient({**conf, "socket.timeout.ms": str(int(timeout * 1000))}, logger=_QUIET)
    try:
        futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout,
                                        include_authorized_operations=True)
    except Exception:  # noqa: BLE001 - as below
        return None
    for topic in wanted:
        try:
            allowed = futures[topic].result(timeout).authorized_operations
        except Exception:  # noqa: BLE001 - unreachable or unknown: not a refusal we can name
            continue
        if allowed is not None and not {AclOperation.WRITE, AclOperation.ALL} & set(allowed):
            return topic
    return None
