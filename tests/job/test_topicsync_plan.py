"""Pure planning of topic sync: selection, creation, partitions, MM2's config filter."""
from __future__ import annotations

from sparkmirror.resource.flowgroup import DEFAULT_CONFIG_PROPERTIES_EXCLUDE, Mirror
from sparkmirror.replication import DefaultReplicationPolicy, IdentityReplicationPolicy, TopicFilter
from sparkmirror.topicplan import AddPartitions, AlterConfigs, ConfigValue, CreateTopic, SourceTopic, TargetTopic, TopicRoute, plan_sync, replicable_configs

M = Mirror(name="a-b", source="A", target="B")
F = TopicFilter(M.topics, M.topicsExclude, frozenset({"sparkmirror.progress.internal"}))


def cv(value: str, dynamic: bool = True, **kw) -> ConfigValue:
    return ConfigValue(value, dynamic, **kw)


def test_config_filter_follows_mm2_defaults() -> None:
    cfg = {"retention.ms": cv("1000"), "cleanup.policy": cv("compact"), "min.insync.replicas": cv("2"),
           "message.timestamp.type": cv("LogAppendTime"), "segment.bytes": cv("1073741824", dynamic=False),
           "unclean.leader.election.enable": cv("true"), "secret": cv("x", sensitive=True),
           "ro": cv("y", read_only=True), "leader.replication.throttled.replicas": cv("*")}
    assert replicable_configs(cfg, DEFAULT_CONFIG_PROPERTIES_EXCLUDE) == {"cleanup.policy": "compact",
                                                                         "retention.ms": "1000"}
    assert replicable_configs(cfg, ["retention\\..*"])["min.insync.replicas"] == "2"
    assert "retention.ms" not in replicable_configs(cfg, ["retention\\..*"])


def test_plan_creates_raises_and_alters() -> None:
    sources = {
        "new": SourceTopic("new", 4, {"retention.ms": cv("5000"), "min.insync.replicas": cv("2")}),
        "grown": SourceTopic("grown", 6, None),
        "changed": SourceTopic("changed", 2, {"retention.ms": cv("7"), "cleanup.policy": cv("compact")}),
        "B.back": SourceTopic("B.back", 1, {}),                 # came from the target: a cycle
        "__consumer_offsets": SourceTopic("__consumer_offsets", 5, {}),
        "x.internal": SourceTopic("x.internal", 1, {}),         # topicsExclude default
        "sparkmirror.progress.internal": SourceTopic("sparkmirror.progress.internal", 1, {}),
    }
    targets = {
        "A.grown": TargetTopic("A.grown", 3, None),
        "A.changed": TargetTopic("A.changed", 5, {"retention.ms": cv("9"), "segment.ms": cv("100"),
                                                  "min.insync.replicas": cv("1")}),
    }
    plan = plan_sync(M, DefaultReplicationPolicy(), F, sources, targets, DEFAULT_CONFIG_PROPERTIES_EXCLUDE)
    assert plan.routes == [TopicRoute("changed", "A.changed", 2), TopicRoute("grown", "A.grown", 6),
                           TopicRoute("new", "A.new", 4)]
    assert plan.create == [CreateTopic("A.new", 4, {"retention.ms": "5000"})]
    assert plan.add_partitions == [AddPartitions("A.grown", 6, 3)]       # grown; A.changed has more: left alone
    # set what differs, reset what the source no longer sets, keep excluded properties of the target
    assert plan.alter_configs == [AlterConfigs("A.changed", {"cleanup.policy": "compact", "retention.ms": "7"},
                                               ("segment.ms",))]


def test_no_config_sync_when_disabled_but_created_with_configs() -> None:
    m = M.model_copy(update={"syncTopicConfigs": False})
    plan = plan_sync(m, DefaultReplicationPolicy(), F,
                     {"t": SourceTopic("t", 1, {"retention.ms": cv("1")}),
                      "u": SourceTopic("u", 2, {"cleanup.policy": cv("compact")})},
                     {"A.t": TargetTopic("A.t", 1, {"retention.ms": cv("2")})})
    assert plan.alter_configs == []
    # MM2's createNewTopics copies the configs whatever sync.topic.configs.enabled says
    assert plan.create == [CreateTopic("A.u", 2, {"cleanup.policy": "compact"})]


def test_identity_plan_keeps_names_but_prefixes_heartbeats() -> None:
    m = M.model_copy(update={"replicationPolicy": "identity"})
    plan = plan_sync(m, IdentityReplicationPolicy(), F, {"t": SourceTopic("t", 2, {}),
                                                         "heartbeats": SourceTopic("heartbeats", 1, {})}, {})
    assert plan.routes == [TopicRoute("heartbeats", "A.heartbeats", 1), TopicRoute("t", "t", 2)]
    assert [c.name for c in plan.create] == ["A.heartbeats", "t"]



def test_new_remote_topics_take_the_source_factor_unless_set() -> None:
    """None (the default): the source topic's; MM2's replication.factor when set; -1 when the source's is not known
    (the target broker's default)."""
    from types import SimpleNamespace

    from sparkmirror.replicas import source_factor

    parts = {0: SimpleNamespace(replicas=[1, 2, 3]), 1: SimpleNamespace(replicas=[2, 3, 1, 4])}  # 1: reassigning
    assert source_factor(parts) == 3 and source_factor({}) is None
    sources = {"t": SourceTopic("t", 2, {}, replication_factor=3), "u": SourceTopic("u", 1, {})}
    plan = plan_sync(M, DefaultReplicationPolicy(), F, sources, {})
    assert plan.create == [CreateTopic("A.t", 2, {}, 3), CreateTopic("A.u", 1, {}, -1)]
    m = M.model_copy(update={"replicationFactor": 2})
    assert [c.replication_factor for c in plan_sync(m, DefaultReplicationPolicy(), F, sources, {}).create] == [2, 2]
