"""Operator test helpers: the generated CRD installed once on the session's API server."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# the operator's status/lag timer: fast in tests (read when sparkmirror_operator.handlers is imported)
os.environ.setdefault("SPARKMIRROR_STATUS_INTERVAL", "2")

from sparkmirror_operator.crdgen import TARGETS

from tests.support.operatorrun import install_kmm2_crd, running_operator

from tests.support.waiting import wait_for

__all__ = ["wait_for"]  # the operator tests import it from here

CRD = TARGETS[0]


@pytest.fixture(scope="session")
def kmm2_crd(kube) -> Path:
    """The generated KafkaMirrorMaker2 CRD, installed (server-side apply, so re-installs are no-ops)."""
    install_kmm2_crd(kube)
    return CRD


@pytest.fixture(scope="module")
def operator(kube, kmm2_crd) -> Iterator[None]:
    """The real operator (kopf, all namespaces) running in-process against the session's API server."""
    with running_operator(kube, "--all-namespaces"):
        yield


@pytest.fixture
def kapi(kube):
    """The operator's own generic client (apply/get/list/delete/patch_status) for the tests' reads and writes."""
    from sparkmirror_operator.kubeapi import KubeApi

    with kube.api_client() as api:
        yield KubeApi(api, field_manager="sparkmirror-tests")


KMM2 = "KafkaMirrorMaker2"


def kmm2_status(kapi, namespace: str, name: str) -> dict:
    """The resource's status as the API server holds it ({} before the first)."""
    return (kapi.get(KMM2, namespace, name) or {}).get("status") or {}


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def merge_patch(kapi, namespace: str, name: str, patch: dict) -> None:
    """A JSON merge patch of the resource, as `kubectl patch --type merge` sends it."""
    kapi._call("PATCH", f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/{name}", [],
               patch, "application/merge-patch+json")
