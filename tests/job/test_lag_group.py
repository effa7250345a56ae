"""Lag in the tools people already have: with `sourceOffsetsGroup` set, the mirror commits its position to that
group on the source, and Kafka's own `kafka-consumer-groups.sh --describe` (its ConsumerGroupCommand, run from
the release's jars) shows per partition the offset the mirror copied up to (counted on the target), lag 0 once
caught up and the records that wait while they wait. A group that consumers joined is a user's and is never
written."""
from __future__ import annotations

import logging
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sparkmirror.resource.flowgroup import Delivery
from sparkmirror_dev import install, paths
from sparkmirror_dev.procs import java_cmd
from sparkmirror_dev.testing import create_topic, read_topic
from .conftest import close_kept_lanes, end_offsets, mirror_once, produce_numbered, unique_name

pytestmark = pytest.mark.minutes(1.0)

PARTS = 3
RECORDS = 150
EXTRA_ON_0 = 40  # partition 0 holds more: the tool's rows must differ per partition
WAITING = 25  # records per partition produced after the mirror ran: its lag


def describe_group(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) as `kafka-consumer-groups.sh --describe` prints them
    ({} for a group the tool does not find)."""
    cmd = java_cmd(install.kafka(paths.KAFKA_VERSION), "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                   "--bootstrap-server", bootstrap, "--describe", "--group", group, heap="256m",
                   log4j=False)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    print(out.stdout)
    if "GroupIdNotFoundException" in out.stdout + out.stderr or "does not exist" in out.stdout:
        return {}
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.strip()]
    head = next(i for i, ln in enumerate(lines) if ln[:2] == ["GROUP", "TOPIC"])
    cols = lines[head]
    rows = {}
    for ln in lines[head + 1:]:
        row = dict(zip(cols, ln))
        if row.get("GROUP") == group:
            rows[int(row["PARTITION"])] = (int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"]), int(row["LAG"]))
    return rows


@pytest.mark.parametrize("delivery", [Delivery.EXACTLY_ONCE, Delivery.AT_LEAST_ONCE])
def test_lag_shows_in_kafka_consumer_groups(kafka_a, kafka_b, flowgroup, delivery) -> None:
    """Both commit paths report: exactly-once's in the loop, at-least-once's pipelined."""
    topic, group = unique_name("lagged"), unique_name("mirror-lag")
    create_topic(kafka_a.bootstrap, topic, PARTS)
    produce_numbered(kafka_a.bootstrap, topic, PARTS, 0, RECORDS)
    p = Producer({"bootstrap.servers": kafka_a.bootstrap})
    for i in range(EXTRA_ON_0):
        p.produce(topic, value=f"0:{RECORDS + i}".encode(), partition=0)
    assert p.flush(30) == 0

    cfg = flowgroup(topic, mirror={"sourceOffsetsGroup": group}, delivery=delivery)
    try:
        routes = mirror_once(cfg)
        target = routes[0].target_topic
        copied = {q: len(rs) for q, rs in read_topic(kafka_b.bootstrap, target).items()}
        assert copied == {0: RECORDS + EXTRA_ON_0, 1: RECORDS, 2: RECORDS}
        caught_up = describe_group(kafka_a.bootstrap, group)
        assert caught_up == {q: (copied[q], copied[q], 0) for q in range(PARTS)}

        produce_numbered(kafka_a.bootstrap, topic, PARTS, RECORDS + EXTRA_ON_0, WAITING)
        waiting = describe_group(kafka_a.bootstrap, group)
        assert waiting == {q: (copied[q], copied[q] + WAITING, WAITING) for q in range(PARTS)}

        mirror_once(cfg)
        again = {q: len(rs) for q, rs in read_topic(kafka_b.bootstrap, target).items()}
        assert again == {q: copied[q] + WAITING for q in range(PARTS)}
        assert describe_group(kafka_a.bootstrap, group) == {q: (again[q], again[q], 0) for q in range(PARTS)}
    finally:
        close_kept_lanes()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_users_group_is_never_written(kafka_a, kafka_b, flowgroup, caplog, protocol) -> None:
    """An application's group (consumers joined it, with either group protocol; stopped now, so the broker
    would take a standalone commit): naming it on the mirror leaves its offsets as the application committed
    them."""
    topic, group = unique_name("users"), unique_name("app")
    create_topic(kafka_a.bootstrap, topic, 1)
    produce_numbered(kafka_a.bootstrap, topic, 1, 0, 50)
    app = Consumer({"bootstrap.servers": kafka_a.bootstrap, "group.id": group, "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "group.protocol": protocol})
    try:
        app.subscribe([topic])
        got = 0
        while got < 10:
            got += sum(1 for m in app.consume(10, timeout=1.0) if m.error() is None)
        app.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    finally:
        app.close()

    cfg = flowgroup(topic, mirror={"sourceOffsetsGroup": group})
    caplog.set_level(logging.WARNING, logger="sparkmirror.copying.groupreport")
    try:
        routes = mirror_once(cfg)
    finally:
        close_kept_lanes()
    assert end_offsets(kafka_b.bootstrap, routes[0].target_topic)[0] >= 50  # the mirror copied
    assert describe_group(kafka_a.bootstrap, group) == {0: (10, 50, 40)}  # the application's offset stands
    refusals = [r.getMessage() for r in caplog.records if "not the mirror's own" in r.getMessage()]
    assert len(refusals) == 1, refusals  # the lane copying the partition said so, once


def test_a_refused_group_is_one_log_line_and_the_copy_goes_on(secured_kafka, kafka_b, tmp_path, caplog) -> None:
    """The source denies the mirror's principal READ on the group (GROUP_AUTHORIZATION_FAILED): every record is
    copied, each lane says so once, and the group holds nothing."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    from sparkmirror.resource.flowgroup import FlowGroupConfig

    src = secured_kafka
    topic, group = unique_name("denied"), unique_name("denied-lag")
    create_topic(src.bootstrap, topic, PARTS)
    produce_numbered(src.bootstrap, topic, PARTS, 0, 60)
    deny_fields = (ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:mirror", "*", AclOperation.READ,
                   AclPermissionType.DENY)
    deny = AclBinding(*deny_fields)
    admin = AdminClient({"bootstrap.servers": src.bootstrap})
    for fut in admin.create_acls([deny]).values():
        fut.result(timeout=30)
    pw = tmp_path / "mirror.password"
    pw.write_text(src.security.scram_users["mirror"])
    cfg = FlowGroupConfig.model_validate({
        "name": unique_name("denied"), "progressTopic": unique_name("progress"), "lanes": 2, "epochSeconds": 3,
        "clusters": [{"alias": "src", "bootstrapServers": src.bootstrap_of("SASL_PLAINTEXT"),
                      "authentication": {"type": "scram-sha-512", "username": "mirror", "password": {"file": str(pw)}}},
                     {"alias": "b", "bootstrapServers": kafka_b.bootstrap}],
        "mirrors": [{"name": "src-to-b", "source": "src", "target": "b", "topics": topic, "emitHeartbeats": False,
                     "syncTopicAcls": False, "sourceOffsetsGroup": group}]})
    caplog.set_level(logging.WARNING, logger="sparkmirror.copying.groupreport")
    try:
        routes = mirror_once(cfg)
    finally:
        close_kept_lanes()
        for fut in admin.delete_acls([AclBindingFilter(*deny_fields)]).values():
            fut.result(timeout=30)
    copied = {q: len(rs) for q, rs in read_topic(kafka_b.bootstrap, routes[0].target_topic).items()}
    assert copied == {q: 60 for q in range(PARTS)}
    said = [r.getMessage() for r in caplog.records if group in r.getMessage()]
    assert len(said) == 2 and all("GROUP_AUTHORIZATION_FAILED" in m for m in said), said  # one per lane
    assert describe_group(src.bootstrap, group) == {}
