"""Topic sync against real KRaft clusters: creation with partitions and configs, growth, both directions,
identity names, recreated topics, unreachable clusters."""
from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions

from sparkmirror_dev.procs import free_port
from sparkmirror_dev.testing import create_topic, produce_numbered, recreate_topic, unique_name
from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig, Mirror
from sparkmirror import topicplan, topicsync
from sparkmirror.topicsync import TopicRecreated, TopicSync, TopicSyncError
from sparkmirror.topicplan import TopicRoute

pytestmark = pytest.mark.kafka


def flow(a, b, prefix: str, **mirror) -> FlowGroupConfig:
    mirrors = [Mirror(name="a-b", source="A", target="B", topics=re.escape(prefix) + ".*", **mirror)]
    return FlowGroupConfig(name="fg", clusters=[Cluster(alias="A", bootstrapServers=a.bootstrap),
                                                Cluster(alias="B", bootstrapServers=b.bootstrap)], mirrors=mirrors)


def topics_of(cluster) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    return {n: len(t.partitions) for n, t in md.topics.items()}


def dynamic_configs(cluster, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=10)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def alter(cluster, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
        for k, v in configs.items()])
    admin.incremental_alter_configs([res])[res].result(timeout=10)


def own(routes: list[TopicRoute]) -> list[TopicRoute]:
    """Routes of this test's topics: MM2 mirrors heartbeats topics whatever the pattern, and other tests on
    the shared clusters create them."""
    return [r for r in routes if not r.source_topic.endswith("heartbeats")]


def sync_until(sync: TopicSync, ok, timeout: float = 20.0) -> list[TopicRoute]:
    """Metadata of a just-created topic or partition reaches every broker cache within moments: sync again."""
    deadline = time.monotonic() + timeout
    while True:
        routes = own(sync.sync())
        if ok(routes) or time.monotonic() > deadline:
            return routes
        time.sleep(0.3)


def test_creates_remote_topics_with_partitions_and_configs(kafka_a, kafka_b, request) -> None:
    prefix = unique_name("ts-create")
    t1 = create_topic(kafka_a.bootstrap, f"{prefix}-one", 3, {"retention.ms": "3600000", "min.insync.replicas": "1",
                                                            "max.message.bytes": "2000000"})
    t2 = create_topic(kafka_a.bootstrap, f"{prefix}-two", 1, {"cleanup.policy": "compact"})
    create_topic(kafka_a.bootstrap, f"{prefix}-x.internal", 1)  # excluded by the default topicsExclude
    cfg = flow(kafka_a, kafka_b, prefix, syncTopicConfigsIntervalSeconds=0.001)
    sync = TopicSync(cfg, cfg.mirrors[0])
    routes = own(sync.sync())
    assert routes == [TopicRoute(t1, f"A.{t1}", 3), TopicRoute(t2, f"A.{t2}", 1)]
    on_b = topics_of(kafka_b)
    assert on_b[f"A.{t1}"] == 3 and on_b[f"A.{t2}"] == 1 and f"A.{prefix}-x.internal" not in on_b
    assert dynamic_configs(kafka_b, f"A.{t1}") == {"retention.ms": "3600000", "max.message.bytes": "2000000"}
    assert dynamic_configs(kafka_b, f"A.{t2}") == {"cleanup.policy": "compact"}

    # grow while running: a partition, a new topic, a changed and a removed config
    admin_a = AdminClient({"bootstrap.servers": kafka_a.bootstrap})
    admin_a.create_partitions([NewPartitions(t2, 4)])[t2].result(10)
    t3 = create_topic(kafka_a.bootstrap, f"{prefix}-three", 2)
    alter(kafka_a, t1, {"retention.ms": "7200000", "max.message.bytes": None})
    # the source broker may answer with the old configs for a moment after the alter returns: a later sync
    # carries the change, so wait for it on the target as well
    routes = sync_until(sync, lambda rs: len(rs) == 3 and rs[2].partitions == 4
                        and dynamic_configs(kafka_b, f"A.{t1}") == {"retention.ms": "7200000"})
    assert routes == [TopicRoute(t1, f"A.{t1}", 3), TopicRoute(t3, f"A.{t3}", 2), TopicRoute(t2, f"A.{t2}", 4)]
    on_b = topics_of(kafka_b)
    assert on_b[f"A.{t2}"] == 4 and on_b[f"A.{t3}"] == 2
    assert dynamic_configs(kafka_b, f"A.{t1}") == {"retention.ms": "7200000"}
    assert sync.end_offsets[(t2, 3)] == 0 and sync.problems == []


def test_both_directions_without_loops(kafka_a, kafka_b) -> None:
    prefix = unique_name("ts-loop")
    ta = create_topic(kafka_a.bootstrap, f"{prefix}-ona", 2)
    tb = create_topic(kafka_b.bootstrap, f"{prefix}-onb", 1)
    clusters = [Cluster(alias="A", bootstrapServers=kafka_a.bootstrap),
                Cluster(alias="B", bootstrapServers=kafka_b.bootstrap)]
    # the pattern matches remote names too ("A.<prefix>..."), so only the cycle rule keeps them back
    pattern = f"(A\\.|B\\.)*{re.escape(prefix)}.*"
    cfg = FlowGroupConfig(name="fg", clusters=clusters, mirrors=[
        Mirror(name="a-b", source="A", target="B", topics=pattern),
        Mirror(name="b-a", source="B", target="A", topics=pattern)])
    ab, ba = TopicSync(cfg, cfg.mirrors[0]), TopicSync(cfg, cfg.mirrors[1])
    for _ in range(3):
        r_ab, r_ba = own(ab.sync()), own(ba.sync())
    assert r_ab == [TopicRoute(ta, f"A.{ta}", 2)]
    assert r_ba == [TopicRoute(tb, f"B.{tb}", 1)]
    names = [n for n in [*topics_of(kafka_a), *topics_of(kafka_b)] if prefix in n]
    assert sorted(names) == sorted([ta, tb, f"A.{ta}", f"B.{tb}"])


def test_identity_policy_keeps_names(kafka_a, kafka_b) -> None:
    prefix = unique_name("ts-ident")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 2, {"retention.ms": "600000"})
    cfg = flow(kafka_a, kafka_b, prefix, replicationPolicy="identity")
    assert own(TopicSync(cfg, cfg.mirrors[0]).sync()) == [TopicRoute(t, t, 2)]
    assert topics_of(kafka_b)[t] == 2 and dynamic_configs(kafka_b, t) == {"retention.ms": "600000"}


def test_created_with_configs_even_without_config_sync(kafka_a, kafka_b) -> None:
    prefix = unique_name("ts-nosync")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 2, {"cleanup.policy": "compact"})
    cfg = flow(kafka_a, kafka_b, prefix, syncTopicConfigs=False)
    sync = TopicSync(cfg, cfg.mirrors[0])
    assert own(sync.sync()) == [TopicRoute(t, f"A.{t}", 2)]
    assert dynamic_configs(kafka_b, f"A.{t}") == {"cleanup.policy": "compact"}
    alter(kafka_a, t, {"retention.ms": "600000"})
    sync.sync()
    assert dynamic_configs(kafka_b, f"A.{t}") == {"cleanup.policy": "compact"}  # not kept in sync afterwards


def test_recreated_source_topic_is_reported(kafka_a, kafka_b) -> None:
    prefix = unique_name("ts-recreate")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 1)
    cfg = flow(kafka_a, kafka_b, prefix)
    sync = TopicSync(cfg, cfg.mirrors[0])
    sync.sync()
    recreate_topic(kafka_a.bootstrap, t, 1)
    with pytest.raises(TopicRecreated, match=f"source topic '{t}' was deleted and recreated"):
        for _ in range(20):  # metadata of the recreated topic reaches the broker's cache within moments
            sync.sync()
            time.sleep(0.5)
    assert [p.kind for p in sync.problems] == ["recreated"]


def test_offsets_staying_backwards_without_topic_ids_are_reported(kafka_a, kafka_b, monkeypatch) -> None:
    prefix = unique_name("ts-trunc")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 1)
    cfg = flow(kafka_a, kafka_b, prefix).model_copy(update={"sourceGapPolicy": "skip"})
    sync = TopicSync(cfg, cfg.mirrors[0])
    monkeypatch.setattr(topicsync, "topic_ids", lambda *a, **k: {})  # a broker older than KIP-516
    sync.sync()
    sync.end_offsets[(t, 0)] = 10  # as if the previous sync had seen 10 records; the topic is empty now
    monkeypatch.setattr(topicsync, "TRUNCATION_SECONDS", 0.5)
    sync.sync()
    assert sync.problems == []  # once could be a new leader's lagging high watermark
    time.sleep(0.6)
    sync.sync()
    assert [(p.kind, p.topic) for p in sync.problems] == [("recreated", t)]
    assert "went backwards and stayed there" in sync.problems[0].message


def test_end_offsets_going_back_under_the_same_topic_id_are_no_truncation(kafka_a, kafka_b, monkeypatch) -> None:
    """A source broker SIGKILLed on a 3-broker cluster: the new leader's high watermark lagged the old one's (for
    more than 30 s once), and the mirror ended with 'recreated or truncated' (sourceGapPolicy=fail) in the fault
    campaign. The topic id says it is the same log; a real truncation is the lanes' to meet (KIP-320)."""
    prefix = unique_name("ts-blip")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-t", 1)
    cfg = flow(kafka_a, kafka_b, prefix)  # sourceGapPolicy: fail
    sync = TopicSync(cfg, cfg.mirrors[0])
    sync.sync()
    sync.end_offsets[(t, 0)] = 5  # the old leader's high watermark; the new leader's is still 0
    monkeypatch.setattr(topicsync, "TRUNCATION_SECONDS", 0.5)
    sync.sync()
    time.sleep(0.6)
    sync.sync()  # still behind, past the time that counts without topic ids
    assert sync.problems == []
    produce_numbered(kafka_a.bootstrap, t, 1, 0, 5)  # caught up
    sync.sync()
    assert sync.problems == [] and sync.end_offsets[(t, 0)] == 5


def test_unreachable_bootstrap_names_the_field(kafka_b) -> None:
    port = free_port()
    cfg = FlowGroupConfig(name="fg", clusters=[Cluster(alias="A", bootstrapServers=f"127.0.0.1:{port}"),
                                               Cluster(alias="B", bootstrapServers=kafka_b.bootstrap)],
                          mirrors=[Mirror(name="a-b", source="A", target="B")])
    with pytest.raises(TopicSyncError, match=re.escape(f"clusters[A].bootstrapServers=127.0.0.1:{port}")):
        TopicSync(cfg, cfg.mirrors[0], timeout=3).sync()


def test_creates_alters_and_grows_in_requests_within_the_controllers_limit(kafka_a, kafka_b, monkeypatch) -> None:
    """A KRaft controller refuses an admin request of over 10,000 metadata records, which mirroring 1,000 new
    topics of 10 partitions asks for: the sync splits its requests. A limit of 4 records here makes each topic a
    request of its own, the real brokers must still end with every topic, partition and config."""
    monkeypatch.setattr(topicplan, "MAX_RECORDS_PER_REQUEST", 4)
    asked: list[int] = []
    real_create = AdminClient.create_topics

    def counting_create(self, topics, **kw):  # noqa: ANN001, ANN202
        asked.append(len(topics))
        return real_create(self, topics, **kw)

    prefix = unique_name("ts-batch")
    names = [create_topic(kafka_a.bootstrap, f"{prefix}-{i}", 2, {"retention.ms": "3600000"}) for i in range(3)]
    monkeypatch.setattr(AdminClient, "create_topics", counting_create)
    cfg = flow(kafka_a, kafka_b, prefix, syncTopicConfigsIntervalSeconds=0.001)
    sync = TopicSync(cfg, cfg.mirrors[0])
    assert own(sync.sync()) == [TopicRoute(n, f"A.{n}", 2) for n in names]
    assert asked == [1, 1, 1]  # 2 partitions + the topic + 1 config = 4 records each
    for n in names:
        assert topics_of(kafka_b)[f"A.{n}"] == 2 and dynamic_configs(kafka_b, f"A.{n}") == {"retention.ms": "3600000"}

    admin_a = AdminClient({"bootstrap.servers": kafka_a.bootstrap})
    for n in names:
        admin_a.create_partitions([NewPartitions(n, 5)])[n].result(10)
        alter(kafka_a, n, {"retention.ms": "7200000", "cleanup.policy": "compact"})
    routes = sync_until(sync, lambda rs: all(r.partitions == 5 for r in rs) and all(
        dynamic_configs(kafka_b, f"A.{n}") == {"retention.ms": "7200000", "cleanup.policy": "compact"} for n in names))
    assert routes == [TopicRoute(n, f"A.{n}", 5) for n in names]
    assert all(topics_of(kafka_b)[f"A.{n}"] == 5 for n in names) and sync.problems == []


def test_routes_are_handed_over_before_the_slower_checks(kafka_a, kafka_b, monkeypatch) -> None:
    """`routed` gets the routes with their remote topics created and known, before ACL sync and the
    recreated-topic check run (the planner of a new topic's first epoch waits only for the former)."""
    prefix = unique_name("ts-routed")
    t = create_topic(kafka_a.bootstrap, f"{prefix}-one", 2)
    cfg = flow(kafka_a, kafka_b, prefix)
    sync = TopicSync(cfg, cfg.mirrors[0])
    seen: list = []
    checked = sync._check_recreated
    monkeypatch.setattr(sync, "_check_recreated", lambda routes: (seen.append("checked"), checked(routes)))
    routes = own(sync.sync(routed=lambda rs: seen.append(own(rs))))
    assert routes == [TopicRoute(t, f"A.{t}", 2)]
    assert seen == [routes, "checked"]
    assert topics_of(kafka_b)[f"A.{t}"] == 2
