"""`sparkmirror run` under spec.autoscaling, on real Kafka and Spark: the local runner's driver with the operator's
rule (`sparkmirror.autoscale.decide`, the same function) on its own monitors' lag and rate. Records flow at
150/s over three partitions into a flow group of one lane with a target of 40 records/s per lane: after the
30 s the rule takes to measure the incoming rate, the runner goes to more lanes (3 at the full rate, maxLanes)
through a handoff in its own driver, and holds there (cooldown). Every record is counted on the target: none
missing, none twice."""
from __future__ import annotations

import threading
import time

import pytest

from sparkmirror.resource.autoscaling import AutoscalingSpec
from sparkmirror.runner.autoscaler import LocalAutoscaler, lanes_of
from sparkmirror.runner.local import LocalRun, wait
from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records

from .conftest import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(1.5)]


def test_the_local_runner_scales_up_by_the_operators_rule(kafka_a, kafka_b, topic, flowgroup, tmp_path,
                                                          figure) -> None:
    t = topic(kafka_a, partitions=3)
    cfg = flowgroup(t, name="grow", lanes=1, epochSeconds=3)
    spec = AutoscalingSpec(minLanes=1, maxLanes=3, targetRecordsPerSecondPerLane=40, cooldownSeconds=600,
                           scaleDownDelaySeconds=600)
    scaler = LocalAutoscaler({"grow": spec}, interval=2.0)
    said: list[str] = []
    run = LocalRun([cfg], checkpoint_root=str(tmp_path / "ckpt"), most_lanes={"grow": spec.maxLanes})
    assert run.master == "local[8,4]"  # threads for the 3 lanes autoscaling may run, twice over, and 2
    producer = NumberedProducer(kafka_a.bootstrap, t, rate=50)
    producer.start()
    try:
        run.start()
        wait_for(lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) > 300, 180, "copying to start")
        t0 = time.monotonic()
        outcome = wait(run, threading.Event(), on_tick=lambda r: said.extend(scaler.tick(r)),
                       until=lambda r: lanes_of(r.configs[0]) != 1, interval=1.0, timeout=240)
        took = time.monotonic() - t0
        assert outcome == "done" and not run.failures(), (outcome, run.failures(), said)
        up = scaler.decision("grow")
        # the monitor's rate still ramps up while it decides: more than one lane's 40/s, up to 150/s
        assert up is not None and up.action == "up" and 2 <= up.lanes <= 3, up
        assert f"needs {up.lanes} lanes at 40/s each" in up.reason and up.figures["incomingPerSecond"] > 40, up
        assert run.configs[0].worker.generation == 2
        assert [run.configs[0].lanes_of(m) for m in cfg.mirrors] == [up.lanes]
        assert said[0].startswith(f"flow group grow: 1 -> {up.lanes} lanes per mirror: incoming"), said
        assert said[1].startswith("handed grow over to grow (worker generation 2)"), said
        # the cooldown holds it: no further change
        wait(run, threading.Event(), on_tick=lambda r: said.extend(scaler.tick(r)), interval=1.0, timeout=8)
        held = scaler.decision("grow")
        assert held is not None and held.action == "hold" and held.reason.startswith("cooldown"), held
        assert len(said) == 2 and run.configs[0].worker.generation == 2, said
        sent = producer.stop()
        wait_for(lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) >= 3 * sent, 180, f"a.{t} to catch up")
        time.sleep(3)  # a duplicate would land after the count was reached
        assert not run.failures(), run.failures()
    finally:
        producer.stop()
        run.stop()
    check_numbered(kafka_b.bootstrap, f"a.{t}", 3, sent)
    figure("run_autoscale_up", f"sparkmirror run: 1 -> {up.lanes} lanes by the operator's rule ({up.reason}), "
           f"handed over {took:.0f} s after copying began; {3 * sent} records, 0 missing, 0 duplicated")
