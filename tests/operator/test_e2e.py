"""End to end with data: the operator on the real API server, a local runner playing the Spark operator and the
kubelet (tests/support/spark_runner.py), real Kafka clusters. Apply a resource; records produced on the source
arrive on the target; the resource becomes Ready with lag 0."""
from __future__ import annotations

import time

import pytest

from .conftest import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(1.4)]
KMM2 = "KafkaMirrorMaker2"


def count_records(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        md = c.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        total = 0
        for p in md.partitions:
            # committed records only: read_committed up to the last stable offset
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            c.assign([TopicPartition(topic, p, lo)])
            n = 0
            while True:
                msgs = c.consume(1000, timeout=1.0)
                if not msgs:
                    break
                n += sum(1 for m in msgs if m.error() is None)
            total += n
        return total
    finally:
        c.close()


def test_end_to_end_records_arrive_and_resource_becomes_ready(operator, kapi, namespace, kafka_a, kafka_b, topic,
                                                              tmp_path, figure) -> None:
    from confluent_kafka import Producer

    from tests.support.spark_runner import LocalSparkRunner

    t = topic(kafka_a, partitions=2)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for i in range(200):
        p.produce(t, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    p.flush(10)
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": "e2e", "namespace": namespace},
            "spec": {"version": "1.0",
                     "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": t,
                                  "sourceConnector": {"config": {"refresh.topics.interval.seconds": 2}},
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 1, "epochSeconds": 5, "executor": {"instances": 1}}}}
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        t0 = time.monotonic()
        kapi.create(body)
        wait_for("SparkApplication", lambda: kapi.get("SparkApplication", namespace, "e2e-a"), timeout=60)
        t_app = time.monotonic() - t0

        def ready():
            st = (kapi.get(KMM2, namespace, "e2e") or {}).get("status") or {}
            conds = {c["type"]: c for c in st.get("conditions", [])}
            return conds.get("Ready", {}).get("status") == "True" and st.get("lag") == 0 and st

        st = wait_for("Ready with lag 0", ready, timeout=300, interval=1.0)
        t_ready = time.monotonic() - t0
        assert runner.errors == []
        assert count_records(kafka_b.bootstrap, f"a.{t}") == 200
        assert st["flowGroups"][0]["sparkState"] == "RUNNING" and st["flowGroups"][0]["partitions"] == 2
        # more records: they arrive too, and lag returns to 0
        for i in range(50):
            p.produce(t, value=b"more", partition=i % 2)
        p.flush(10)
        wait_for("250 records on the target", lambda: count_records(kafka_b.bootstrap, f"a.{t}") == 250,
                 timeout=120, interval=1.0)
        wait_for("lag 0 again", lambda: (kapi.get(KMM2, namespace, "e2e")["status"].get("lag") == 0), timeout=60)

        # stopped: the application goes, the progress on the target stays; running again resumes exactly there
        path = f"/apis/sparkmirror.io/v1alpha1/namespaces/{namespace}/kafkamirrormaker2s/e2e"
        kapi._call("PATCH", path, [], {"spec": {"state": "stopped"}}, "application/merge-patch+json")
        wait_for("application removed", lambda: kapi.get("SparkApplication", namespace, "e2e-a") is None)
        wait_for("job stopped", lambda: "e2e-a" not in runner.jobs, timeout=60)
        for i in range(50):
            p.produce(t, value=b"while stopped", partition=i % 2)
        p.flush(10)
        assert wait_for("lag 50 while stopped", lambda: kapi.get(KMM2, namespace, "e2e")["status"].get("lag") == 50)
        kapi._call("PATCH", path, [], {"spec": {"state": "running"}}, "application/merge-patch+json")
        wait_for("Ready with lag 0 after restart", ready, timeout=300, interval=1.0)
        # exactly once: nothing lost, nothing repeated across the stop
        assert count_records(kafka_b.bootstrap, f"a.{t}") == 300
        figure("apply_to_spark_application_s", round(t_app, 2))
        figure("apply_to_ready_lag0_s", round(t_ready, 2))
        figure("apply_to_ready", f"apply -> SparkApplication created: {t_app:.2f}s; apply -> Ready with lag 0: "
               f"{t_ready:.2f}s")
