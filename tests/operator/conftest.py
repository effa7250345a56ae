"""Operator test helpers: the generated CRD installed once on the session's API server."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

_log = logging.getLogger("tests.operator.wait")

# the operator's status/lag timer: fast in tests (read when sparkmirror_operator.handlers is imported)
os.environ.setdefault("SPARKMIRROR_STATUS_INTERVAL", "2")

from sparkmirror_operator.crdgen import TARGETS

CRD = TARGETS[0]


def wait_crd_established(api, name: str, timeout: float = 60.0) -> None:
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(name)
        conds = {c.type: c.status for c in (crd.status.conditions or [])} if crd.status else {}
        if conds.get("Established") == "True":
            return
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} not established")


@pytest.fixture(scope="session")
def kmm2_crd(kube) -> Path:
    """The generated KafkaMirrorMaker2 CRD, installed (server-side apply, so re-installs are no-ops)."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    with kube.api_client() as api:
        wait_crd_established(api, "kafkamirrormaker2s.sparkmirror.io")
        # discovery of a new group can lag behind Established: wait until a list succeeds
        from kubernetes import client

        co = client.CustomObjectsApi(api)
        deadline = time.monotonic() + 60
        while True:
            try:
                co.list_cluster_custom_object("sparkmirror.io", "v1alpha1", "kafkamirrormaker2s")
                break
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return CRD


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 120.0, interval: float = 0.2) -> Any:
    """Poll fn until it returns something truthy; fail naming `what` and the last value or error. 120 s by
    default: in CI's loaded parallel phase the operator took over 60 s to act on a change (a wait, not a speed
    claim: a passing wait costs nothing)."""
    start = time.monotonic()
    deadline = start + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                _log.info("waited %.2fs for %s", time.monotonic() - start, what)
                return last
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


@contextmanager
def running_operator(kube, *scope: str) -> Iterator[None]:
    """One life of the real operator (kopf, in-process) against the session's API server, watching `scope`
    (`--all-namespaces`, or `--namespace NS`); stopped, its memory with it, when the block ends."""
    from kopf.testing import KopfRunner

    old = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kube.kubeconfig)
    try:
        with KopfRunner(["run", *scope, "--standalone", "-m", "sparkmirror_operator.handlers"], timeout=60) as runner:
            yield
        if runner.exception is not None:
            raise runner.exception
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old


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
