"""A target with too few brokers reaches the resource's status (issue 37 item 5): the real job, run by the
stand-in runner against real Kafka, ends with EXIT_TOO_FEW_BROKERS and writes its words on its Lease; the
Reconciler, called directly on the real API server, turns them into Degraded/ReplicationFactorRefused."""
from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient

from sparkmirror.replicas import REASON
from sparkmirror.resource.names import EXIT_TOO_FEW_BROKERS, LEASE_FAILURE
from sparkmirror_operator.kubeapi import KubeApi
from sparkmirror_operator.reconcile import Reconciler

from .conftest import wait_for
from .test_handoff_api import _annotations, _cond, _reconcile
from .test_operator import KMM2, names

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(2)]


def test_too_few_target_brokers_is_a_degraded_condition_with_the_jobs_words(kube, kmm2_crd, kapi, namespace,
                                                                            kafka_a, kafka_b, topic,
                                                                            tmp_path, monkeypatch) -> None:
    """`replication.factor: 3` towards the 1-broker cluster b: the status says ReplicationFactorRefused with the
    topic, the factor, the brokers and the key to set; the application stays, as the Spark operator restarts it
    with backoff (adding brokers cures it without a change of the resource)."""
    from tests.support.spark_runner import LocalSparkRunner

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))  # the job's Lease client (its runner's env)
    t = topic(kafka_a, partitions=1)
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "fewer", "namespace": namespace},
                 "spec": {"version": "1.0", "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                          "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                       "topicsPattern": t,
                                       "sourceConnector": {"config": {"replication.factor": 3}},
                                       "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}},
                                       "heartbeatConnector": {"config": {"emit.heartbeats.enabled": "false"}}}],
                          "spark": {"parallelism": 1, "epochSeconds": 3, "executor": {"instances": 1}}}})
    rec = Reconciler(KubeApi(kapi.api), lag_timeout=1.0)
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        _reconcile(rec, kapi, namespace, "fewer")

        def ended() -> dict | None:
            app = kapi.get("SparkApplication", namespace, "fewer-a")
            state = ((app or {}).get("status") or {}).get("applicationState") or {}
            return state if f"ExitCode: {EXIT_TOO_FEW_BROKERS}" in (state.get("errorMessage") or "") else None

        state = wait_for("the job to exit EXIT_TOO_FEW_BROKERS", ended, timeout=240, interval=0.5)
        assert state["state"] == "FAILING"  # OnFailure: the Spark operator submits it again after its backoff
        record = json.loads(_annotations(kapi, namespace, "fewer-a")[LEASE_FAILURE])
        assert record["exitCode"] == EXIT_TOO_FEW_BROKERS and record["generation"] == 1
        st = _reconcile(rec, kapi, namespace, "fewer")
        degraded, ready, stalled = _cond(st, "Degraded"), _cond(st, "Ready"), _cond(st, "Stalled")
        assert degraded["status"] == "True" and degraded["reason"] == REASON == "ReplicationFactorRefused"
        said = degraded["message"]
        assert f"topic 'a.{t}' needs replication factor 3 (replication.factor) but cluster 'b' has 1 broker(s): " \
               "set replication.factor in mirrors[" in said and "'s connector config to at most 1" in said, said
        assert "restarted with backoff" in degraded["message"] and ready["status"] == "False"
        assert stalled["status"] == "True"  # it needs someone: brokers added or the key set
        assert names(kapi, "SparkApplication", namespace, "fewer") == ["fewer-a"]  # not removed: restarted
        assert runner.errors == []
    assert f"a.{t}" not in AdminClient({"bootstrap.servers": kafka_b.bootstrap}).list_topics(timeout=10).topics
