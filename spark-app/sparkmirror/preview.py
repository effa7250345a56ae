"""`sparkmirror plan`: what `run` would do to the clusters, computed by the code `run` uses, writing nothing.

- *I/O* (`observe`): per mirror, `TopicSync.plan()` — the very read-and-plan step `TopicSync.sync()` applies when
  a mirror starts — plus the state of the topics `run` creates beside the data (the progress topic, heartbeats,
  checkpoints). Only metadata and configs are read: no topic, config, consumer group or offset is written.
- *pure* (`preview`): turns those observations into the plan people and scripts read: per flow group and mirror
  the topics copied (partitions, remote name, action), the loops the replication policy prevents, and the
  conflicts `run` would not resolve: two source topics or two mirrors writing one target topic, a topic that
  would be mirrored back to its origin, a progress topic `run` refuses.

ACLs (`sync.topic.acls.enabled`): per mirror, the bindings `run`'s ACL sync would create and delete on the
target and the source bindings in scope it does not copy, with why (`TopicSync.acl_state()`, which reads the
ACLs of both clusters and plans with `aclplan.plan_acl_sync`, writing nothing); or why nothing would be synced
(off, no authorizer, not allowed to read ACLs).

Deletion propagation (`deleteRemoteTopics`): per mirror, the remote topics it created whose source topic is gone
or was recreated, each with when it would be deleted (`TopicSync.deletion_plan()`, reading the mirror's topic
records, writing nothing), and the recreated source topics whose copy waits for that.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
import time
from dataclasses import dataclass, field
from typing import Any

from .aclplan import describe
from .aclsync import AclState
from .checkpoints import MM2_INTERNAL_TOPIC_CONFIG
from .progress import PROGRESS_TOPIC_CONFIG, progress_topic_problem
from .replicas import refusal_text
from .copypath import copy_path_of
from .replication import ReplicationPolicy, TopicFilter, policy_for, should_replicate_topic
from .resource.flowgroup import FlowGroupConfig, Mirror
from .topicdeletion import DeletionPlan
from .topicsync import TopicSync
from .topicplan import SyncPlan, topic_filter

CONFLICT_EXIT = 3  # `sparkmirror plan` found conflicts (1: a cluster unreachable, 2: bad input)


@dataclass
class MirrorObservation:
    """What was read for one mirror of one flow group."""

    config: FlowGroupConfig
    mirror: Mirror
    plan: SyncPlan
    source_topics: Mapping[str, int]        # every source topic -> partitions
    target_topics: Mapping[str, int]        # every target topic -> partitions
    progress_cleanup_policy: str | None     # of the existing progress topic (None: it does not exist)
    acls: AclState | None = None            # what ACL sync would do (None: not looked at)
    target_brokers: int | None = None       # brokers the target lists (None: not looked at)
    deletions: DeletionPlan | None = None   # what deletion propagation would do (None: off)
    now_ms: int = 0                         # when it was observed


@dataclass
class Preview:
    flow_groups: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"flowGroups": self.flow_groups, "conflicts": self.conflicts, "warnings": self.warnings}


# ---------------------------------------------------------------------------------------------- I/O

def observe(configs: Iterable[FlowGroupConfig], timeout: float = 15.0) -> list[MirrorObservation]:
    """Read what every mirror's start would act on; TopicSyncError names the cluster that does not answer."""
    out = []
    for cfg in configs:
        for m in cfg.mirrors:
            sync = TopicSync(cfg, m, timeout)
            try:
                plan = sync.plan()
                acls = sync.acl_state(plan.routes)
                now_ms = int(time.time() * 1000)
                deletions = sync.deletion_plan(now_ms) if m.deletion.enabled else None
                if deletions is not None:
                    plan.routes = [r for r in plan.routes if r.source_topic not in deletions.held]
                progress = None
                if cfg.progressTopic in sync.target_topics:
                    described = sync.describe_configs("target", [cfg.progressTopic]).get(cfg.progressTopic, {})
                    progress = getattr(described.get("cleanup.policy"), "value", None) or ""
            finally:
                sync.close()
            out.append(MirrorObservation(cfg, m, plan, dict(sync.source_topics), dict(sync.target_topics), progress,
                                         acls, sync.target_brokers, deletions, now_ms))
    return out


# ---------------------------------------------------------------------------------------------- pure

def cluster_key(config: FlowGroupConfig, alias: str) -> str:
    """One cluster, whatever alias a resource gives it: its sorted bootstrap servers."""
    return ",".join(sorted(s.strip() for s in config.cluster(alias).bootstrapServers.split(",") if s.strip()))


def prevented_cycles(policy: ReplicationPolicy, tfilter: TopicFilter, topics: Iterable[str],
                     target_alias: str) -> list[str]:
    """Source topics the filter selects that the policy keeps from going back to where they came from."""
    return sorted(t for t in topics if (tfilter.matches(t) or policy.is_heartbeats_topic(t))
                  and not policy.is_internal_topic(t) and policy.is_cycle(t, target_alias))


def _topic_row(route, plan: SyncPlan, target_topics: Mapping[str, int]) -> dict[str, Any]:
    row: dict[str, Any] = {"source": route.source_topic, "partitions": route.partitions, "target": route.target_topic}
    actions = []
    create = next((c for c in plan.create if c.name == route.target_topic), None)
    if create is not None:
        row["create"] = {"partitions": create.partitions, "replicationFactor": create.replication_factor,
                         "configs": dict(create.configs)}
        actions.append("create" + "".join(f" {k}={v}" for k, v in create.configs.items()))
    add = next((a for a in plan.add_partitions if a.name == route.target_topic), None)
    if add is not None:
        row["addPartitions"] = {"from": add.current, "to": add.total}
        actions.append(f"add partitions {add.current}->{add.total}")
    alter = next((a for a in plan.alter_configs if a.name == route.target_topic), None)
    if alter is not None:
        row["setConfigs"], row["resetConfigs"] = dict(alter.set), list(alter.delete)
        if alter.set:
            actions.append("update configs " + " ".join(f"{k}={v}" for k, v in alter.set.items()))
        if alter.delete:
            actions.append("reset configs " + " ".join(alter.delete))
    if not actions:
        more = target_topics.get(route.target_topic, 0) - route.partitions
        actions.append("up to date" + (f" (target has {more} more partitions, not copied)" if more > 0 else ""))
    row["action"] = "; ".join(actions)
    return row


def _acl_binding(b) -> dict[str, Any]:
    return {"resourceType": b.restype.name, "patternType": b.resource_pattern_type.name, "name": b.name,
            "principal": b.principal, "host": b.host, "operation": b.operation.name,
            "permission": b.permission_type.name, "text": describe(b)}


def _acl_view(obs: MirrorObservation) -> dict[str, Any]:
    """ACL sync's part of the plan: what it would create and delete on the target, what it does not copy."""
    state = obs.acls
    if not obs.mirror.syncTopicAcls:
        return {"status": "off", "message": "not synced: sync.topic.acls.enabled is false", "create": [],
                "delete": [], "skipped": []}
    if state is None:
        return {"status": "unknown", "message": "not looked at", "create": [], "delete": [], "skipped": []}
    plan = state.plan
    view: dict[str, Any] = {"status": state.status, "message": state.message, "create": [], "delete": [],
                            "skipped": []}
    if plan is not None:
        view["create"] = [_acl_binding(b) for b in plan.create]
        view["delete"] = [_acl_binding(b) for b in plan.delete]
        view["skipped"] = [{**_acl_binding(b), "reason": why} for b, why in plan.skipped]
    return view


def _internal_rows(obs: MirrorObservation) -> list[dict[str, Any]]:
    """The topics `run` creates on the target beside the data, and whether they exist."""
    cfg, m, have = obs.config, obs.mirror, obs.target_topics
    policy = policy_for(m)
    rows = [{"topic": cfg.progressTopic, "role": "progress", "configs": dict(PROGRESS_TOPIC_CONFIG),
             "action": "exists" if cfg.progressTopic in have else "create when the mirror starts"}]
    if m.emitHeartbeats:
        t = policy.heartbeats_topic()
        rows.append({"topic": t, "role": "heartbeats", "configs": dict(MM2_INTERNAL_TOPIC_CONFIG),
                     "action": "exists" if t in have else "create at the first heartbeat"})
    if m.emitCheckpoints:
        t = policy.checkpoints_topic(m.source)
        rows.append({"topic": t, "role": "checkpoints", "configs": dict(MM2_INTERNAL_TOPIC_CONFIG),
                     "action": "exists" if t in have else "create at the first checkpoint"})
    return rows


def _deletion_view(obs: MirrorObservation) -> dict[str, Any]:
    m = obs.mirror
    if obs.deletions is None:
        return {"enabled": False, "graceSeconds": m.deletion.graceSeconds, "delete": [], "held": []}
    rows = [{"topic": p.topic.remote, "source": p.topic.source, "reason": p.why,
             "goneSinceMs": p.topic.gone_ms if p.topic.gone_ms is not None else obs.now_ms, "dueMs": p.due_ms,
             "inSeconds": max(0.0, round((p.due_ms - obs.now_ms) / 1000, 1))}
            for p in obs.deletions.delete + obs.deletions.waiting]
    return {"enabled": True, "graceSeconds": m.deletion.graceSeconds,
            "delete": sorted(rows, key=lambda r: r["dueMs"]), "held": sorted(obs.deletions.held)}


def preview(observations: list[MirrorObservation], warnings: Iterable[str] = ()) -> Preview:
    """The plan of every flow group and the conflicts between and within its mirrors."""
    out = Preview(warnings=list(warnings))
    groups: dict[str, dict[str, Any]] = {}
    writers: dict[tuple[str, str], list[tuple[str, str, str]]] = {}  # (target cluster, topic) -> (group, mirror, src)
    for obs in observations:
        cfg, m = obs.config, obs.mirror
        policy, tfilter = policy_for(m), topic_filter(cfg, m)
        where = f"flow group {cfg.name}, mirror {m.name} ({m.source} -> {m.target})"
        group = groups.setdefault(cfg.name, {"name": cfg.name, "resource": cfg.resource, "mirrors": []})
        prevented = [{"topic": t, "reason": f"came from {m.target!r}: the replication policy does not mirror it "
                                            "back (loop prevented)"}
                     for t in prevented_cycles(policy, tfilter, obs.source_topics, m.target)]
        for topic, why in obs.plan.conflicts:
            out.conflicts.append({"kind": "name-collision", "flowGroup": cfg.name, "mirror": m.name, "topic": topic,
                                  "message": f"{where}: {why}"})
        if obs.progress_cleanup_policy is not None:
            problem = progress_topic_problem(cfg.progressTopic, obs.progress_cleanup_policy)
            if problem:
                out.conflicts.append({"kind": "progress-topic", "flowGroup": cfg.name, "mirror": m.name,
                                      "topic": cfg.progressTopic,
                                      "message": f"{where}: {problem}; `run` refuses to start"})
        for c in obs.plan.create:
            if obs.target_brokers is not None and c.replication_factor > obs.target_brokers:
                origin = "the source topic's" if m.replicationFactor is None else "replication.factor"
                why = refusal_text(None, c.name, c.replication_factor, obs.target_brokers,
                                   f"replication.factor in mirrors[{m.name}]'s connector config", m.target, origin)
                out.conflicts.append({"kind": "replication-factor", "flowGroup": cfg.name, "mirror": m.name,
                                      "topic": c.name, "message": f"{where}: {why}; `run` would stop there"})
        tkey = cluster_key(cfg, m.target)
        for r in obs.plan.routes:
            writers.setdefault((tkey, r.target_topic), []).append((cfg.name, m.name, r.source_topic))
        copy_path, fallback, _ = copy_path_of(cfg, m)
        group["mirrors"].append({
            "name": m.name, "source": m.source, "target": m.target, "replicationPolicy": policy.name,
            "lanes": cfg.lanes_of(m), "syncTopicConfigs": m.syncTopicConfigs,
            "copy": copy_path.value, "copyFallback": fallback or None,
            "topics": [_topic_row(r, obs.plan, obs.target_topics) for r in obs.plan.routes],
            "internalTopics": _internal_rows(obs), "notMirrored": prevented, "acls": _acl_view(obs),
            "deleteRemoteTopics": _deletion_view(obs)})
    out.flow_groups = list(groups.values())
    for (_, topic), who in sorted(writers.items()):
        mirrors = sorted({(g, mn) for g, mn, _ in who})
        if len(mirrors) > 1:
            names = ", ".join(f"flow group {g} mirror {mn} (from {s!r})" for g, mn, s in sorted(who))
            out.conflicts.append({"kind": "same-target-topic", "topic": topic,
                                  "message": f"target topic {topic!r} would be written by {len(mirrors)} mirrors: "
                                             f"{names}"})
    out.conflicts += loops(observations)
    return out


def loops(observations: list[MirrorObservation]) -> list[dict[str, Any]]:
    """Remote topics that a mirror the other way would copy back to the cluster they came from.

    Under the default policy with the same aliases both ways this never happens (the name says where a topic
    came from); it does when the two directions name a cluster differently or use different separators, or
    when one side does not stamp provenance headers (identity <-> default). Two identity mirrors copy names
    back and forth but drop every record that has already been on the target, so they are no loop.
    """
    found = []
    for x in observations:
        xs, xt = cluster_key(x.config, x.mirror.source), cluster_key(x.config, x.mirror.target)
        for y in observations:
            if cluster_key(y.config, y.mirror.source) != xt or cluster_key(y.config, y.mirror.target) != xs:
                continue
            px, py = policy_for(x.mirror), policy_for(y.mirror)
            if px.uses_provenance and py.uses_provenance:
                continue
            fy = topic_filter(y.config, y.mirror)
            for r in x.plan.routes:
                if should_replicate_topic(py, fy, r.target_topic, y.mirror.target):
                    back = py.format_remote_topic(y.mirror.source, r.target_topic)
                    found.append({
                        "kind": "loop", "topic": r.target_topic,
                        "message": f"loop: flow group {x.config.name} mirror {x.mirror.name} copies {r.source_topic!r} "
                                   f"to {r.target_topic!r} on {x.mirror.target!r}, and flow group {y.config.name} "
                                   f"mirror {y.mirror.name} would copy that back to its origin as {back!r} "
                                   f"(aliases or separators differ between the two directions, or one of them "
                                   f"uses the identity policy without the other)"})
    return found
