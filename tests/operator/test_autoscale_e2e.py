"""Scaling up mid-stream, end to end: the operator on the real API server, the local runner playing the Spark
operator (each worker generation its own Spark driver), real Kafka. Records flow at a steady rate; autoscaling
turned on finds one lane short of its records/s-per-lane target and scales to three lanes through a handoff.
Every record is counted on the target: none missing, none twice."""
from __future__ import annotations

import os

import time

import pytest

from .conftest import KMM2, condition as _cond, kmm2_status as _status, merge_patch as _patch, wait_for

# In `make campaign`, not `make test` (4-9 min solo on 2 cores kept the suite over its hour): make test keeps the
# autoscaling decision on the API server (test_autoscale_api.py) and a counted 1 -> 3 lane scale-up on real Spark
# through `sparkmirror run` (tests/job/test_run_autoscale.py).
pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(5), pytest.mark.solo,
              pytest.mark.skipif(os.environ.get("SPARKMIRROR_CAMPAIGN") != "1",
                                 reason="campaign (make campaign): autoscaling through the operator, counted")]


@pytest.mark.timeout(1200)  # two Spark drivers one after the other, on 2 shared cores
def test_scaling_up_mid_stream_loses_and_repeats_nothing(operator, kapi, namespace, kafka_a, kafka_b, topic,
                                                         tmp_path, figure) -> None:
    from tests.support.counted import CountedMirror

    t = topic(kafka_a, partitions=3)
    name = "grow"
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": t,
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 1, "epochSeconds": 5, "executor": {"instances": 1}},
                     "upgrade": {"readyTimeoutSeconds": 480, "handoffTimeoutSeconds": 60},
                     # off at first: the first generation runs one lane until the test turns it on
                     "autoscaling": {"enabled": False, "minLanes": 1, "maxLanes": 3, "maxExecutors": 1,
                                     "targetRecordsPerSecondPerLane": 40, "cooldownSeconds": 600,
                                     "scaleDownDelaySeconds": 600}}}
    with CountedMirror(kapi, namespace, tmp_path / "runner", kafka_a.bootstrap, kafka_b.bootstrap, t) as counted:
        counted.start(body, copied=300, timeout=300)  # 150 records/s over 3 partitions
        time.sleep(10)  # the rate window fills with the lane's commits
        t0 = time.monotonic()
        _patch(kapi, namespace, name, {"spec": {"autoscaling": {"enabled": True}}})
        up = wait_for("scaled up", lambda: next((e for e in _status(kapi, namespace, name).get("autoscaling")
                                                 or [] if e.get("lastChangeTime")), None), timeout=120)
        assert up["lanes"] >= 2 and up["executors"] == 1 and "lanes at 40/s each" in up["reason"], up

        def handed_over():
            st = _status(kapi, namespace, name)
            return st.get("handoffs") and _cond(st, "Upgrading").get("status") == "False" and st

        try:
            st = wait_for("the scaled generation took over", handed_over, timeout=480, interval=1.0)
        except AssertionError as e:
            st = _status(kapi, namespace, name)
            raise AssertionError(f"{e}; conditions: {st.get('conditions')}; rollback: {st.get('rollback')}; "
                                 f"runner errors: {counted.runner.errors}") from None
        took = round(time.monotonic() - t0)
        assert not counted.runner.errors, counted.runner.errors
        assert {g["name"]: g["workerGeneration"] for g in st["flowGroups"]} == {"a": 2}, st["flowGroups"]
        time.sleep(10)  # the new lanes copy a while
        counted.caught_up(timeout=240)
        assert [a["metadata"]["name"] for a in kapi.list("SparkApplication", namespace)] == [f"{name}-a-g2"]
        events = [e for e in kapi.list("Event", namespace) if e.get("reason") == "ScaledUp"]
        assert len(events) == 1 and f"1 -> {up['lanes']} lanes per mirror" in events[0]["message"], events
    counted.check()
    sent = counted.sent
    figure("autoscale_up_mid_stream", f"1 -> {up['lanes']} lanes by autoscaling ({up['reason']}), handoff "
           f"recorded {took} s after it was turned on; {3 * sent} records, 0 missing, 0 duplicated")
