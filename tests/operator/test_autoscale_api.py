"""Autoscaling on the real API server and real Kafka, the operator running: a lag above target makes the operator
start a new worker generation with more lanes and executors (the handoff path, the copying generation left
running), and the decision is on the status and an Event. The lanes' commits are written to the progress topic
as a lane writes them, so the lag and rate are the operator's own readings from Kafka."""
from __future__ import annotations

import time

import pytest

from sparkmirror.resource.flowgroup import FlowGroupConfig

from .conftest import KMM2, kmm2_status, wait_for
from .test_operator import names

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]


def test_lag_above_target_starts_a_generation_with_more_lanes(operator, kapi, namespace, kafka_a, kafka_b,
                                                               topic) -> None:
    from confluent_kafka import Producer

    from sparkmirror.progress import PROGRESS_TOPIC_CONFIG, ProgressRecord

    t = topic(kafka_a, partitions=4)
    progress = f"progress-{namespace}"[:200]
    topic(kafka_b, partitions=1, config=PROGRESS_TOPIC_CONFIG, name=progress)
    spec = {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap}, "progressTopic": progress,
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap}, "topicsPattern": t}],
            "spark": {"parallelism": 1, "executor": {"instances": 1, "cores": 1}},
            "upgrade": {"readyTimeoutSeconds": 600},
            "autoscaling": {"minLanes": 1, "maxLanes": 4, "minExecutors": 1, "maxExecutors": 4,
                            "targetLagSeconds": 60, "cooldownSeconds": 0, "scaleDownDelaySeconds": 600}}
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "scale", "namespace": namespace}, "spec": spec})

    def entry() -> dict:
        return next(iter(kmm2_status(kapi, namespace, "scale").get("autoscaling") or []), {})

    held = wait_for("a first decision", lambda: (e := entry()) and "figures" in e and e)
    assert (held["lanes"], held["executors"], held["decision"]) == (1, 1, "hold"), held
    assert names(kapi, "SparkApplication", namespace, "scale") == ["scale-a"]

    # a burst: 20,000 records on the source; one lane committed 600 of them in the last 30 s (20/s)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "linger.ms": 20})
    for i in range(20_000):
        p.produce(t, value=b"x" * 10, partition=i % 4)
    p.flush(30)
    rec = ProgressRecord("a", t, 0, next_offset=600, source_first=0, source_last=599, target_topic=f"a.{t}",
                         target_first=0, target_last=599, count=600, commit_ms=int(time.time() * 1000) + 60_000,
                         generation=1, flow_group="a", mirror="a", lane=0)
    pp = Producer({"bootstrap.servers": kafka_b.bootstrap})
    pp.produce(progress, key=rec.key(), value=rec.value())
    pp.flush(10)

    up = wait_for("scaled up", lambda: (e := entry()).get("decision") == "up" and e, timeout=90)
    assert (up["lanes"], up["executors"]) == (4, 4), up  # (20/s + 19,400 over 60 s) at 20/s a lane: capped at 4
    figures = up["figures"]
    assert figures["lag"] == 19_400 and figures["ratePerSecond"] == 20.0 and figures["perLanePerSecond"] == 20.0
    assert figures["lagSeconds"] == 970.0 and figures["wantLanes"] == 4, figures
    assert "above the 60 s target" in up["reason"] and up["lastChangeTime"] == up["time"]

    # the change goes through a new worker generation; the one copying keeps its application and its Lease
    apps = wait_for("generation 2", lambda: (n := names(kapi, "SparkApplication", namespace, "scale"))
                    == ["scale-a", "scale-a-g2"] and n)
    assert apps == ["scale-a", "scale-a-g2"]
    g2 = kapi.get("SparkApplication", namespace, "scale-a-g2")
    assert g2["spec"]["executor"]["instances"] == 4
    assert kapi.get("SparkApplication", namespace, "scale-a")["spec"]["executor"]["instances"] == 1
    configs = {cm["metadata"]["name"]: FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
               for cm in kapi.list("ConfigMap", namespace, "sparkmirror.io/resource=scale")
               if "flowgroup.yaml" in (cm.get("data") or {})}
    lanes = {c.worker.generation: [c.lanes_of(m) for m in c.mirrors] for c in configs.values()}
    assert lanes == {1: [1], 2: [4]}, lanes
    lease = kapi.get("Lease", namespace, "scale-a")
    assert lease["metadata"]["annotations"]["sparkmirror.io/holder-generation"] == "1"  # copying never stopped

    event = wait_for("ScaledUp event", lambda: next((e for e in kapi.list("Event", namespace)
                                                     if e.get("reason") == "ScaledUp"), None))
    assert "1 -> 4 lanes per mirror, 1 -> 4 executors" in event["message"] and "lag 19400" in event["message"]

    # while the handoff is under way, nothing more changes: no third generation
    wait_for("held during the handoff", lambda: "handoff is under way" in entry().get("reason", ""), timeout=30)
    assert names(kapi, "SparkApplication", namespace, "scale") == ["scale-a", "scale-a-g2"]
    assert entry()["lanes"] == 4 and entry()["lastChangeTime"] == up["lastChangeTime"]
