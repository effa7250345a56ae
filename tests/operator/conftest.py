"""Operator test helpers: the generated CRD installed once on the session's API server."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

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
