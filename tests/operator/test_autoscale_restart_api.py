"""An operator started again in the middle of the scale-down delay goes on counting it (issue 38): the streak of
decisions within target lives on status.autoscaling, not in the memory of the operator that saw it. The real
operator (kopf, watching the test's namespace only) runs twice against the real API server, real Kafka gives the
lag; the lanes' commits are written to the progress topic as a lane writes them."""
from __future__ import annotations

import time

import pytest

from .conftest import KMM2, running_operator, wait_for
from .test_autoscale_api import _commit, _entry, _seconds
from .test_operator import names

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

DELAY_S = 30


def _operator(kube, namespace: str):
    """One life of the operator, watching the test's namespace only."""
    return running_operator(kube, "--namespace", namespace)


def test_a_restarted_operator_goes_on_counting_the_scale_down_delay(kube, kmm2_crd, kapi, namespace, kafka_a,
                                                                    kafka_b, topic) -> None:
    from confluent_kafka import Producer

    from sparkmirror.progress import PROGRESS_TOPIC_CONFIG

    t = topic(kafka_a, partitions=4)
    progress = f"progress-{namespace}"[:200]
    topic(kafka_b, partitions=1, config=PROGRESS_TOPIC_CONFIG, name=progress)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for i in range(400):
        p.produce(t, value=b"x", partition=i % 4)
    assert p.flush(120) == 0
    # everything copied, a while ago: lag 0, nothing arriving; four lanes are more than that needs
    _commit(kafka_b, progress, t, [(q, 0, 99) for q in range(4)], int(time.time() * 1000) - 60_000, generation=1)
    spec = {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap}, "progressTopic": progress,
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap}, "topicsPattern": t}],
            "spark": {"parallelism": 4, "executor": {"instances": 4, "cores": 1}},
            "autoscaling": {"minLanes": 1, "maxLanes": 4, "minExecutors": 1, "maxExecutors": 4,
                            "targetLagSeconds": 60, "cooldownSeconds": 0, "scaleDownDelaySeconds": DELAY_S}}

    with _operator(kube, namespace):
        kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                     "metadata": {"name": "restart", "namespace": namespace}, "spec": spec})
        first = wait_for("within target", lambda: (e := _entry(kapi, namespace, "restart")).get("withinTargetSince")
                         and e, timeout=60)
        since = _seconds(first["withinTargetSince"])
        assert (first["lanes"], first["decision"]) == (4, "hold"), first
        assert first["reason"] == f"within target; scaling down only after {DELAY_S} s of it", first
        time.sleep(max(since + DELAY_S / 2 - time.time(), 0))
    gone = _entry(kapi, namespace, "restart")
    assert (gone["lanes"], gone["decision"]) == (4, "hold") and names(kapi, "SparkApplication", namespace,
                                                                       "restart") == ["restart-a"], gone

    restarted = time.time()
    with _operator(kube, namespace):
        down = wait_for("scaled down", lambda: (e := _entry(kapi, namespace, "restart")).get("decision") == "down"
                        and e, timeout=90)
        assert down["withinTargetSince"] == first["withinTargetSince"], (first, down)
        decided = _seconds(down["time"])
        assert decided >= since + DELAY_S, (first, down)  # the delay held across the restart ...
        assert decided < restarted + DELAY_S - 2, (restarted, down)  # ... and did not start over with it
        assert down["lanes"] < 4 and down["executors"] == down["lanes"], down
        wait_for("the next generation", lambda: names(kapi, "SparkApplication", namespace, "restart")
                 == ["restart-a", "restart-a-g2"])
        kapi.delete(KMM2, namespace, "restart")  # no more refreshes of it (an operator that sees it later ends it)
