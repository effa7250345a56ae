"""Failover through the resource: `spec.failover` on the real API server, the operator acting on it, the local
runner playing the Spark operator, real Kafka 4.4. A consumer group moves to the target exactly (every record it
had not read, once), and so does a share group (KIP-932: its start offsets, read by Kafka's own
kafka-console-share-consumer on both sides); the flow group's application goes; taken off the list, the mirror
copies on from where it stopped, nothing lost or repeated."""
from __future__ import annotations

import time

import pytest

from sparkmirror_dev.testing import (commit_group, consume_as_group, count_records, group_offsets, produce_numbered,
                                     read_topic, unique_name)

from tests.support.sharetools import described, share_consume, start_earliest

from .conftest import KMM2, condition as _cond, kmm2_status as _status, merge_patch as _patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(2.4)]


@pytest.mark.timeout(900)
def test_failover_on_the_resource_moves_groups_exactly_and_undoes(operator, kapi, namespace, kafka_a, kafka_b,
                                                                  topic, tmp_path, figure) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    src = topic(kafka_a, partitions=2)
    dst = f"a.{src}"
    group = unique_name("fo-app")
    shared = unique_name("fo-app-share")  # a share group of the same selection
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
        # the share group reads part of the topic on the source (Kafka's console share consumer acknowledges what
        # it prints, in order); the checkpoint rounds do not set it on the target (no syncGroupOffsets): the
        # operator's failover does, with the group's configs (set on the source only: the target's group gets them)
        start_earliest(kafka_a.bootstrap, shared)
        on_source = share_consume(kafka_a.bootstrap, src, shared, max_messages=250)
        assert len(on_source) == 250
        started = {int(r.split()[2]) for r in described(kafka_a.bootstrap, shared) if r.split()[3].isdigit()}
        assert started  # kafka-share-groups: the partitions the group has a start offset for on the source

        # a planned switch: the mirror catches up, stops, the group's offsets are translated and committed
        t0 = time.monotonic()
        _patch(kapi, namespace, name, {"spec": {"failover": {"mirrors": ["a"], "groupsPattern": f"{group}|{shared}",
                                                             "waitCaughtUpSeconds": 120}}})
        st = wait_for("the failover on the status", lambda: (s := _status(kapi, namespace, name)).get("failover")
                      and _cond(s, "FailedOver").get("status") == "True" and s, timeout=240, interval=1.0)
        took = time.monotonic() - t0
        record = st["failover"][0]
        assert {k: record[k] for k in ("mirror", "flowGroups", "offsetsFrom", "groupsMoved", "partitionsMoved",
                                       "notCopied", "ok", "notMoved")} == \
            {"mirror": "a", "flowGroups": ["a"], "offsetsFrom": "source", "groupsMoved": 1, "partitionsMoved": 2,
             "notCopied": 0, "ok": True, "notMoved": []}, record
        # the share group, per group on the status: every partition it has a start offset for set on the target
        assert record["shareGroupsMoved"] == 1 and record["shareGroupsNote"] == "", record
        assert record["shareGroups"] == [{"group": shared, "moved": True, "partitionsMoved": len(started),
                                          "notMoved": [], "configs": ["share.auto.offset.reset=earliest"],
                                          "configsNotCarried": []}], record
        assert "share groups: 1 moved" in _cond(st, "FailedOver")["message"]
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
        # the share group goes on on the target from where it was: nothing missing, nothing read twice
        on_dst = described(kafka_b.bootstrap, shared)
        print("target share group:", *on_dst, sep="\n  ")
        assert {int(r.split()[2]) for r in on_dst if r.split()[3].isdigit()} == started
        on_target = share_consume(kafka_b.bootstrap, dst, shared)
        every = {(p, q) for p in range(2) for q in range(200)}
        missing = every - set(on_source) - set(on_target)
        twice = len(set(on_source) & set(on_target)) + len(on_target) - len(set(on_target))
        assert not missing and twice == 0, (sorted(missing)[:20], twice)
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
           "patch; the moved group read 240 records on the target, each once; the share group, 250 read on the "
           f"source, {len(on_target)} on the target, none missing or twice; after taking it off the list, 440 records "
           "once")
