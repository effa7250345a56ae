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
        # --verbose: DEBUG logging, the most the operator ever writes, must still hold no credential
        proc = subprocess.Popen([sys.executable, "-m", "sparkmirror.cli", "operator", "--kubeconfig",
                                 str(kube.kubeconfig), "-n", namespace, "--status-interval", "2", "--verbose"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        kapi.create(secret(namespace, "mirror-user", {"password": "s3cr3t-cli"}))
        kapi.create(resource("cli", namespace))
        wait_for("apps from the CLI operator", lambda: names(kapi, "SparkApplication", namespace, "cli")
                 == ["cli-a", "cli-c"], timeout=60)
        # the status timer has run with the Secret resolved for its Kafka clients (lag of unreachable clusters)
        wait_for("lag refreshed", lambda: "ClusterUnreachable" in str(kapi.get("KafkaMirrorMaker2", namespace,
                                                                               "cli").get("status")), timeout=60)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    assert "cli-a" in text  # the log is the operator's
    assert "s3cr3t-cli" not in text
