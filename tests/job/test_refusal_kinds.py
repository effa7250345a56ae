"""Refusals told by code and kind on real secured listeners (issue 39 item 2), through both clients the mirror
uses: librdkafka (the record path, topic management, the operator's lag reader) and the batch path's own wire
(kafka-python's requests and hand-written connections). A wrong password is an authentication refusal, a
principal without WRITE on the target topic an authorization refusal, a client that does not trust the broker's
CA (or an mTLS listener given no client certificate) a TLS handshake refusal; each names the cluster and the
kind. Authentication and TLS refusals are waited on as an outage for the credentials' grace first (a Secret
being rotated), authorization ones end the mirror at once; a broker that is away stays an outage.

One module-scoped secured cluster (the session's `secured_kafka`), no Spark: about 20 s in all."""
from __future__ import annotations

import socket

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparkmirror.copying import errors
from sparkmirror.copying.batchreader import BatchReader
from sparkmirror.copying.batchwriter import BatchWriter
from sparkmirror.copying.errors import Refused, Unreachable, talking_to
from sparkmirror.copying.wiretalk import wire_talk
from sparkmirror.wire.cluster import Wire, wire_config
from sparkmirror.wire.connection import BrokerConnection
from sparkmirror.credentials import GRACE_ENV
from sparkmirror.faultkind import Kind
from sparkmirror.refusal import ClusterFailure, check_cluster
from sparkmirror.resource.flowgroup import Cluster
from sparkmirror_dev.certs import CertificateAuthority
from sparkmirror_dev.testing import create_topic, produce_numbered, unique_name

from .test_security import Secured


@pytest.fixture
def no_grace(monkeypatch):
    """A refusal stands at once (the credentials' grace is 0 s), counted afresh for this test."""
    monkeypatch.setenv(GRACE_ENV, "0")
    monkeypatch.setattr(errors, "_GRACE", None)


@pytest.fixture
def secured(secured_kafka, tmp_path) -> Secured:
    d = tmp_path / "secrets"
    d.mkdir()
    s = Secured(secured_kafka, d)
    s.file("other-ca.crt", CertificateAuthority(tmp_path / "other-ca", name="untrusted").cert.read_bytes())
    return s


def conf(entry: dict) -> dict[str, str]:
    return Cluster.model_validate(entry).client_config()


def refusing(secured: Secured) -> dict[str, tuple[dict[str, str], Kind]]:
    """Client settings the secured cluster refuses, with the kind each is refused with."""
    return {
        "wrong password": (conf(secured.entry("s", "SASL_SSL", password=b"wrong-password")), Kind.AUTHENTICATION),
        "untrusted CA": (conf(secured.entry("s", "SASL_SSL", ca="other-ca.crt")), Kind.TLS),
        "mTLS without a client certificate": (conf(secured.entry("s", "SSL") | {
            "bootstrapServers": secured.cluster.bootstrap_of("MTLS")}), Kind.TLS),
    }


def first_server(c: dict[str, str]) -> tuple[str, int]:
    host, _, port = c["bootstrap.servers"].split(",")[0].rpartition(":")
    return host, int(port)


def test_librdkafka_refusals_by_kind(secured) -> None:
    """The probe topic management and the operator use: each refusal is told by its code."""
    for what, (c, kind) in refusing(secured).items():
        with pytest.raises(ClusterFailure) as e:
            check_cluster(c, 4.0)
        assert e.value.failure.kind == kind, (what, e.value.failure)
    check_cluster(conf(secured.entry("s", "SASL_SSL")), 10.0)  # the right settings: no failure


def test_wire_refusals_by_kind_after_the_grace(secured, no_grace) -> None:
    """The batch path's own connections: a refused login or handshake is a `Refused` naming the cluster and
    the kind, never an outage waited on for ever; the same through kafka-python's bootstrap."""
    for what, (c, kind) in refusing(secured).items():
        host, port = first_server(c)
        with pytest.raises(Refused) as e, wire_talk("target", "s", "connecting"):
            BrokerConnection(host, port, wire_config(c), timeout_s=10).close()
        assert e.value.kind == kind and e.value.cluster == "s", (what, e.value)
        assert "target cluster 's' refuses the mirror" in str(e.value) and kind.value in str(e.value), str(e.value)
    c, kind = refusing(secured)["wrong password"]
    with pytest.raises(Refused) as e, wire_talk("target", "s", "bootstrapping"):
        Wire(c, bootstrap_ms=2000).close()
    assert e.value.kind is Kind.AUTHENTICATION, e.value
    good = conf(secured.entry("s", "SASL_SSL"))
    with wire_talk("target", "s", "connecting"):
        BrokerConnection(*first_server(good), wire_config(good), timeout_s=10).close()


def test_a_refusal_new_credentials_could_cure_is_waited_on_first(secured, monkeypatch) -> None:
    """Within the grace a refused login is an outage (the lane waits and tries again); a broker that does not
    listen at all is an outage whatever the grace."""
    monkeypatch.setenv(GRACE_ENV, "600")
    monkeypatch.setattr(errors, "_GRACE", None)
    c, _ = refusing(secured)["wrong password"]
    with pytest.raises(Unreachable) as e, wire_talk("target", "s", "connecting"):
        BrokerConnection(*first_server(c), wire_config(c), timeout_s=10).close()
    assert Kind.AUTHENTICATION.value in e.value.reason and "waited on" in e.value.reason, e.value.reason
    with socket.socket() as free:  # a port nobody listens on: an outage, never a refusal
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv(GRACE_ENV, "0")
    monkeypatch.setattr(errors, "_GRACE", None)
    with pytest.raises(Unreachable), wire_talk("target", "s", "connecting"):
        BrokerConnection("127.0.0.1", port, wire_config(c), timeout_s=5).close()


def test_a_principal_without_write_is_refused_by_authorization(kafka_a, secured, no_grace) -> None:
    """`limited` may not WRITE topics named a.denied-*: both writers end with an authorization refusal at once
    (no grace: new credentials do not change what a principal may do)."""
    denied = "a." + unique_name("denied-kinds")  # the ACL denies WRITE on a.denied-*
    admin = AdminClient({"bootstrap.servers": secured.cluster.bootstrap})
    admin.create_topics([NewTopic(denied, 1, 1)])[denied].result(30)
    limited = conf(secured.entry("s", "SASL_SSL", user="limited"))
    # librdkafka: a transactional producer's commit is refused
    p = Producer({**limited, "transactional.id": unique_name("kinds")})
    with pytest.raises(Refused) as e, talking_to("target", "s", "committing"):
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(denied, b"v")
        p.commit_transaction(30)
    assert e.value.kind is Kind.AUTHORIZATION and e.value.cluster == "s", e.value
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value) and "AuthorizationFailed" in str(e.value), str(e.value)
    # the batch path: batches read from a plaintext source, produced by `limited` into the denied topic
    src = create_topic(kafka_a.bootstrap, unique_name("kinds-src"), 1)
    produce_numbered(kafka_a.bootstrap, src, 1, 0, 20)
    source, target = Wire({"bootstrap.servers": kafka_a.bootstrap}), Wire(limited)
    try:
        reader = BatchReader(source)
        reader.assign({(src, 0): 0})
        got = reader.fetch()
        assert got, "nothing read from the source"
        writer = BatchWriter(target, unique_name("kinds-lane"))
        with pytest.raises(Refused) as e, wire_talk("target", "s", "copying"):
            writer.init()
            writer.produce({(denied, 0): f.batches for f in got.values()})
            writer.commit()
        assert e.value.kind is Kind.AUTHORIZATION and e.value.cluster == "s", e.value
    finally:
        source.close()
        target.close()
