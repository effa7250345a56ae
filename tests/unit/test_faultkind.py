"""The kinds of refusal, one table for both Kafka clients (issue 39 item 2): every code's kind, per client,
told by code and exception class, never by the words of a message; the grace a lane gives a refusal new
credentials could cure."""
from __future__ import annotations

import ssl

import kafka.errors as kerrors
import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying import errors
from sparkmirror.wire.connection import WireError, tls_kind
from sparkmirror.copying.errors import Fault, Refused, Unreachable, classify, talking_to, transient_reason
from sparkmirror.credentials import RefusalGrace
from sparkmirror.faultkind import BROKER_CODES, TLS_REFUSING, Kind, of_tls_reason, refusal_in, refusal_text
from sparkmirror.refusal import kind_of, openssl_reason

E = KafkaError
AUTHENTICATION = [E.SASL_AUTHENTICATION_FAILED, E.UNSUPPORTED_SASL_MECHANISM, E.ILLEGAL_SASL_STATE,
                  E._AUTHENTICATION]
AUTHORIZATION = [E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED,
                 E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.DELEGATION_TOKEN_AUTHORIZATION_FAILED]
TRANSIENT = [E._TRANSPORT, E._ALL_BROKERS_DOWN, E._MSG_TIMED_OUT, E._TIMED_OUT, E.NOT_LEADER_FOR_PARTITION,
             E.REQUEST_TIMED_OUT, E.NETWORK_EXCEPTION, E.COORDINATOR_NOT_AVAILABLE, E._SSL]


def test_the_broker_codes_are_the_protocols_in_both_clients() -> None:
    """One table by Kafka protocol code: librdkafka's codes and kafka-python's errno agree with it."""
    for code, kind in BROKER_CODES.items():
        name = E(code).name()
        assert (kind is Kind.AUTHORIZATION) == name.endswith("_AUTHORIZATION_FAILED"), name
        assert kerrors.for_code(code).errno == code
    assert {c for c in BROKER_CODES} == {int(c) for c in AUTHENTICATION + AUTHORIZATION if c > 0}


@pytest.mark.parametrize("code", AUTHENTICATION)
def test_authentication_codes(code: int) -> None:
    assert kind_of(E(code)) is Kind.AUTHENTICATION
    assert classify(E(code)) is Fault.PERMANENT


@pytest.mark.parametrize("code", AUTHORIZATION)
def test_authorization_codes(code: int) -> None:
    assert kind_of(E(code)) is Kind.AUTHORIZATION
    assert classify(E(code)) is Fault.PERMANENT
    assert transient_reason(KafkaException(E(code))) is None  # never waited on


@pytest.mark.parametrize("code", TRANSIENT)
def test_transient_codes_are_no_refusal(code: int) -> None:
    assert kind_of(E(code)) is Kind.TRANSIENT
    assert classify(E(code)) is Fault.TRANSIENT


def test_tls_is_told_by_openssls_reason_code() -> None:
    # this client's check of the broker's certificate (OpenSSL 3 packs library 20 in bits 23-30; 1.1 in 24-31)
    verify3 = E(E._SSL, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed")
    verify11 = E(E._SSL, "SSL handshake failed: error:14090086:SSL routines:ssl3_get_server_certificate:x")
    assert openssl_reason(verify3.str()) == 134 and openssl_reason(verify11.str()) == 134
    assert kind_of(verify3) is Kind.TLS and kind_of(verify11) is Kind.TLS
    # an alert the broker sent (certificate required, unknown CA) on a transport failure
    assert kind_of(E(E._TRANSPORT, "error:0A00045C:SSL routines::tlsv13 alert certificate required")) is Kind.TLS
    assert kind_of(E(E._TRANSPORT, "error:0A000418:SSL routines::tlsv1 alert unknown ca")) is Kind.TLS
    # a handshake cut short (no OpenSSL reason), or one of another library: an outage
    assert kind_of(E(E._SSL, "SSL handshake failed: Disconnected: SSL connection closed by peer")) is Kind.TRANSIENT
    assert kind_of(E(E._TRANSPORT, "error:80000068:system library::Connection reset by peer")) is Kind.TRANSIENT
    assert classify(E(E._SSL, "SSL handshake failed: Disconnected")) is Fault.TRANSIENT
    assert of_tls_reason(1048) is Kind.TLS and of_tls_reason("TLSV1_ALERT_UNKNOWN_CA") is Kind.TLS
    assert of_tls_reason(None) is Kind.TRANSIENT and of_tls_reason("UNEXPECTED_EOF_WHILE_READING") is Kind.TRANSIENT
    assert all(1000 < c < 1200 or c == 134 for c in TLS_REFUSING)


def test_the_wire_tells_kinds_by_exception_class() -> None:
    """The batch path: kafka-python's error classes by their protocol code, Python's ssl errors by class and
    OpenSSL's reason; a refusal is never retriable."""
    assert WireError(kerrors.SaslAuthenticationFailedError, "x").kind is Kind.AUTHENTICATION
    assert WireError(kerrors.UnsupportedSaslMechanismError, "x").kind is Kind.AUTHENTICATION
    for cls in (kerrors.TopicAuthorizationFailedError, kerrors.GroupAuthorizationFailedError,
                kerrors.ClusterAuthorizationFailedError, kerrors.TransactionalIdAuthorizationFailedError):
        e = WireError(cls, "x")
        assert e.kind is Kind.AUTHORIZATION and not e.retriable, cls
        assert "AuthorizationFailed" in str(e)
    for cls in (kerrors.NotLeaderForPartitionError, kerrors.KafkaConnectionError, kerrors.RequestTimedOutError):
        assert WireError(cls, "x").kind is Kind.TRANSIENT, cls
    assert WireError(kerrors.NotLeaderForPartitionError, "x").retriable
    assert tls_kind(ssl.SSLCertVerificationError(1, "certificate verify failed")) is Kind.TLS
    alert = ssl.SSLError(1, "alert")
    alert.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls_kind(alert) is Kind.TLS
    assert tls_kind(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")) is Kind.TRANSIENT
    assert tls_kind(ConnectionResetError()) is Kind.TRANSIENT
    refused = WireError(kerrors.KafkaConnectionError, "connecting", tls_kind(alert))
    assert refused.kind is Kind.TLS and not refused.retriable


def test_a_lane_waits_on_a_curable_refusal_for_the_grace_then_names_it(monkeypatch) -> None:
    """Authentication and TLS refusals are an outage until the grace has passed, then a `Refused` naming the
    cluster and the kind; a call that works starts the grace again; authorization ends at once."""
    now = [0.0]
    monkeypatch.setattr(errors, "_GRACE", RefusalGrace(grace=120, clock=lambda: now[0]))

    def refuse(code: int) -> None:
        with talking_to("target", "b", "copying"):
            raise KafkaException(E(code))

    with pytest.raises(Unreachable) as waiting:
        refuse(E.SASL_AUTHENTICATION_FAILED)
    assert "AuthenticationFailed" in waiting.value.reason and "120 s" in waiting.value.reason
    now[0] = 100.0
    with pytest.raises(Unreachable):
        refuse(E._AUTHENTICATION)
    with talking_to("target", "b", "copying"):
        pass  # the cluster answered: a later refusal gets a grace of its own
    now[0] = 200.0
    with pytest.raises(Unreachable):
        refuse(E._AUTHENTICATION)
    now[0] = 321.0
    with pytest.raises(Refused) as stands:
        refuse(E._AUTHENTICATION)
    assert stands.value.kind is Kind.AUTHENTICATION and stands.value.cluster == "b"
    assert str(stands.value).startswith("target cluster 'b' refuses the mirror: authentication refused "
                                        "(AuthenticationFailed): copying: _AUTHENTICATION")
    with pytest.raises(Refused) as at_once:
        refuse(E.TOPIC_AUTHORIZATION_FAILED)
    assert at_once.value.kind is Kind.AUTHORIZATION
    with pytest.raises(Unreachable):  # an outage is an outage, whatever the grace
        refuse(E._TRANSPORT)


def test_topic_management_waits_a_curable_refusal_out_for_its_own_grace() -> None:
    """transient_reason (topic management, the driver's services): a curable refusal is waited out (their own
    refusal checks keep the grace), an authorization refusal is not."""
    assert "AuthenticationFailed" in (transient_reason(KafkaException(E(E.SASL_AUTHENTICATION_FAILED))) or "")
    assert transient_reason(KafkaException(E(E.CLUSTER_AUTHORIZATION_FAILED))) is None


def test_a_refusal_is_found_again_in_the_text_it_crossed_spark_as() -> None:
    """A lane's `Refused` reaches the driver as its query's exception text: the kind is read back from the
    text `refusal_text` made (our own words, the kind's code), and the driver's exit code follows it."""
    from sparkmirror.exitcodes import exit_code_of
    from sparkmirror.resource.names import EXIT_FAILED, EXIT_UNAUTHORIZED

    for kind in (Kind.AUTHENTICATION, Kind.AUTHORIZATION, Kind.TLS):
        said = refusal_text("target", "s", kind, "producing to a.t: TOPIC_AUTHORIZATION_FAILED (x) (y)")
        text = f"org.apache.spark.SparkException: Job aborted.\nPythonException: sparkmirror.copying.errors." \
               f"Refused: {said}\n\tat org.apache..."
        assert refusal_in(text) is kind
        assert exit_code_of(text) == (EXIT_UNAUTHORIZED if kind is Kind.AUTHORIZATION else EXIT_FAILED)
    for other in ("target cluster 's' unreachable: timed out", "AuthorizationFailed", "TOPIC_AUTHORIZATION_FAILED"):
        assert refusal_in(other) is None and exit_code_of(other) == EXIT_FAILED
