"""An offset history that cannot fit the driver's memory (issue 39 item 4) reaches the resource's status the way
every permanent refusal does: the job exits 2 at start with its words on its Lease, the operator removes its
application, records the refusal and says so in those words (Degraded: ApplicationRefused), and does not run it
again. Real API server, real job on local Spark, real Kafka (the driver counts the source partitions it would
serve)."""
from __future__ import annotations

import json

import pytest

from sparkmirror_dev.testing import create_topic, unique_name
from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler
from sparkmirror_operator.restarts import ANNOTATION_REFUSED

from .conftest import wait_for
from .test_handoff_api import _annotations, _cond, _reconcile
from .test_operator import KMM2, names

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.minutes(2)]


def test_a_history_too_large_for_the_driver_is_a_refusal_on_the_status(kube, kmm2_crd, kapi, namespace, tmp_path,
                                                                      kafka_a, kafka_b, monkeypatch) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))  # the job's Lease client (its runner's env)

    topic = create_topic(kafka_a.bootstrap, unique_name("t"), 4)
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "hist", "namespace": namespace},
                 "spec": {"version": "1.0", "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                          "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                       "topicsPattern": topic}],
                          # 4 partitions x 100 M ranges: gigabytes, against a quarter of the runner's 512m
                          "spark": {"offsetHistory": 100_000_000}}})
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner"):
        _reconcile(rec, kapi, namespace, "hist")
        [app] = names(kapi, "SparkApplication", namespace, "hist")

        def exited() -> dict | None:
            state = ((kapi.get("SparkApplication", namespace, app) or {}).get("status") or {}).get(
                "applicationState") or {}
            return state if "ExitCode: 2" in (state.get("errorMessage") or "") else None

        wait_for("the job to refuse its history", exited, timeout=150)
        log = (tmp_path / "runner" / f"{app}.log").read_text(errors="replace")
        assert "sparkmirror: spec.spark.offsetHistory=100,000,000 ranges/partition needs" in log
        assert "for 4 source partitions" in log and "Traceback" not in log
        st = _reconcile(rec, kapi, namespace, "hist")
        assert names(kapi, "SparkApplication", namespace, "hist") == []  # not run again
        assert json.loads(_annotations(kapi, namespace, app)[ANNOTATION_REFUSED])["exitCode"] == 2  # its Lease
        degraded = _cond(st, "Degraded")
        assert degraded["reason"] == "ApplicationRefused" and "exited with code 2" in degraded["message"]
        # the job's words, from its Lease (the Spark operator's errorMessage carries only the exit code)
        assert "spec.spark.offsetHistory=100,000,000 ranges/partition needs" in degraded["message"], degraded
