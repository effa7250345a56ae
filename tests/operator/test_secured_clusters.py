"""The operator's lag clients on a secured cluster (tests/conftest.py `secured_kafka`), with credentials from
Secrets on the real API server: lag through mTLS (source) and SCRAM-SHA-512 over TLS (target); a wrong password
is a condition naming the target, and no password shows in the status or the events."""
from __future__ import annotations

import base64
import json

import pytest

from sparkmirror_dev.testing import create_topic, produce_numbered, unique_name
from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler

from .test_operator import resource

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]
MARKER = "LEAKMARK"  # in every password of `secured_kafka`


def _secret(namespace: str, name: str, data: dict[str, bytes]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def test_lag_through_mtls_and_scram_and_a_refused_password(secured_kafka, kube, kmm2_crd, kapi, namespace) -> None:
    s = secured_kafka
    ca = s.security.ca
    src = create_topic(s.bootstrap, unique_name("oplag"), 2)
    produce_numbered(s.bootstrap, src, 2, 0, 25)
    kapi.create(_secret(namespace, "cluster-ca", {"ca.crt": ca.cert.read_bytes()}))
    kapi.create(_secret(namespace, "client", {"tls.crt": (ca.home / "client.crt").read_bytes(),
                                              "tls.key": (ca.home / "client.key").read_bytes()}))
    kapi.create(_secret(namespace, "mirror-user", {"password": s.security.scram_users["mirror"].encode()}))
    kapi.create(_secret(namespace, "wrong-user", {"password": f"wrong-{MARKER}".encode()}))
    tls = {"trustedCertificates": [{"secretName": "cluster-ca", "certificate": "ca.crt"}]}

    def spec(password_secret: str) -> dict:
        return {"target": {"alias": "s", "bootstrapServers": s.bootstrap_of("SASL_SSL"), "tls": tls,
                           "authentication": {"type": "scram-sha-512", "username": "mirror",
                                              "passwordSecret": {"secretName": password_secret,
                                                                 "password": "password"}}},
                "mirrors": [{"source": {"alias": "m", "bootstrapServers": s.bootstrap_of("MTLS"), "tls": tls,
                                        "authentication": {"type": "tls", "certificateAndKey": {
                                            "secretName": "client", "certificate": "tls.crt", "key": "tls.key"}}},
                             "topicsPattern": src}]}

    rec = Reconciler(KubeApi(kapi.api), lag_timeout=5.0)
    good = rec.reconcile(kapi.create(resource("good", namespace, **spec("mirror-user"))), apply=False, with_lag=True)
    assert good.status["lag"] == 50, good.status  # nothing mirrored yet: every record of both partitions
    assert [(g["partitions"], g.get("message")) for g in good.status["flowGroups"]] == [(2, None)]

    bad = rec.reconcile(kapi.create(resource("bad", namespace, **spec("wrong-user"))), apply=False, with_lag=True)
    deg = next(c for c in bad.status["conditions"] if c["type"] == "Degraded")
    assert deg["status"] == "True" and deg["reason"] == "AuthenticationFailed", deg
    assert f"target cluster 's' ({s.bootstrap_of('SASL_SSL')})" in deg["message"], deg
    assert "SASL authentication error" in deg["message"], deg
    for result in (good, bad):
        text = json.dumps(result.status) + json.dumps([e.__dict__ for e in result.events])
        assert MARKER not in text and "wrong-" not in text
