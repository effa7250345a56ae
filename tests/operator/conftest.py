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
    """The real operator (kopf, all namespaces) running in-process against the session's API server. The
    resources earlier modules left go first: this API server has no namespace controller, and an operator of all
    namespaces would take every one on, its status timers waiting on Kafka clusters long stopped (in CI's
    parallel phase a worker gathered dozens, and the operator took over 120 s to act on its own test's change)."""
    _sweep_mirror_resources(kube)
    with running_operator(kube, "--all-namespaces"):
        yield


def _sweep_mirror_resources(kube) -> None:
    """Every KafkaMirrorMaker2 on the server deleted at once, finalizers dropped first: no operator runs now
    (this worker runs one module at a time) to act on the deletion."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from sparkmirror.resource.model import GROUP, PLURAL, VERSION

    with kube.api_client() as api:
        objects = client.CustomObjectsApi(api)
        for item in objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
            where = (GROUP, VERSION, item["metadata"]["namespace"], PLURAL, item["metadata"]["name"])
            try:
                objects.patch_namespaced_custom_object(*where, {"metadata": {"finalizers": None}})
                objects.delete_namespaced_custom_object(*where)
            except ApiException as e:
                if e.status != 404:
                    raise


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
