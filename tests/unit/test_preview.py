"""`sparkmirror plan`'s pure part: conflicts and loops from plain observations (topics and partitions), planned by
the same `plan_sync` that `TopicSync.sync()` applies."""
from __future__ import annotations

from sparkmirror.preview import CONFLICT_EXIT, MirrorObservation, preview
from sparkmirror.replication import policy_for
from sparkmirror.resource.flowgroup import CopyPath, FlowGroupConfig
from sparkmirror.runner.dryrun import lines
from sparkmirror.topicplan import SourceTopic, TargetTopic, plan_sync, topic_filter


def group(name: str, source: tuple[str, str], target: tuple[str, str], policy: str = "default",
          separator: str = ".") -> FlowGroupConfig:
    (sa, sb), (ta, tb) = source, target
    return FlowGroupConfig.model_validate({
        "name": name, "clusters": [{"alias": sa, "bootstrapServers": sb}, {"alias": ta, "bootstrapServers": tb}],
        "mirrors": [{"name": sa, "source": sa, "target": ta, "topics": "orders.*|.*\\.orders.*",
                     "replicationPolicy": policy, "separator": separator}]})


def observed(cfg: FlowGroupConfig, source_topics: dict[str, int], target_topics: dict[str, int],
             progress_cleanup: str | None = None) -> MirrorObservation:
    (m,) = cfg.mirrors
    plan = plan_sync(m, policy_for(m), topic_filter(cfg, m), {t: SourceTopic(t, n) for t, n in source_topics.items()},
                     {t: TargetTopic(t, n) for t, n in target_topics.items()})
    return MirrorObservation(cfg, m, plan, source_topics, target_topics, progress_cleanup)


def test_two_mirrors_writing_one_target_topic() -> None:
    east = group("east", ("east", "h1:9092"), ("central", "h3:9092"), policy="identity")
    west = group("west", ("west", "h2:9092"), ("hub", "h3:9092"), policy="identity")  # same cluster, other alias
    p = preview([observed(east, {"orders": 3}, {}), observed(west, {"orders": 2, "orders-eu": 1}, {})])
    (c,) = p.conflicts
    assert c["kind"] == "same-target-topic" and c["topic"] == "orders"
    assert "flow group east mirror east (from 'orders')" in c["message"]
    assert "flow group west mirror west (from 'orders')" in c["message"]
    text = "\n".join(lines(p.as_dict()))
    assert "1 conflict(s):" in text and "orders-eu" in text
    assert CONFLICT_EXIT not in (0, 1, 2)


def test_progress_topic_that_run_refuses() -> None:
    cfg = group("g", ("a", "h1:9092"), ("b", "h2:9092"))
    ok = preview([observed(cfg, {"orders": 1}, {cfg.progressTopic: 1}, "compact")])
    assert ok.conflicts == []
    assert ok.flow_groups[0]["mirrors"][0]["internalTopics"][0]["action"] == "exists"
    bad = preview([observed(cfg, {"orders": 1}, {cfg.progressTopic: 1}, "delete")])
    (c,) = bad.conflicts
    assert c["kind"] == "progress-topic" and "cleanup.policy=delete" in c["message"] and "refuses" in c["message"]


def test_loops_by_separator_and_policy_mix() -> None:
    there = group("there", ("a", "h1:9092"), ("b", "h2:9092"))
    same_back = group("back", ("b", "h2:9092"), ("a", "h1:9092"))
    other_sep = group("back", ("b", "h2:9092"), ("a", "h1:9092"), separator="_")
    identity_back = group("back", ("b", "h2:9092"), ("a", "h1:9092"), policy="identity")
    obs = observed(there, {"orders": 2, "b.orders": 1}, {})
    p = preview([obs, observed(same_back, {}, {})])
    assert p.conflicts == []
    assert [t["topic"] for t in p.flow_groups[0]["mirrors"][0]["notMirrored"]] == ["b.orders"]
    for back, name in ((other_sep, "b_a.orders"), (identity_back, "a.orders")):
        (c,) = preview([obs, observed(back, {}, {})]).conflicts
        assert c["kind"] == "loop" and c["topic"] == "a.orders" and f"as {name!r}" in c["message"], c
    # identity both ways copies names back, but provenance headers drop what came from the target: no loop
    both_identity = preview([observed(group("x", ("a", "h1:9092"), ("b", "h2:9092"), policy="identity"),
                                      {"orders": 1}, {}), observed(identity_back, {}, {})])
    assert both_identity.conflicts == []


def test_acl_actions_in_the_plan() -> None:
    """What ACL sync would do shows per mirror: bindings to create and delete, source bindings not copied and
    why; or why nothing is synced."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    from sparkmirror.aclplan import AclPlan
    from sparkmirror.aclsync import AclState

    def acl(name: str, op=AclOperation.READ) -> AclBinding:
        return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                          AclPermissionType.ALLOW)

    cfg = group("g", ("a", "h1:9092"), ("b", "h2:9092"))
    obs = observed(cfg, {"orders": 1}, {})
    obs.acls = AclState("ok", "", AclPlan([acl("a.orders")], [acl("a.old")],
                                          [(acl("orders", AclOperation.WRITE), "write-side: never copied")]))
    (m,) = preview([obs]).as_dict()["flowGroups"][0]["mirrors"]
    assert [b["name"] for b in m["acls"]["create"]] == ["a.orders"]
    assert m["acls"]["create"][0]["operation"] == "READ" and m["acls"]["create"][0]["patternType"] == "LITERAL"
    assert m["acls"]["skipped"][0]["reason"] == "write-side: never copied"
    text = "\n".join(lines(preview([obs]).as_dict()))
    assert "    ACLs: 1 to create, 1 to delete on the target (1 source ACL(s) not copied)" in text
    assert "      create ALLOW READ User:alice from * on TOPIC LITERAL a.orders" in text
    assert "      delete ALLOW READ User:alice from * on TOPIC LITERAL a.old" in text
    assert "      not copied: ALLOW WRITE User:alice from * on TOPIC LITERAL orders: write-side: never copied" in text

    obs.acls = AclState("no-authorizer", "target cluster 'b' has no authorizer: no ACLs to sync")
    assert "    ACLs: not synced: target cluster 'b' has no authorizer: no ACLs to sync" in \
        "\n".join(lines(preview([obs]).as_dict()))
    off = observed(cfg.model_copy(update={"mirrors": [replace_mirror(cfg, syncTopicAcls=False)]}), {"orders": 1}, {})
    assert "    ACLs: not synced: sync.topic.acls.enabled is false" in "\n".join(lines(preview([off]).as_dict()))


def replace_mirror(cfg: FlowGroupConfig, **kw):
    (m,) = cfg.mirrors
    return m.model_copy(update=kw)


def test_a_factor_the_target_cannot_hold_is_a_conflict() -> None:
    """`sparkmirror plan` says before `run` what a 1-broker target would refuse: the source topic's factor 3."""
    cfg = group("g", ("a", "h1:9092"), ("b", "h2:9092"))
    (m,) = cfg.mirrors
    sources = {"orders": SourceTopic("orders", 2, replication_factor=3), "orders-1": SourceTopic("orders-1", 1,
                                                                                                  replication_factor=1)}
    plan = plan_sync(m, policy_for(m), topic_filter(cfg, m), sources, {})
    p = preview([MirrorObservation(cfg, m, plan, {"orders": 2, "orders-1": 1}, {}, None, target_brokers=1)])
    (c,) = p.conflicts
    assert c["kind"] == "replication-factor" and c["topic"] == "a.orders"
    assert "topic 'a.orders' needs replication factor 3 (the source topic's) but cluster 'b' has 1 broker(s): set " \
           "replication.factor in mirrors[a]'s connector config to at most 1" in c["message"], c["message"]
    rows = {r["target"]: r["create"]["replicationFactor"] for r in p.flow_groups[0]["mirrors"][0]["topics"]}
    assert rows == {"a.orders": 3, "a.orders-1": 1}


def test_each_mirror_row_says_its_copy_path_and_why_it_falls_back() -> None:
    def batches(policy: str) -> FlowGroupConfig:
        cfg = group("g", ("a", "h1:9092"), ("b", "h2:9092"), policy=policy)
        return cfg.model_copy(update={"copy_path": CopyPath.BATCHES})

    (ident,) = preview([observed(batches("identity"), {"orders": 1}, {})]).flow_groups[0]["mirrors"]
    assert ident["copy"] == "records" and "identity replication policy" in ident["copyFallback"]
    (plain,) = preview([observed(batches("default"), {"orders": 1}, {})]).flow_groups[0]["mirrors"]
    assert plain["copy"] == "batches" and plain["copyFallback"] is None
    (default,) = preview([observed(group("g", ("a", "h1:9092"), ("b", "h2:9092")), {"orders": 1}, {})]
                         ).flow_groups[0]["mirrors"]
    assert default["copy"] == "batches" and default["copyFallback"] is None
    asked = group("g", ("a", "h1:9092"), ("b", "h2:9092")).model_copy(update={"copy_path": CopyPath.RECORDS})
    (records,) = preview([observed(asked, {"orders": 1}, {})]).flow_groups[0]["mirrors"]
    assert records["copy"] == "records" and records["copyFallback"] is None
    settings = asked.model_copy(update={"copyFallback": "spec.target.config[compression.type] is honoured by ..."})
    (fallback,) = preview([observed(settings, {"orders": 1}, {})]).flow_groups[0]["mirrors"]
    assert fallback["copy"] == "records" and "compression.type" in fallback["copyFallback"]
