"""The real operator against a local API server, for the operator tests and the autoscale bench (not product):
the KafkaMirrorMaker2 CRD installed, and one life of the operator (kopf, in-process)."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def wait_crd_established(api: Any, name: str, timeout: float = 60.0) -> None:
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


def install_kmm2_crd(kube: Any) -> None:
    """The generated KafkaMirrorMaker2 CRD (server-side apply, so re-installs are no-ops), usable once it lists."""
    from kubernetes import client

    from sparkmirror_operator.crdgen import TARGETS

    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(TARGETS[0]))
    with kube.api_client() as api:
        wait_crd_established(api, "kafkamirrormaker2s.sparkmirror.io")
        # discovery of a new group can lag behind Established: wait until a list succeeds
        co = client.CustomObjectsApi(api)
        deadline = time.monotonic() + 60
        while True:
            try:
                co.list_cluster_custom_object("sparkmirror.io", "v1alpha1", "kafkamirrormaker2s")
                return
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


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


