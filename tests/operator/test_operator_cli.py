"""`sparkmirror operator` as its own process against a kubeconfig (no in-process operator in this module)."""
from __future__ import annotations

import pytest

from .conftest import wait_for
from .test_operator import names, resource, secret

pytestmark = pytest.mark.k8s


def test_sparkmirror_operator_command(kube, kmm2_crd, kapi, namespace, tmp_path) -> None:
    """`sparkmirror operator` against a kubeconfig, watching one namespace, as a separate process."""
    import os
    import signal
    import subprocess
    import sys

    log = tmp_path / "operator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "sparkmirror.cli", "operator", "--kubeconfig",
                                 str(kube.kubeconfig), "-n", namespace, "--status-interval", "2"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        kapi.create(secret(namespace, "mirror-user", {"password": "pw"}))
        kapi.create(resource("cli", namespace))
        wait_for("apps from the CLI operator", lambda: names(kapi, "SparkApplication", namespace, "cli")
                 == ["cli-a", "cli-c"], timeout=60)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert "s3cr3t" not in log.read_text()
