"""Share groups (KIP-932) across a failover: their start offsets carried by checkpoint rounds and by `failover`.

Real Kafka 4.4 brokers; the consumers are Kafka's own tools (kafka-console-share-consumer's main class, from the
release's jars), the offsets looked at with kafka-share-groups' too. Every record is numbered: none may be
missing after the failover; records delivered on both clusters (what the source group had acknowledged past its
start offset) are allowed by share-group semantics, and counted. The group's configs are set on the source only
(kafka-configs), and must be found on the target group, as Kafka's own tool describes it.
"""
from __future__ import annotations

import threading
import time

import pytest

from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.credentials import CredentialWatch
from sparkmirror.metrics import DriverServices
from sparkmirror.progress.state import OffsetMap, Range
from sparkmirror.sharegroups.admin import ShareGroupAdmin, SharesUnsupported
from sparkmirror.sharegroups.configs import GroupConfigAdmin
from sparkmirror.sharegroups.messages import DescribeShareGroupOffsetsResponse
from sparkmirror.sharegroups.moves import (NON_EMPTY_GROUP, UNKNOWN_ON_TARGET, AlterOutcome,
                                           ConfigCarry, ShareMove, applied, decide, plan_configs, translate_starts)
from sparkmirror.sharegroups.sync import ShareGroupSync
from sparkmirror.failover.run import failover
from sparkmirror_dev import install, paths
from sparkmirror_dev.testing import count_records, create_topic, produce_numbered, unique_name

from tests.support.sharetools import (described, end_offsets, group_configs, kafka_tool, set_group_configs,
                                      share_consume)

from .conftest import wait_for

pytestmark = pytest.mark.minutes(2.1)


def test_start_offsets_translate_through_the_offset_map() -> None:
    # source 0..99 -> target 0..99, 100..199 -> 150..249 (another writer wrote in between)
    m = OffsetMap([Range(0, 99, 0, 99, 100, 1, 0, "a.t", "t", 0, "a-to-b", "a"),
                   Range(100, 199, 150, 249, 100, 2, 0, "a.t", "t", 0, "a-to-b", "a")])
    rows = translate_starts("sg", {("t", 0): 120, ("t", 1): 5, ("other", 0): 3}, {("t", 0): m},
                            copies=lambda t: t == "t")
    assert [(r.source_topic, r.partition, r.target_topic, r.target_offset, r.action) for r in rows] == [
        ("t", 0, "a.t", 170, "set"), ("t", 1, "", None, "untranslated")]  # "other": not the mirror's
    assert decide(rows, {("a.t", 0): 170})[0].action == "kept"
    assert decide(rows, {("a.t", 0): 10})[0].detail == "was 10"
    busy = applied(rows, AlterOutcome("sg", "GroupNotEmptyError", NON_EMPTY_GROUP))
    assert [r.action for r in busy] == ["active", "untranslated"]
    refused = applied(rows, AlterOutcome("sg", partitions={("a.t", 0): "UnknownTopicOrPartitionError"}))
    assert refused[0].action == "failed" and "UnknownTopicOrPartition" in refused[0].detail


def test_configs_carried_are_those_set_on_the_source_known_on_the_target() -> None:
    want = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
            "share.delivery.count.limit": "3", "share.record.lock.duration.ms": "15000"}
    have = {"share.auto.offset.reset": ("latest", False), "share.isolation.level": ("read_committed", True),
            "share.record.lock.duration.ms": ("15000", False)}  # a 4.1 target: no share.delivery.count.limit
    todo, kept, left = plan_configs(want, have)
    # a target default equal to the source's value is set all the same: the group keeps it whatever the defaults
    assert todo == {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"}
    assert kept == {"share.isolation.level": "read_committed"}
    assert left == {"share.delivery.count.limit": UNKNOWN_ON_TARGET}
    assert ConfigCarry("g", left_out=left).ok and not ConfigCarry("g", refused={"x": "no"}).ok
    assert not ConfigCarry("g", error="cluster 'b' did not answer").ok


@pytest.mark.kafka
def test_share_offsets_admin_against_the_broker(kafka_a, topic) -> None:
    """Our schemas encode what Kafka 4.4 decodes, and decode what it answers; Kafka's own tool reads the same."""
    src = topic(kafka_a, 2)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 50)
    group = unique_name("sg-admin")
    admin = ShareGroupAdmin({"bootstrap.servers": kafka_a.bootstrap}, "a")
    try:
        assert admin.start_offsets(group) == {}  # no such group yet
        out = admin.alter(group, {(src, 0): 10, (src, 1): 20, (src, 9): 1})  # 4.4 makes the group
        assert out.code == 0 and out.partitions == {(src, 9): "UnknownTopicOrPartitionError"}
        assert admin.start_offsets(group) == {(src, 0): 10, (src, 1): 20}
        assert admin.list_groups()[group] == "Empty"
        rows = {tuple(r.split()[1:4]) for r in described(kafka_a.bootstrap, group)}
        assert rows == {(src, "0", "10"), (src, "1", "20")}
        assert DescribeShareGroupOffsetsResponse.max_version == 1  # Lag (KIP-1226) known, negotiated
    finally:
        admin.close()
    # group configs through confluent-kafka (ConfigResource GROUP): a refusal names the config and the reason
    configs = GroupConfigAdmin({"bootstrap.servers": kafka_a.bootstrap}, "a")
    refused = configs.set(group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "1",
                                  "share.bogus": "1"})
    assert set(refused) == {"share.record.lock.duration.ms", "share.bogus"}, refused
    assert "at least" in refused["share.record.lock.duration.ms"] and "Unknown" in refused["share.bogus"]
    assert configs.explicit([group, "sg-none"]) == ({group: {"share.auto.offset.reset": "earliest"},
                                                      "sg-none": {}}, {})
    assert group_configs(kafka_a.bootstrap, group) == {"share.auto.offset.reset": "earliest"}  # Kafka's tool


@pytest.mark.kafka
def test_clusters_without_share_groups_are_said_once_and_skipped(kafka_releases, kafka_a, caplog) -> None:
    """Kafka 3.9 has no share-group APIs; 4.1 has them off unless share.version=1 is finalized (UNSUPPORTED_VERSION):
    both are `SharesUnsupported`, which the sync says once and skips, never failing the round."""
    olds = kafka_releases.start({"k39": ("3.9.2", False), "k41": ("4.1.2", False)})
    group = unique_name("sg-x")
    GroupConfigAdmin({"bootstrap.servers": kafka_a.bootstrap}, "a").set(group, {"share.auto.offset.reset": "earliest"})
    for name, old in olds.items():
        admin = ShareGroupAdmin({"bootstrap.servers": old.bootstrap}, name)
        try:
            assert admin.list_groups() == {}  # ListGroups with the type filter is older than share groups
            with pytest.raises(SharesUnsupported, match=f"cluster '{name}' has share groups disabled|cluster "
                                                        f"'{name}' has no share groups"):
                admin.alter(group, {("t", 0): 1})
        finally:
            admin.close()
        sync = ShareGroupSync({"bootstrap.servers": kafka_a.bootstrap}, {"bootstrap.servers": old.bootstrap}, "a",
                              name, lambda g: True, timeout=10)
        try:
            row = ShareMove(group, "t", "a.t", 0, 5, 5, "set")
            for _ in range(2):
                out = sync.apply([row], force=True)
                assert out[0].action == "unsupported" and "share groups" in out[0].detail
                assert sync.carried == {}  # its configs not tried there (3.9 refuses GROUP config resources)
            assert sync.unsupported and sum("share groups are not carried" in r.message for r in caplog.records
                                            if name in r.message) == 1
        finally:
            sync.close()


@pytest.mark.kafka
def test_a_kafka_41_target_that_keeps_no_offset_is_not_called_set(kafka_releases, kafka_a) -> None:
    """Kafka 4.1 with share groups on (share.version=1, finalized with Kafka's own kafka-features) answers
    AlterShareGroupOffsets with no error and changes nothing, for a group it knows or not (as its own
    kafka-share-groups shows). The sync reads every offset it set back: those partitions are `failed`, saying so,
    never `set`, so a failover names the group as not moved."""
    k41 = kafka_releases.start({"k41-shares": ("4.1.2", False)})["k41-shares"]
    kafka_tool(install.tool_class(paths.KAFKA_VERSION, "FeatureCommand"), "--bootstrap-server", k41.bootstrap,
               "upgrade", "--feature", "share.version=1")
    remote = create_topic(k41.bootstrap, unique_name("a.sg41"), 1)
    produce_numbered(k41.bootstrap, remote, 1, 0, 10)
    known, unknown = unique_name("sg-41"), unique_name("sg-41-new")
    set_group_configs(k41.bootstrap, known, {"share.auto.offset.reset": "earliest"})
    assert len(share_consume(k41.bootstrap, remote, known, max_messages=4)) == 4  # the group exists, starts at 4
    admin = ShareGroupAdmin({"bootstrap.servers": k41.bootstrap}, "k41")
    sync = ShareGroupSync({"bootstrap.servers": kafka_a.bootstrap}, {"bootstrap.servers": k41.bootstrap}, "a",
                          "k41", lambda g: True, timeout=15)
    try:
        assert admin.start_offsets(known) == {(remote, 0): 4}
        rows = [ShareMove(g, remote.removeprefix("a-"), remote, 0, 7, 7, "set") for g in (known, unknown)]
        out = sync.apply(rows, force=True)
        assert [r.action for r in out] == ["failed", "failed"], out
        assert "kept no such start offset (Kafka 4.1" in out[0].detail and out[0].detail.endswith("starts at 4")
        assert out[1].detail.endswith("it has none")
        assert admin.start_offsets(known) == {(remote, 0): 4} and admin.start_offsets(unknown) == {}
        assert [line.split()[1:4] for line in described(k41.bootstrap, known)] == [[remote, "0", "4"]]
    finally:
        sync.close()
        admin.close()


@pytest.mark.kafka
def test_share_group_fails_over_without_loss(kafka_a, kafka_b, topic, flowgroup, job, figure) -> None:
    src = topic(kafka_a, 2)
    dst = f"a.{src}"
    group = unique_name("sg-app")
    cfg = flowgroup(src, mirror={"groups": "sg-.*", "syncGroupOffsets": True, "emitCheckpointsIntervalSeconds": 2})
    mirror = cfg.mirrors[0]
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    every = {(p, s) for p in range(2) for s in range(100)}
    running = job(cfg)
    wait_for(lambda: count_records(kafka_b.bootstrap, dst) == 200, 240, "the 200 records on the target")

    # the share group consumes part of the topic on the source; its configs are set there only
    configs = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
    set_group_configs(kafka_a.bootstrap, group, configs)
    on_source = share_consume(kafka_a.bootstrap, src, group, max_messages=130)  # one partition, and part of the other
    assert len(on_source) == 130
    source_rows = described(kafka_a.bootstrap, group)
    print("source share group:", *source_rows, sep="\n  ")

    # the console consumer acknowledges what it prints, in order, and releases the rest when it stops: each
    # partition it read continues after its last printed record. The records sit at the same offsets on the
    # target (a fresh topic copied whole), so the checkpoint rounds (syncGroupOffsets) set the same there; a
    # partition read to its end continues at the target's end, past the transaction's marker (markers.py)
    read = {p: sorted(s for q, s in on_source if q == p) for p in range(2)}
    starts = {(src, p): len(seqs) for p, seqs in read.items() if seqs}
    assert all(seqs == list(range(len(seqs))) for seqs in read.values())
    dst_admin = ShareGroupAdmin({"bootstrap.servers": kafka_b.bootstrap}, "b")
    try:
        ends = end_offsets(kafka_b.bootstrap, dst, 2)
        want = {(dst, p): off if off < 100 else ends[p] for (_t, p), off in starts.items()}
        wait_for(lambda: dst_admin.start_offsets(group) == want, 60, f"{want} set on the target by checkpoints")
    finally:
        dst_admin.close()
    # the rounds carried the group's configs with its offsets (the same round, just after them)
    dst_configs = GroupConfigAdmin({"bootstrap.servers": kafka_b.bootstrap}, "b")
    wait_for(lambda: dst_configs.explicit([group])[0] == {group: configs}, 30, f"{configs} set on the target")
    assert group_configs(kafka_b.bootstrap, group) == configs  # as kafka-configs describes the target group

    # failover: the mirror stops, the share group is set (or kept where the rounds set it) on the target
    doc = failover([cfg], mirror, lambda g: g == group, timeout=30)
    assert doc["ok"], doc
    shares = {r["partition"]: r for g in doc["shareGroups"] for r in g["partitions"]}
    assert {p: (r["action"], r["sourceOffset"], r["targetOffset"]) for p, r in shares.items()} == {
        p: ("kept", off, want[(dst, p)]) for (_t, p), off in starts.items()}
    assert doc["shareGroupsNotMoved"] == [] and doc["shareGroupsNote"] == ""
    assert [g["configs"] for g in doc["shareGroups"]] == [  # asked again: already on the target
        {"carried": configs, "changed": [], "leftOut": {}, "refused": {}, "error": ""}]
    print("target share group:", *described(kafka_b.bootstrap, group), sep="\n  ")

    # the rest consumed on the target: nothing missing; repeats counted
    on_target = share_consume(kafka_b.bootstrap, dst, group)
    missing = every - set(on_source) - set(on_target)
    duplicates = len(on_source) + len(on_target) - len(every) + len(missing)
    repeated_within = len(on_target) - len(set(on_target))
    figure("share records consumed on the source", len(on_source))
    figure("share records consumed on the target", len(on_target))
    figure("share records missing", len(missing))
    figure("share records delivered twice (allowed)", duplicates)
    print(f"share group {group}: {len(on_source)} on the source, {len(on_target)} on the target, "
          f"{len(missing)} missing, {duplicates} delivered on both")
    assert not missing, sorted(missing)[:20]
    assert repeated_within == 0  # the target group read each of its records once
    assert duplicates == 0  # every acknowledgement on the source was carried (a partition done: lag 0)
    # every duplicate lies past a partition's start offset on the source: acknowledged there, in flight by SPSO
    assert all(s >= starts.get((src, p), 0) for p, s in set(on_source) & set(on_target))
    running.proc.wait(120)


@pytest.mark.kafka
def test_share_group_clients_are_made_again_when_the_credentials_change(kafka_a, kafka_b, topic, flowgroup) -> None:
    """Rotated credentials (credentials.py) make the driver services' clients again (`metrics._renew`): the share
    groups' wire connections and config admins go with the checkpoint emitter holding them, and the next round's
    emitter makes its own from the client config read then."""
    cfg = flowgroup(topic(kafka_a, 1), mirror={"groups": "sg-.*", "syncGroupOffsets": True})
    services = DriverServices(cfg, heartbeats=False)
    m = services.mirrors["a-to-b"]
    m.credentials = CredentialWatch([cfg.cluster("a"), cfg.cluster("b")], every=0)
    m.credentials.current = "the credentials before a rotation"
    m.checkpoints = CheckpointEmitter(cfg, m.mirror)
    old = m.checkpoints.shares
    old._admin("a"), old._config_admin("a")  # as a round leaves them: a kafka-python IO thread, an AdminClient

    def io_threads() -> int:
        return sum(t.name.startswith("kafka-io-") and t.is_alive() for t in threading.enumerate())

    before = io_threads()
    try:
        services._tick(m, time.monotonic())  # sees the change: _renew
        assert m.checkpoints is None and old._admins == {} and old._configs == {}
        assert io_threads() == before - 1  # the old wire's thread stopped with it
    finally:
        services.stop()


def test_failover_report_names_share_groups_moved_and_not() -> None:
    from sparkmirror.failover.report import document, table

    rows = [ShareMove("sg-a", "t", "a.t", 0, 30, 30, "set"), ShareMove("sg-a", "t", "a.t", 1, 100, 101, "kept"),
            ShareMove("sg-b", "t", "a.t", 0, 7, 7, "active", "the group has members on the target"),
            ShareMove("sg-c", "t", "a.t", 0, 5, 5, "unsupported", "cluster 'b' has no share groups")]
    carried = {"sg-a": ConfigCarry("sg-a", {"share.auto.offset.reset": "earliest", "share.isolation.level":
                                            "read_committed"}, ("share.auto.offset.reset",),
                                   {"share.delivery.count.limit": UNKNOWN_ON_TARGET})}
    doc = document("a-to-b", "a", "b", "source", [], [], 0, shares=rows, share_configs=carried)
    assert [(g["group"], g["moved"]) for g in doc["shareGroups"]] == [("sg-a", True), ("sg-b", False),
                                                                      ("sg-c", True)]
    assert doc["shareGroupsNotMoved"] == ["sg-b"] and not doc["ok"]
    assert doc["shareGroups"][0]["configs"]["leftOut"] == {"share.delivery.count.limit": UNKNOWN_ON_TARGET}
    assert doc["shareGroups"][2]["configs"] is None  # not tried: the target serves no share groups
    text = table(doc)
    assert "share group sg-b: t[0] start 7 -> a.t[0]@7: active (the group has members" in text
    assert ("share group sg-a configs: share.auto.offset.reset=earliest (set), share.isolation.level=read_committed "
            "(kept), share.delivery.count.limit not carried: the target does not know it") in text, text
    ok = document("a-to-b", "a", "b", "source", [], [], 0, shares=rows[:2] + rows[3:], share_configs=carried)
    assert ok["ok"] and ok["shareGroupsNotMoved"] == []
    refused = document("a-to-b", "a", "b", "source", [], [], 0, shares=rows[:2], share_configs={
        "sg-a": ConfigCarry("sg-a", refused={"share.record.lock.duration.ms": "Value must be at least 1000"})})
    assert refused["shareGroupsNotMoved"] == ["sg-a"] and not refused["ok"]  # its consumers would differ there
