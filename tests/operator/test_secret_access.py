"""The operator and Secrets on the real API server: it reads only the Secrets a resource names, in the resource's
own namespace, and a value that is not text (a binary password) is a condition naming the Secret and key, never
a crash and never the value."""
from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler

from .test_operator import KMM2, resource, secret

pytestmark = pytest.mark.k8s
BINARY = b"hunter\xff\xfe2-s3cr3t"


class RecordingApi(KubeApi):
    """The operator's client, noting every Secret it asks for."""

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        self.secret_calls: list[tuple[str, str | None, str | None]] = []

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if kind == "Secret":
            self.secret_calls.append(("get", namespace, name))
        return super().get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        if kind == "Secret":
            self.secret_calls.append(("list", namespace, None))
        return super().list(kind, namespace, label_selector)


def _binary_secret(namespace: str, name: str, key: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {key: base64.b64encode(BINARY).decode()}}


def test_a_binary_password_is_a_condition_naming_it(kube, kmm2_crd, kapi, namespace) -> None:
    kapi.create(_binary_secret(namespace, "mirror-user", "password"))
    created = kapi.create(resource("binary", namespace))
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    applied = rec.reconcile(created)                          # the create/update handler's path
    refreshed = rec.reconcile(created, apply=False, with_lag=True)  # the status timer's path, lag clients too
    for result in (applied, refreshed):
        deg = next(c for c in result.status["conditions"] if c["type"] == "Degraded")
        assert deg["status"] == "True" and deg["reason"] == "SecretInvalid", deg
        assert deg["message"] == (f"Secret {namespace}/mirror-user referenced by "
                                  "spec.target.authentication.passwordSecret: key 'password' is not UTF-8 text "
                                  "(a password, certificate or key must be)")
        text = json.dumps(result.status) + json.dumps([e.__dict__ for e in result.events])
        for leak in ("hunter", "s3cr3t", "\\u00ff", "\\udcff", "0xff"):
            assert leak not in text
    assert "SparkApplication/binary-a" in applied.applied  # the rest of the reconcile happened
    kapi.patch_status(KMM2, namespace, "binary", refreshed.status)  # and the status is a valid one
    assert kapi.get(KMM2, namespace, "binary")["status"]["conditions"]


def test_only_the_named_secrets_of_its_own_namespace_are_read(kube, kmm2_crd, kapi, namespace) -> None:
    """Other Secrets in the namespace are never asked for, nor Secrets elsewhere; Secrets are never listed."""
    kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
    kapi.create(secret(namespace, "ca", {"ca.crt": "-----BEGIN CERTIFICATE-----\n", "other.crt": "x"}))
    kapi.create(secret(namespace, "unrelated", {"password": "not ours"}))
    spec = {"mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:19092",
                                    "tls": {"trustedCertificates": [{"secretName": "ca", "pattern": "*.crt"}]}},
                         "topicsPattern": "t.*"}]}
    created = kapi.create(resource("named", namespace, **spec))
    api = RecordingApi(kapi.api)
    rec = Reconciler(api, lag_timeout=1.0)
    rec.reconcile(created)
    refreshed = rec.reconcile(created, apply=False, with_lag=True)
    assert api.secret_calls and {c[0] for c in api.secret_calls} == {"get"}
    # the CA here is no certificate at all: the lag client cannot even be made, and the status says so
    deg = next(c for c in refreshed.status["conditions"] if c["type"] == "Degraded")
    assert deg["reason"] == "TlsFailed", deg
    assert ("spec.mirrors[0].source.bootstrapServers: cluster 'a' (127.0.0.1:19092): cannot create a client: "
            "Failed to create consumer: failed to read certificate #0 from ssl.ca.pem") in deg["message"], deg
    assert {(ns, name) for _, ns, name in api.secret_calls} == {(namespace, "mirror-user"), (namespace, "ca")}
