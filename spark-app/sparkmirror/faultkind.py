"""The kinds of refusal a cluster can answer the mirror with, defined once for every client the mirror uses.

A cluster that refuses the mirror says so with a code, never only in words:
- authentication: the broker's SASL codes (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
  ILLEGAL_SASL_STATE), librdkafka's local `_AUTHENTICATION`, kafka-python's `SaslAuthenticationFailedError`, ...;
- authorization: the broker's *_AUTHORIZATION_FAILED codes (topic, group, cluster, transactional id,
  delegation token);
- TLS handshake: a certificate one side will not take; OpenSSL's reason code says which (this client's check of
  the broker's certificate failed, or the broker sent a refusing alert: bad, unknown, expired or missing
  certificate, unknown CA, access denied).
Everything else (a broker away, a handshake cut short by a restart) is transient: waited out, never reported.

The broker's codes are the Kafka protocol's numbers, the same in librdkafka (`KafkaError.code()`, positive) and
kafka-python (`error.errno`), so one table serves both paths: `refusal.kind_of` (librdkafka: the record path, topic
management, the operator) and `wire.connection` (the wire of the batch path and the share-group admin). A refusal
that new credentials could cure (authentication, TLS: a Secret being rotated) is waited on for the credentials' grace first
(`credentials.RefusalGrace`); an authorization refusal ends the mirror at once. Pure: no Kafka client.
"""
from __future__ import annotations

import re
from enum import StrEnum


class Kind(StrEnum):
    """A failure's kind; its value is the condition reason the status shows."""

    AUTHENTICATION = "AuthenticationFailed"
    AUTHORIZATION = "AuthorizationFailed"
    TLS = "TlsFailed"
    TRANSIENT = "ClusterUnreachable"

    @property
    def refused(self) -> bool:
        return self is not Kind.TRANSIENT

    @property
    def rotatable(self) -> bool:
        """New credentials (a Secret rotated in place) could cure it: waited on for the grace first."""
        return self in (Kind.AUTHENTICATION, Kind.TLS)

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {Kind.AUTHENTICATION: "authentication refused", Kind.AUTHORIZATION: "authorization refused",
          Kind.TLS: "TLS handshake refused", Kind.TRANSIENT: "unreachable"}

BROKER_CODES: dict[int, Kind] = {
    29: Kind.AUTHORIZATION,   # TOPIC_AUTHORIZATION_FAILED
    30: Kind.AUTHORIZATION,   # GROUP_AUTHORIZATION_FAILED
    31: Kind.AUTHORIZATION,   # CLUSTER_AUTHORIZATION_FAILED
    53: Kind.AUTHORIZATION,   # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    65: Kind.AUTHORIZATION,   # DELEGATION_TOKEN_AUTHORIZATION_FAILED
    33: Kind.AUTHENTICATION,  # UNSUPPORTED_SASL_MECHANISM
    34: Kind.AUTHENTICATION,  # ILLEGAL_SASL_STATE
    58: Kind.AUTHENTICATION,  # SASL_AUTHENTICATION_FAILED
}
"""Kafka protocol error codes that refuse the mirror, by kind."""

TLS_REFUSING: dict[int, str] = {
    134: "CERTIFICATE_VERIFY_FAILED",               # this client does not trust the broker's certificate
    1040: "SSLV3_ALERT_HANDSHAKE_FAILURE",          # no common ground, or a certificate the peer will not take
    1042: "SSLV3_ALERT_BAD_CERTIFICATE",
    1043: "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    1044: "SSLV3_ALERT_CERTIFICATE_REVOKED",
    1045: "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    1046: "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    1048: "TLSV1_ALERT_UNKNOWN_CA",
    1049: "TLSV1_ALERT_ACCESS_DENIED",
    1116: "TLSV13_ALERT_CERTIFICATE_REQUIRED",      # TLS 1.3: no client certificate sent
}
"""OpenSSL's reason codes (library SSL) that refuse a handshake, with the names Python's `ssl.SSLError.reason`
gives them; an alert received is 1000 + the alert's number."""
TLS_REFUSING_NAMES = frozenset(TLS_REFUSING.values())


def of_broker_code(code: int) -> Kind:
    """The kind of a Kafka protocol error code: a refusal, or transient for the caller to judge further."""
    return BROKER_CODES.get(code, Kind.TRANSIENT)


def of_tls_reason(reason: int | str | None) -> Kind:
    """TLS when OpenSSL's reason (its code, or its name as Python's ssl module gives it) refuses a handshake."""
    refusing = reason in TLS_REFUSING if isinstance(reason, int) else reason in TLS_REFUSING_NAMES
    return Kind.TLS if refusing else Kind.TRANSIENT


def refusal_text(side: str, cluster: str, kind: Kind, detail: str) -> str:
    """How a refusal is said: the cluster, the kind (its condition reason too) and the client's own words."""
    return f"{side} cluster {cluster!r} refuses the mirror: {kind.words} ({kind.value}): {detail}"


_REFUSAL = re.compile(r"refuses the mirror: [^()]+ \((" + "|".join(k.value for k in Kind if k.refused) + r")\): ")


def refusal_in(text: str) -> Kind | None:
    """The kind of a refusal `refusal_text` said, found in `text` (an error that crossed Spark as text: a lane's
    `Refused` reaches the driver as its query's exception message); None when it says none."""
    match = _REFUSAL.search(text)
    return Kind(match.group(1)) if match else None
