"""Failover through the resource: `spec.failover` on the real API server, the operator acting on it, the local
runner playing the Spark operator, real Kafka. A consumer group moves to the target exactly (every record it
had not read, once); the flow group's application goes; taken off the list, the mirror copies on from where it
stopped, nothing lost or repeated."""
from __future__ import annotations

import time

import pytest

from sparkmirror_dev.testing import (commit_group, consume_as_group, count_records, group_offsets, produce_numbered,
                                     read_topic, unique_name)

from .conftest import KMM2, condition as _cond, kmm2_status as _status, merge_patch as _patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(3)]


@pytest.mark.timeout(900)
def test_failover_on_the_resource_moves_groups_exactly_and_undoes(operator, kapi, namespace, kafka_a, kafka_b,
                                                                  topic, tmp_path, figure) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    src = topic(kafka_a, partitions=2)
    dst = f"a.{src}"
    group = unique_name("fo-app")
    name = "fo"
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 150)
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": src, "groupsPattern": "fo-app-.*",
                                  "checkpointConnector": {"config": {"emit.checkpoints.interval.seconds": 2}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 5}}}
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner") as runner:
        kapi.create(body)
        wait_for("the first 300 records on the target", lambda: count_records(kafka_b.bootstrap, dst, 20) == 300,
                 timeout=240, interval=2.0)
        commit_group(kafka_a.bootstrap, group, {(src, 0): 60, (src, 1): 100})  # the group consumed part of it
        produce_numbered(kafka_a.bootstrap, src, 2, 150, 50)

        # a planned switch: the mirror catches up, stops, the group's offsets are translated and committed
        t0 = time.monotonic()
        _patch(kapi, namespace, name, {"spec": {"failover": {"mirrors": ["a"], "groupsPattern": group,
                                                             "waitCaughtUpSeconds": 120}}})
        st = wait_for("the failover on the status", lambda: (s := _status(kapi, namespace, name)).get("failover")
                      and _cond(s, "FailedOver").get("status") == "True" and s, timeout=240, interval=1.0)
        took = time.monotonic() - t0
        record = st["failover"][0]
        assert {k: record[k] for k in ("mirror", "flowGroups", "offsetsFrom", "groupsMoved", "partitionsMoved",
                                       "notCopied", "ok", "notMoved")} == \
            {"mirror": "a", "flowGroups": ["a"], "offsetsFrom": "source", "groupsMoved": 1, "partitionsMoved": 2,
             "notCopied": 0, "ok": True, "notMoved": []}, record
        wait_for("the flow group's application removed", lambda: not kapi.list("SparkApplication", namespace),
                 timeout=60, interval=1.0)
        st = wait_for("Ready, failed over", lambda: (s := _status(kapi, namespace, name)) and
                      _cond(s, "Ready").get("reason") == "FailedOver" and s, timeout=60, interval=1.0)
        assert _cond(st, "Ready")["status"] == "True" and "failed over" in st["flowGroups"][0]["message"]
        produce_numbered(kafka_a.bootstrap, src, 2, 200, 20)  # after the failover: they stay on the source
        assert group_offsets(kafka_b.bootstrap, group).keys() == {(dst, 0), (dst, 1)}
        # every record the group had not consumed on the source, exactly once, and nothing else
        assert consume_as_group(kafka_b.bootstrap, group, dst, 2) == {0: list(range(60, 200)),
                                                                      1: list(range(100, 200))}
        time.sleep(5)  # a lane still copying would land the 40 later records by now
        assert count_records(kafka_b.bootstrap, dst, 20) == 400

        # taken off the list: the failover is undone, the application comes back and copies on from where it stopped
        _patch(kapi, namespace, name, {"spec": {"failover": None}})
        wait_for("the failover undone", lambda: not (s := _status(kapi, namespace, name)).get("failover")
                 and not _cond(s, "FailedOver") and s, timeout=120, interval=1.0)
        wait_for("the 40 later records on the target", lambda: count_records(kafka_b.bootstrap, dst, 20) >= 440,
                 timeout=240, interval=2.0)
        time.sleep(3)  # a duplicate would land after the count was reached
        assert not runner.errors, runner.errors
    seqs = {p: [int(r.value.decode().split(":")[1]) for r in recs] for p, recs in read_topic(kafka_b.bootstrap, dst).items()}
    assert seqs == {0: list(range(220)), 1: list(range(220))}
    figure("resource_failover", f"failover through spec.failover: recorded on the status {took:.1f} s after the "
           "patch; the moved group read 240 records on the target, each once; after taking it off the list, 440 "
           "records once")
