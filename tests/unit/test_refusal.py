"""Telling a refused login from an outage (sparkmirror.refusal) by error code, without brokers: the messages are
the ones librdkafka 2.16 gave on this project's secured test brokers (wrong SCRAM password, untrusted CA, an
mTLS listener without a client certificate, TLS to a plaintext port, nothing listening); the broker-side cases
run on real secured brokers in tests/job/test_security.py and tests/operator/test_secured_clusters.py."""
from __future__ import annotations

import time

from confluent_kafka import KafkaError

from sparkmirror.refusal import Failure, cause, creation_failure, kind_of, openssl_reason, refusal

SASL_SSL = "sasl_ssl://127.0.0.1:9093/bootstrap: "


def test_refusals_are_told_by_their_code() -> None:
    assert kind_of(KafkaError(KafkaError._AUTHENTICATION, SASL_SSL + "SASL authentication error: Authentication "
                              "failed during authentication due to invalid credentials")) == "AuthenticationFailed"
    assert kind_of(KafkaError(KafkaError._AUTHENTICATION, SASL_SSL + "SASL PLAIN mechanism handshake failed: "
                              "Broker: Unsupported SASL mechanism")) == "AuthenticationFailed"
    assert kind_of(KafkaError(KafkaError._SSL, "ssl://127.0.0.1:9093/bootstrap: SSL handshake failed: "
                              "error:0A000086:SSL routines::certificate verify failed")) == "TlsFailed"
    assert kind_of(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)) == "AuthorizationFailed"


def test_words_decide_nothing() -> None:
    """A transport failure is an outage whatever its text says (`sasl_ssl://` in a broker's name, 'SSL' in a
    closed connection's message); only the code of a TLS alert the broker sent makes it a refusal."""
    assert kind_of(KafkaError(KafkaError._TRANSPORT, SASL_SSL + "Connect to ipv4#127.0.0.1:9093 failed: Connection "
                              "refused (after 0ms in state CONNECT)")) == "ClusterUnreachable"
    assert kind_of(KafkaError(KafkaError._TRANSPORT, "ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: "
                              "Disconnected: SSL connection closed by peer")) == "ClusterUnreachable"
    assert kind_of(KafkaError(KafkaError._TRANSPORT, "ssl://127.0.0.1:9094/bootstrap: Receive failed: "
                              "error:0A000412:SSL routines::ssl/tls alert bad certificate")) == "TlsFailed"
    # the same words with another library's code, or none: no refusal
    assert kind_of(KafkaError(KafkaError._TRANSPORT, "Receive failed: error:10000412:BIO routines::ssl/tls alert "
                              "bad certificate")) == "ClusterUnreachable"
    assert kind_of(KafkaError(KafkaError._TRANSPORT, "alert bad certificate, authentication failed")) == \
        "ClusterUnreachable"


def test_openssl_codes_of_both_packings() -> None:
    assert openssl_reason("error:0A000412:SSL routines::ssl/tls alert bad certificate") == 1042  # OpenSSL 3
    assert openssl_reason("error:14094412:SSL routines:ssl3_read_bytes:sslv3 alert bad certificate") == 1042  # 1.1
    assert openssl_reason("error:0A000074:SSL routines::tlsv13 alert certificate required") == 0x74
    assert openssl_reason("no code here") is None


def test_the_refusal_seen_by_the_callback_names_the_failure() -> None:
    """The call fails as a transport failure; the error callback heard the refusal: that is the cause."""
    from confluent_kafka import KafkaException

    heard = [KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
             KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed")]
    failed = KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport "
                                                              "failure"))
    assert cause(failed, heard) == Failure("AuthenticationFailed",
                                           "SASL authentication error: Authentication failed")
    assert cause(failed, heard[:1]) == Failure("ClusterUnreachable",
                                               "Failed to get metadata: Local: Broker transport failure")


def test_a_client_that_cannot_be_made_is_told_by_what_it_was_given() -> None:
    """librdkafka refuses TLS material that is not PEM when the client is made: without it the client can be
    made, so the TLS material was refused."""
    from confluent_kafka import Consumer, KafkaException

    conf = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", "ssl.ca.pem": "not a certificate"}
    try:
        Consumer({**conf, "group.id": "g"})
    except KafkaException as e:
        failure = creation_failure(e, conf)
    assert failure.kind == "TlsFailed" and failure.refused, failure


def test_a_plaintext_client_is_never_probed() -> None:
    """Nothing to refuse without TLS or SASL: an outage of a plaintext cluster is not made longer by probes."""
    t0 = time.monotonic()
    assert refusal({"bootstrap.servers": "127.0.0.1:1"}, timeout=5.0) is None
    assert time.monotonic() - t0 < 0.5
