"""Telling a cluster that refuses a client (its credentials or certificates) from one that does not answer.

librdkafka reports a refused SASL login or TLS handshake only to the client's error callback; the call that
needed the connection fails as a plain transport failure or time-out, which the mirror would wait out as an
outage for ever. `check_cluster` asks the cluster once with a callback attached and raises the refusal itself.

A failure is told by its error code and kind, never by words in its message (`kind_of`):
- `_AUTHENTICATION` and the brokers' SASL codes: the login was refused (`AuthenticationFailed`);
- `_SSL` carrying OpenSSL's packed error code (library SSL): the handshake failed, most often this client
  refused the broker's certificate (`TlsFailed`); `_SSL` without one is a handshake cut short (a broker
  restarting): an outage;
- `_TRANSPORT` carrying OpenSSL's packed error code of a TLS alert the broker sent (bad, unknown, expired or
  missing client certificate, unknown CA, access denied; OpenSSL's reason codes, library SSL): the broker
  refused ours (`TlsFailed`). librdkafka has no code of its own for that; the packed code is OpenSSL's, and
  stable across its releases;
- the brokers' authorization codes (`AuthorizationFailed`);
- a client that cannot even be made: the TLS material or the SASL settings it was given, told apart by making
  it again without each (`TlsFailed`, `AuthenticationFailed`);
- everything else is an outage to wait out (`ClusterUnreachable`).
The codes and kinds are `faultkind`'s, which the batch path's own wire layer uses too.
Shared by the job (topic management) and the operator (lag reader): imports no Spark.
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException

from .faultkind import Kind, of_broker_code, of_tls_reason

REFUSALS = (Kind.AUTHENTICATION, Kind.TLS)
"""Kinds a connection is refused with (told by `check_cluster`): nothing but new credentials or certificates
cure them, so they end a mirror once the credentials' grace has passed."""

_QUIET = logging.getLogger("sparkmirror.refusal.kafka")
_QUIET.setLevel(logging.CRITICAL)  # the refusal is raised once, not logged by librdkafka on every retry

_LOCAL_AUTHENTICATION = KafkaError._AUTHENTICATION
"""librdkafka's own code for a refused login (the broker's codes are `faultkind.BROKER_CODES`)."""
_OPENSSL_LIB_SSL = 20
_PACKED = re.compile(r"\berror:([0-9A-Fa-f]{8}):")


def openssl_reason(text: str) -> int | None:
    """The SSL library's reason code in an OpenSSL packed error code librdkafka quotes (`error:0A000412:`);
    OpenSSL 3 packs the library in bits 23-30, 1.1 in bits 24-31."""
    for packed in _PACKED.findall(text):
        code = int(packed, 16)
        if (code >> 23) & 0xFF == _OPENSSL_LIB_SSL:
            return code & 0x7FFFFF
        if (code >> 24) & 0xFF == _OPENSSL_LIB_SSL:
            return code & 0xFFF
    return None


def kind_of(err: KafkaError) -> Kind:
    """What kind of failure a librdkafka error is, from its code (see the module doc and `faultkind`)."""
    code = err.code()
    if code == _LOCAL_AUTHENTICATION:
        return Kind.AUTHENTICATION
    if code > 0:
        return of_broker_code(code)
    if code == KafkaError._SSL:  # a handshake OpenSSL failed (it gives its reason), or one cut short (a restart)
        return Kind.TRANSIENT if openssl_reason(err.str()) is None else Kind.TLS
    if code == KafkaError._TRANSPORT:
        return of_tls_reason(openssl_reason(err.str()))
    return Kind.TRANSIENT


@dataclass(frozen=True)
class Failure:
    """Why a cluster could not be used: its kind (a condition reason) and the client's own words."""

    kind: str  # a faultkind.Kind, or ClientConfigRefused
    text: str

    @property
    def refused(self) -> bool:
        return self.kind in REFUSALS


class ClusterFailure(KafkaException):
    """check_cluster's failure, with its kind (a KafkaException, as the calls it stands for raise)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.text)
        self.failure = failure


def probe_consumer(conf: dict[str, str], errors: list[KafkaError] | None = None,
                   logger: logging.Logger = _QUIET) -> Consumer:
    """A short-lived read_committed consumer (no offsets committed); `errors` collects what its error callback
    hears. librdkafka's own log goes to `logger`, not stderr."""
    extra = {"error_cb": errors.append} if errors is not None else {}
    return Consumer({**conf, "group.id": f"sparkmirror-probe-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                     "socket.timeout.ms": 5000, "isolation.level": "read_committed", **extra}, logger=logger)


def _made_without(conf: dict[str, str], prefixes: tuple[str, ...]) -> bool:
    """Can a client be made from `conf` without the settings of `prefixes`? (nothing is connected)"""
    try:
        probe_consumer({k: v for k, v in conf.items() if not k.startswith(prefixes)}).close()
    except KafkaException:
        return False
    return True


def creation_failure(e: KafkaException, conf: dict[str, str]) -> Failure:
    """A client that could not be made: the TLS material or the SASL settings it was given refused."""
    text = e.args[0].str() if e.args and isinstance(e.args[0], KafkaError) else str(e)
    if any(k.startswith("ssl.") for k in conf) and _made_without(conf, ("ssl.",)):
        return Failure(Kind.TLS, text)
    if any(k.startswith("sasl.") for k in conf) and _made_without(conf, ("sasl.",)):
        return Failure(Kind.AUTHENTICATION, text)
    return Failure("ClientConfigRefused", text)


def cause(e: KafkaException, errors: list[KafkaError], c: Consumer | None = None) -> Failure:
    """The refusal behind a failed call when the client saw one, else the call's own error."""
    if c is not None:
        c.poll(0.2)  # the error callback runs only while the client is polled
    refusals = [x for x in errors if kind_of(x) in REFUSALS]
    if refusals:
        return Failure(kind_of(refusals[-1]), refusals[-1].str())
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is None:
        return Failure(Kind.TRANSIENT, str(e))
    return Failure(kind_of(err), err.str())


def check_cluster(conf: dict[str, str], timeout: float, logger: logging.Logger = _QUIET) -> None:
    """Raises ClusterFailure naming why the cluster cannot be used (unreachable, refusing credentials or TLS)."""
    errors: list[KafkaError] = []
    try:
        c = probe_consumer(conf, errors, logger)
    except KafkaException as e:  # a CA or key that is not PEM: librdkafka refuses the config itself
        raise ClusterFailure(creation_failure(e, conf)) from None
    try:
        c.list_topics(timeout=timeout)
    except KafkaException as e:
        raise ClusterFailure(cause(e, errors, c)) from None
    finally:
        c.close()


def refusal(conf: dict[str, str], timeout: float) -> str | None:
    """What the cluster answers the client with when it refuses its credentials or certificates, led by the
    kind ("authentication refused (AuthenticationFailed): ..."), else None (it answers, or it is away: an outage
    to wait out). A plaintext client without credentials is never refused: not asked (an outage is not made
    longer by probes)."""
    if conf.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        return None
    try:
        check_cluster(conf, timeout)
    except ClusterFailure as e:
        failure = e.failure
        return f"{Kind(failure.kind).words} ({failure.kind}): {failure.text}" if failure.refused else None
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
